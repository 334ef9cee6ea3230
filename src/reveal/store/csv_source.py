"""Wide CSV telemetry: one time column plus one numeric column per channel.

The time column is the one named ``ts_ns`` (nanoseconds), ``timestamp``, ``time`` or ``ts``,
else the first column. Numeric times are read as Unix seconds, or as milliseconds /
nanoseconds when their magnitude says so (> 1e12 ms, > 1e15 ns); text times are parsed as
ISO 8601. Gzip-compressed files (``.csv.gz``) are read as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from reveal.errors import InputError
from reveal.frame import Telemetry

if TYPE_CHECKING:
    import pandas as pd

_TIME_NAMES = ("ts_ns", "timestamp", "time", "ts")


def _time_ns(column: pd.Series, name: str, path: Path) -> np.ndarray:
    import pandas as pd  # only where CSV is read (a watch never imports it)

    if name == "ts_ns":
        return column.to_numpy(dtype=np.int64)
    if pd.api.types.is_numeric_dtype(column):
        x = column.to_numpy(dtype=np.float64)
        magnitude = np.nanmax(np.abs(x)) if len(x) else 0.0
        if magnitude > 1e15:
            return x.astype(np.int64)
        scale = 1e6 if magnitude > 1e12 else 1e9
        return np.round(x * scale).astype(np.int64)
    try:
        parsed = pd.to_datetime(column, utc=True, format="ISO8601")
    except (ValueError, TypeError) as exc:
        raise InputError(f"time column {name!r} is neither numeric nor ISO 8601 ({exc})",
                         str(path)) from None
    return parsed.dt.tz_convert(None).to_numpy().astype("datetime64[ns]").astype(np.int64)


def read_csv(path: str | Path, host: str | None = None) -> Telemetry:
    """Read a wide CSV into Telemetry (channels = the other column names)."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path)
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except (OSError, ValueError, EOFError, pd.errors.ParserError) as exc:
        raise InputError(f"unreadable CSV ({str(exc).splitlines()[0]})", str(path)) from None
    if frame.shape[1] < 2 or frame.shape[0] == 0:
        raise InputError("CSV needs a time column, at least one channel and one row", str(path))
    time_name = next((n for n in _TIME_NAMES if n in frame.columns), frame.columns[0])
    if frame[time_name].isna().any():
        raise InputError(f"time column {time_name!r} has empty cells", str(path))
    timestamps = _time_ns(frame[time_name], str(time_name), path)
    channels = [str(c) for c in frame.columns if c != time_name]
    data = frame[channels]
    bad = [c for c in channels if not pd.api.types.is_numeric_dtype(data[c])]
    if bad:
        raise InputError(f"non-numeric channel column(s): {', '.join(bad[:5])}", str(path))
    values = data.to_numpy(dtype=np.float64)
    order = np.argsort(timestamps, kind="stable")
    timestamps, values = timestamps[order], values[order]
    if np.any(np.diff(timestamps) <= 0):
        raise InputError("repeated timestamps in the time column", str(path))
    meta = {"source": f"csv:{path}", "path": str(path)}
    return Telemetry(host or path.name.split(".")[0], timestamps, values, channels, meta)
