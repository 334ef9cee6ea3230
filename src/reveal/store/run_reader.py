"""Read a run directory (closed Parquet segments plus the crash journal) into Telemetry."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.store.layout import JOURNAL_DIR, SEGMENTS_DIR, TIME_COLUMN, read_meta


def _read_segment(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"unreadable Parquet segment ({exc})", str(path)) from None


def _read_journal(path: Path) -> tuple[pa.Table | None, bool]:
    """Every complete record batch of an Arrow IPC stream; True when a tail was dropped."""
    batches: list[pa.RecordBatch] = []
    truncated = False
    try:
        with open(path, "rb") as handle:
            reader = ipc.open_stream(handle)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (OSError, pa.ArrowException):
                    truncated = True
                    break
            schema = reader.schema
    except (OSError, pa.ArrowException):
        return None, True  # not even a schema was written: nothing to recover
    if not batches:
        return None, truncated
    return pa.Table.from_batches(batches, schema=schema), truncated


def _number(path: Path) -> int:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        return -1


def read_run(run: str | Path) -> Telemetry:
    """Read a whole run: the union of channels over segments, NaN where one is absent.

    Raises :class:`InputError` naming the file for a missing/unreadable metadata file or
    segment, a run with no samples, or timestamps that go backwards.
    """
    run = Path(run)
    meta = read_meta(run)
    tables: list[tuple[int, pa.Table, Path]] = []
    seg_numbers = set()
    for path in sorted((run / SEGMENTS_DIR).glob("*.parquet")):
        tables.append((_number(path), _read_segment(path), path))
        seg_numbers.add(_number(path))
    recovered: list[str] = []
    for path in sorted((run / JOURNAL_DIR).glob("*.arrows")):
        if _number(path) in seg_numbers:
            continue  # closed segment whose journal was not yet removed
        table, truncated = _read_journal(path)
        if truncated:
            recovered.append(path.name)
        if table is not None:
            tables.append((_number(path), table, path))
    if recovered:
        warnings.warn(f"{run}: dropped a truncated tail of journal {', '.join(recovered)}",
                      stacklevel=2)
        meta.setdefault("warnings", []).append(
            f"truncated journal tail dropped: {', '.join(recovered)}")
    tables.sort(key=lambda item: item[0])
    if not tables or sum(t.num_rows for _, t, _ in tables) == 0:
        raise InputError("run has no samples", str(run))

    channels: list[str] = []
    seen: set[str] = set()
    for _, table, path in tables:
        if TIME_COLUMN not in table.column_names:
            raise InputError(f"segment has no {TIME_COLUMN} column", str(path))
        for name in table.column_names:
            if name != TIME_COLUMN and name not in seen:
                seen.add(name)
                channels.append(name)
    index = {name: i for i, name in enumerate(channels)}
    total = sum(t.num_rows for _, t, _ in tables)
    timestamps = np.empty(total, dtype=np.int64)
    values = np.full((total, len(channels)), np.nan, dtype=np.float64)
    row = 0
    for _, table, _ in tables:
        n = table.num_rows
        timestamps[row:row + n] = table.column(TIME_COLUMN).to_numpy(zero_copy_only=False)
        for name in table.column_names:
            if name == TIME_COLUMN:
                continue
            column = table.column(name).cast(pa.float64()).fill_null(np.nan)
            values[row:row + n, index[name]] = column.to_numpy(zero_copy_only=False)
        row += n
    if np.any(np.diff(timestamps) <= 0):
        order = np.argsort(timestamps, kind="stable")
        timestamps, values = timestamps[order], values[order]
        keep = np.concatenate(([True], np.diff(timestamps) > 0))
        if not keep.all():
            meta.setdefault("warnings", []).append(
                f"{int((~keep).sum())} samples with repeated timestamps dropped")
        timestamps, values = timestamps[keep], values[keep]
    meta["path"] = str(run)
    return Telemetry(str(meta.get("host", run.name)), timestamps, values, channels, meta)
