"""Read a run directory (closed Parquet segments plus the crash journal) into Telemetry.

Any time range and channel subset can be read, or the run iterated in time-ordered chunks
of bounded size. Only what is asked for is read: segments (and row groups) whose ``ts_ns``
statistics fall outside the range are skipped, and only the wanted columns are decoded.

Times are **nanoseconds on the recording host's monotonic clock, as stored** in ``ts_ns``
(the clock of ``meta["start_mono_ns"]`` and events.jsonl): ``start_ns`` inclusive,
``end_ns`` exclusive. For seconds from the start of the run use
``meta["start_mono_ns"] + round(s * 1e9)``.

Channel subsets: ``channels`` are exact channel names (each must exist in the run),
``metrics`` are prefixes of the metric part (``"cpu."`` selects ``cpu.user{cpu=0}``, ...).
Both may be given; the result keeps the run's channel order.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reveal.errors import InputError
from reveal.frame import Telemetry, channel_metric
from reveal.store.journal import JOURNAL_SUFFIXES, Journal, read_journal
from reveal.store.layout import JOURNAL_DIR, SEGMENTS_DIR, TIME_COLUMN, file_number, read_meta

#: Values decoded at once when reading (rows per batch = this ÷ columns): about 8 MiB.
BATCH_VALUES = 1 << 20
#: Default rows per chunk of :meth:`RunReader.iter_chunks` (about 7 min at 100 ms).
CHUNK_ROWS = 4096


@dataclass
class _RowGroup:
    index: int
    num_rows: int
    ts_min: int | None  # None when the file has no statistics for ts_ns
    ts_max: int | None


@dataclass
class _Source:
    """One segment file or journal, as found when the run was opened."""

    number: int
    path: Path
    channels: list[str]
    num_rows: int
    groups: list[_RowGroup] = field(default_factory=list)  # segments
    journal: Journal | None = None  # journals (read whole when the run is opened)

    @property
    def channel_set(self) -> set[str]:
        return set(self.channels)


class _Order:
    """Running state of a read: the last time emitted and the rows dropped for it."""

    def __init__(self) -> None:
        self.last = np.iinfo(np.int64).min
        self.repeated = 0


def _as_names(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else [str(v) for v in value]


class RunReader:
    """An opened run directory: metadata, channels, and reads of any range or subset.

    Opening reads ``meta.json``, every segment's Parquet footer (not its data) and every
    journal (a journal holds at most the open segment; reading it checks its records'
    checksums, so a torn or corrupt tail is reported now: a ``UserWarning``, an entry in
    ``meta["warnings"]`` and in ``meta["recovery"]``).

    Attributes
    ----------
    run : Path
    meta : dict
        ``meta.json`` plus ``path``, and ``warnings`` / ``recovery`` when something was
        dropped or the run did not end cleanly.
    channels : list of str
        Union of the channels of every segment and journal, in order of appearance.
    """

    def __init__(self, run: str | Path) -> None:
        self.run = Path(run)
        self.meta: dict[str, Any] = read_meta(self.run)
        self.meta["path"] = str(self.run)
        self.sources = self._find_sources()
        self.channels: list[str] = []
        seen: set[str] = set()
        for source in self.sources:
            for name in source.channels:
                if name not in seen:
                    seen.add(name)
                    self.channels.append(name)
        if self.meta.get("closed") is not True:
            self._warn("run not closed: still recording, or the collector ended without "
                       "writing its final metadata (killed, or a full disk); its stats are "
                       "from the last update of meta.json", issue=False)

    # -- opening -----------------------------------------------------------------------------
    def _warn(self, message: str, issue: bool = True) -> None:
        self.meta.setdefault("warnings", []).append(message)
        if issue:
            warnings.warn(f"{self.run}: {message}", stacklevel=3)

    def _find_sources(self) -> list[_Source]:
        # Journals first: a journal removed once its segment is written is then found as
        # that segment; the other order could miss both.
        journals: list[_Source] = []
        damaged: list[dict[str, Any]] = []
        folder = self.run / JOURNAL_DIR
        paths = sorted(p for p in folder.glob("*") if p.name.endswith(JOURNAL_SUFFIXES)) \
            if folder.is_dir() else []
        for path in paths:
            try:
                journal = read_journal(path)
            except FileNotFoundError:
                continue  # its segment was written meanwhile
            except OSError as exc:
                raise InputError(f"unreadable journal ({exc.strerror or exc})",
                                 str(path)) from None
            if journal.damage is not None:
                damaged.append(journal.damage.as_dict())
                self._warn(journal.damage.describe())
            if journal.schema is None or TIME_COLUMN not in journal.schema.names:
                continue
            journals.append(_Source(file_number(path), path, journal.channels,
                                    journal.num_rows, journal=journal))
        segments = [self._segment(path) for path in sorted((self.run / SEGMENTS_DIR)
                                                           .glob("*.parquet"))]
        numbers = {s.number for s in segments}
        # a journal under a segment's number was closed into it but not yet removed
        sources = segments + [j for j in journals if j.number not in numbers]
        sources.sort(key=lambda s: (s.number, s.journal is not None))
        if damaged:
            recovery = self.meta.setdefault("recovery", {})
            recovery["journals"] = damaged
            recovery["dropped_bytes"] = sum(int(d["dropped_bytes"]) for d in damaged)
        return sources

    def _segment(self, path: Path) -> _Source:
        try:
            metadata = pq.ParquetFile(path).metadata
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet segment ({exc})", str(path)) from None
        names = list(metadata.schema.names)
        if TIME_COLUMN not in names:
            raise InputError(f"segment has no {TIME_COLUMN} column", str(path))
        ts_index = names.index(TIME_COLUMN)
        groups = []
        for i in range(metadata.num_row_groups):
            group = metadata.row_group(i)
            stats = group.column(ts_index).statistics
            if stats is not None and stats.has_min_max:
                groups.append(_RowGroup(i, group.num_rows, int(stats.min), int(stats.max)))
            else:
                groups.append(_RowGroup(i, group.num_rows, None, None))
        return _Source(file_number(path), path, [n for n in names if n != TIME_COLUMN],
                       metadata.num_rows, groups)

    # -- selection ---------------------------------------------------------------------------
    def select_channels(self, channels: str | Iterable[str] | None = None,
                        metrics: str | Iterable[str] | None = None) -> list[str]:
        """The run's channels named in ``channels`` or whose metric starts with one of
        ``metrics`` (all when both are None), in the run's order. An exact name the run
        does not have is an :class:`InputError`."""
        exact, prefixes = _as_names(channels), _as_names(metrics)
        if exact is None and prefixes is None:
            return list(self.channels)
        wanted = set(exact or [])
        known = set(self.channels)
        unknown = [c for c in exact or [] if c not in known]
        if unknown:
            shown = ", ".join(repr(c) for c in unknown[:5])
            raise InputError(f"no channel {shown} in this run ({len(self.channels)} channels)",
                             str(self.run))
        starts = tuple(prefixes or ())
        return [c for c in self.channels if c in wanted or channel_metric(c).startswith(starts)]

    def span_ns(self) -> tuple[int, int] | None:
        """First and last ``ts_ns`` of the run from segment statistics and journals
        (monotonic ns; None when the run holds no rows)."""
        lows, highs = [], []
        for source in self.sources:
            if source.journal is not None:
                for batch in source.journal.batches:
                    if batch.num_rows:
                        ts = batch.column(0).to_numpy()
                        lows.append(int(ts.min()))
                        highs.append(int(ts.max()))
            for group in source.groups:
                if group.num_rows and group.ts_min is not None and group.ts_max is not None:
                    lows.append(group.ts_min)
                    highs.append(group.ts_max)
                elif group.num_rows:
                    ts = self._segment_ts(source, group.index)
                    lows.append(int(ts.min()))
                    highs.append(int(ts.max()))
        return (min(lows), max(highs)) if lows else None

    def _segment_ts(self, source: _Source, group: int) -> np.ndarray:
        try:
            table = pq.ParquetFile(source.path, page_checksum_verification=True) \
                .read_row_group(group, columns=[TIME_COLUMN])
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet segment ({exc})", str(source.path)) from None
        return table.column(0).to_numpy()

    # -- reading -----------------------------------------------------------------------------
    def read(self, start_ns: int | None = None, end_ns: int | None = None,
             channels: str | Iterable[str] | None = None,
             metrics: str | Iterable[str] | None = None) -> Telemetry:
        """Rows with ``start_ns <= ts_ns < end_ns`` (monotonic ns) of the selected channels.

        Memory: the result (rows × channels × 8 bytes) plus one batch of about 8 MiB.
        With no range and no subset, a run without samples is an :class:`InputError`;
        a range holding no samples gives an empty Telemetry.
        """
        names = self.select_channels(channels, metrics)
        low, high = self._bounds(start_ns, end_ns)
        plan = self._plan(low, high, count=True)
        bound = sum(rows for _, _, rows in plan)  # exact but for repeated rows
        ts_out = np.empty(bound, dtype=np.int64)
        values = np.full((bound, len(names)), np.nan, dtype=np.float64)
        order, row = _Order(), 0
        for ts, batch, positions in self._pieces(plan, names, low, high, order):
            n = len(ts)
            ts_out[row:row + n] = ts
            _fill(values[row:row + n], batch, positions)
            row += n
        if row < bound:  # rows outside the range or repeated: give the memory back
            ts_out.resize(row, refcheck=False)
            values.resize((row, len(names)), refcheck=False)
        if row == 0 and start_ns is None and end_ns is None:
            raise InputError("run has no samples", str(self.run))
        meta = self._result_meta(order)
        return Telemetry(str(meta.get("host", self.run.name)), ts_out, values, names, meta)

    def iter_chunks(self, chunk_rows: int = CHUNK_ROWS, start_ns: int | None = None,
                    end_ns: int | None = None, channels: str | Iterable[str] | None = None,
                    metrics: str | Iterable[str] | None = None) -> Iterator[Telemetry]:
        """The rows of :meth:`read`, in time order, as Telemetry chunks of ``chunk_rows``
        rows (the last may be shorter); every row is in exactly one chunk.

        Memory: one chunk (``chunk_rows`` × channels × 8 bytes) plus one batch and the
        compressed columns of one segment, whatever the length of the run.
        """
        if int(chunk_rows) < 1:
            raise InputError(f"chunk_rows must be at least 1, got {chunk_rows}")
        chunk_rows = int(chunk_rows)
        names = self.select_channels(channels, metrics)
        low, high = self._bounds(start_ns, end_ns)
        order = _Order()
        ts_out = np.empty(chunk_rows, dtype=np.int64)
        values = np.full((chunk_rows, len(names)), np.nan, dtype=np.float64)
        row = 0
        host = str(self.meta.get("host", self.run.name))
        for ts, batch, positions in self._pieces(self._plan(low, high), names, low, high,
                                                 order):
            done = 0
            while done < len(ts):
                n = min(len(ts) - done, chunk_rows - row)
                ts_out[row:row + n] = ts[done:done + n]
                _fill(values[row:row + n], batch.slice(done, n), positions)
                row, done = row + n, done + n
                if row == chunk_rows:
                    yield Telemetry(host, ts_out, values, list(names), self._result_meta(order))
                    ts_out = np.empty(chunk_rows, dtype=np.int64)
                    values = np.full((chunk_rows, len(names)), np.nan, dtype=np.float64)
                    row = 0
        if row:
            yield Telemetry(host, ts_out[:row].copy(), values[:row].copy(), list(names),
                            self._result_meta(order))

    def _result_meta(self, order: _Order) -> dict[str, Any]:
        meta = dict(self.meta)
        if "warnings" in meta:
            meta["warnings"] = list(meta["warnings"])
        if order.repeated:
            meta.setdefault("warnings", []).append(
                f"{order.repeated} samples with repeated timestamps dropped")
        return meta

    def _bounds(self, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
        info = np.iinfo(np.int64)
        low = info.min if start_ns is None else int(start_ns)
        high = info.max if end_ns is None else int(end_ns)
        if start_ns is not None and end_ns is not None and high <= low:
            raise InputError(f"empty time range: start_ns {low} is not before end_ns {high}",
                             str(self.run))
        return low, high

    def _plan(self, low: int, high: int, count: bool = False
              ) -> list[tuple[_Source, list[int], int]]:
        """Sources and row groups that may hold rows in ``[low, high)``, with their rows
        (with ``count``, the rows inside the range: the ``ts_ns`` column of a row group
        the range cuts is read to count them)."""
        plan = []
        for source in self.sources:
            if source.journal is not None:
                if source.num_rows:
                    rows = source.num_rows
                    if count:
                        rows = sum(_inside(b.column(0).to_numpy(), low, high)
                                   for b in source.journal.batches)
                    plan.append((source, [], rows))
                continue
            groups, rows = [], 0
            for g in source.groups:
                known = g.ts_min is not None and g.ts_max is not None
                if not g.num_rows or (known and (g.ts_max < low or g.ts_min >= high)):
                    continue
                groups.append(g.index)
                if count and not (known and g.ts_min >= low and g.ts_max < high):
                    rows += _inside(self._segment_ts(source, g.index), low, high)
                else:
                    rows += g.num_rows
            if groups:
                plan.append((source, groups, rows))
        return plan

    def _pieces(self, plan: list[tuple[_Source, list[int], int]], names: list[str], low: int,
                high: int, order: _Order
                ) -> Iterator[tuple[np.ndarray, pa.RecordBatch, list[int]]]:
        """(ts_ns, batch of [ts_ns, present channels...], output column of each) per batch
        of rows in ``[low, high)`` that follow every row given before."""
        position = {name: i for i, name in enumerate(names)}
        for source, groups, _ in plan:
            present = [n for n in source.channels if n in position]
            positions = [position[n] for n in present]
            rows = max(256, BATCH_VALUES // (len(present) + 1))
            for batch in self._batches(source, groups, present, rows):
                ts = batch.column(0).to_numpy()
                keep = _keep(ts, low, high, order)
                if keep is None:
                    continue
                if keep is not True:
                    batch = batch.filter(pa.array(keep))
                    ts = ts[keep]
                yield ts, batch, positions

    def _batches(self, source: _Source, groups: list[int], present: list[str],
                 rows: int) -> Iterator[pa.RecordBatch]:
        columns = [TIME_COLUMN, *present]
        if source.journal is not None:
            journal = source.journal
            table = pa.Table.from_batches(journal.batches, schema=journal.schema)
            yield from table.select(columns).combine_chunks().to_batches(max_chunksize=rows)
            return
        try:
            handle = pq.ParquetFile(source.path, page_checksum_verification=True)
            yield from handle.iter_batches(batch_size=rows, row_groups=groups, columns=columns,
                                           use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise InputError(f"unreadable Parquet segment ({exc})", str(source.path)) from None


def _inside(ts: np.ndarray, low: int, high: int) -> int:
    return int(np.count_nonzero((ts >= low) & (ts < high)))


def _keep(ts: np.ndarray, low: int, high: int, order: _Order) -> np.ndarray | bool | None:
    """Which rows of ``ts`` to give: inside ``[low, high)`` and later than every row given
    before (a repeat is a row a crash left both in a segment and in its journal). True for
    all, None for none."""
    if not len(ts):
        return None
    before = np.maximum.accumulate(np.concatenate(([order.last], ts[:-1])))
    later = ts > before
    inside = (ts >= low) & (ts < high)
    order.repeated += int((inside & ~later).sum())
    order.last = max(order.last, int(ts.max()))
    keep = inside & later
    if keep.all():
        return True
    return keep if keep.any() else None


def _fill(out: np.ndarray, batch: pa.RecordBatch, positions: Sequence[int]) -> None:
    """Write the channel columns of ``batch`` (after ``ts_ns``) into ``out``'s columns."""
    for j, column in zip(positions, batch.columns[1:], strict=True):
        if column.null_count:
            column = column.cast(pa.float64()).fill_null(np.nan)
        out[:, j] = column.to_numpy(zero_copy_only=False)


def open_run(run: str | Path) -> RunReader:
    """Open a run directory for reading (see :class:`RunReader`)."""
    return RunReader(run)


def read_run(run: str | Path, start_ns: int | None = None, end_ns: int | None = None,
             channels: str | Iterable[str] | None = None,
             metrics: str | Iterable[str] | None = None) -> Telemetry:
    """Read a run, or the rows ``start_ns <= ts_ns < end_ns`` (monotonic ns) of it, with
    every channel or those selected by exact name (``channels``) or metric prefix
    (``metrics``): the union of channels over segments and journals, NaN where one is
    absent.

    Raises :class:`InputError` naming the file for missing/unreadable metadata, an unknown
    format version, an unreadable segment, or a run with no samples.
    """
    return RunReader(run).read(start_ns, end_ns, channels, metrics)


def iter_run(run: str | Path, chunk_rows: int = CHUNK_ROWS, start_ns: int | None = None,
             end_ns: int | None = None, channels: str | Iterable[str] | None = None,
             metrics: str | Iterable[str] | None = None) -> Iterator[Telemetry]:
    """The run (or a range / subset of it) as time-ordered Telemetry chunks of
    ``chunk_rows`` rows, without loading it whole (see :meth:`RunReader.iter_chunks`)."""
    return RunReader(run).iter_chunks(chunk_rows, start_ns, end_ns, channels, metrics)
