"""Write a whole Telemetry as a run directory in one go (tests, conversions, demos).

The collector's streaming, crash-safe writer is :mod:`reveal.store.segment_writer`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reveal.frame import Telemetry
from reveal.store.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    META_FILE,
    SEGMENTS_DIR,
    TIME_COLUMN,
    segment_path,
    write_json_atomic,
)


def telemetry_table(timestamps_ns: np.ndarray, values: np.ndarray, channels: list[str]) -> pa.Table:
    """An Arrow table with ``ts_ns`` and one float64 column per channel (NaN → null)."""
    arrays = [pa.array(np.asarray(timestamps_ns, dtype=np.int64))]
    for i in range(values.shape[1]):
        column = np.asarray(values[:, i], dtype=np.float64)
        arrays.append(pa.array(column, mask=np.isnan(column)))
    return pa.Table.from_arrays(arrays, names=[TIME_COLUMN, *channels])


def base_meta(host: str | None = None, interval_s: float = 0.1, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "host": host or socket.gethostname(),
        "kernel": os.uname().release,
        "interval_s": interval_s,
        "wall_offset_ns": 0,
        "probes": {},
        "unsupported_events": [],
        "closed": True,
    }
    meta.update(extra)
    return meta


def write_run(telemetry: Telemetry, run: str | Path, source: str = "write_run") -> Path:
    """Write ``telemetry`` to a new run directory as one segment; returns the path."""
    run = Path(run)
    (run / SEGMENTS_DIR).mkdir(parents=True, exist_ok=True)
    meta = base_meta(telemetry.host, telemetry.interval_s, source=source)
    meta.update({k: v for k, v in telemetry.meta.items()
                 if k not in ("path", "warnings", "recovery")})
    meta["format"], meta["version"] = FORMAT_NAME, FORMAT_VERSION
    if telemetry.n_samples:
        meta.setdefault("start_mono_ns", int(telemetry.timestamps_ns[0]))
    table = telemetry_table(telemetry.timestamps_ns, telemetry.values, telemetry.channels)
    target = segment_path(run, 1)
    tmp = target.with_name(target.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
    os.replace(tmp, target)
    write_json_atomic(run / META_FILE, meta)
    return run
