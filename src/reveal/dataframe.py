"""pandas DataFrames to and from :class:`~reveal.frame.Telemetry`.

A frame holds one host: a ``DatetimeIndex`` (tz-aware, or naive read as UTC) and one
numeric column per channel; its column names become channel names (``cpu.user{cpu=3}``
picks up the catalog's metadata, any other name is a gauge of unknown subsystem). Column
names are data, not code: they are kept as given and escaped wherever a report shows them.
The sampling interval is the median spacing of the index. Times on the index are wall
clock: the telemetry counts from the first row and ``wall_offset_ns`` holds the first
row's Unix time, so reports print UTC times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.report.escape import plain

if TYPE_CHECKING:
    import pandas as pd

#: rows a frame needs at least (two give the sampling interval)
MIN_ROWS = 2


def _names(columns: list[Any], limit: int = 3) -> str:
    shown = ", ".join(repr(plain(str(c), 40)) for c in columns[:limit])
    more = len(columns) - limit
    return shown + (f" and {more} more" if more > 0 else "")


def _index_ns(frame: pd.DataFrame, what: str) -> np.ndarray:
    """The index as int64 Unix nanoseconds (UTC), checked: datetimes, no NaT, increasing."""
    import pandas as pd

    index = frame.index
    if not isinstance(index, pd.DatetimeIndex):
        raise InputError(f"{what} needs a DatetimeIndex, got {type(index).__name__}: set one "
                         f"with df.set_index(pd.to_datetime(df['time'], utc=True))")
    if index.hasnans:
        raise InputError(f"{what} has {int(index.isna().sum())} missing timestamp(s) (NaT) in "
                         f"its index: drop them with df[df.index.notna()]")
    if index.tz is not None:
        index = index.tz_convert("UTC").tz_localize(None)
    ns = index.as_unit("ns").asi8.astype(np.int64, copy=False)
    steps = np.diff(ns)
    if np.any(steps == 0):
        first = int(np.flatnonzero(steps == 0)[0])
        raise InputError(f"{what} has {int((steps == 0).sum())} repeated timestamp(s) (first "
                         f"at {frame.index[first]}): keep one row each with "
                         f"df[~df.index.duplicated()] or average them with "
                         f"df.groupby(level=0).mean()")
    if np.any(steps < 0):
        raise InputError(f"{what} is not in time order: sort it with df.sort_index()")
    return ns


def telemetry_from_frame(frame: pd.DataFrame, host: str | None = None,
                         what: str = "the DataFrame") -> Telemetry:
    """Telemetry from a frame of one host (see the module docstring).

    Parameters
    ----------
    frame : pandas.DataFrame
        ``DatetimeIndex`` (UTC when naive), one numeric column per channel; NaN = not
        sampled.
    host : str, optional
        Host name; default ``frame.attrs["host"]``, else ``"dataframe"``.
    what : str
        How errors name the frame (``"the baseline DataFrame"``).

    Raises
    ------
    InputError
        One line saying what is wrong and how to fix it: no ``DatetimeIndex``, missing,
        repeated or unordered timestamps, non-numeric or all-NaN columns, repeated column
        names, fewer than :data:`MIN_ROWS` rows.
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"{what} is a {type(frame).__name__}, not a pandas DataFrame")
    if frame.shape[1] == 0:
        raise InputError(f"{what} has no columns: give one numeric column per channel")
    if frame.shape[0] < MIN_ROWS:
        raise InputError(f"{what} has {frame.shape[0]} row(s); at least {MIN_ROWS} are needed "
                         f"(and enough for the analysis windows: a few seconds of 100 ms "
                         f"samples, or ten windows for a baseline)")
    timestamps = _index_ns(frame, what)
    channels = [str(c) for c in frame.columns]
    if len(set(channels)) != len(channels):
        seen: set[str] = set()
        repeated = [c for c in channels if c in seen or seen.add(c)]
        raise InputError(f"{what} repeats column name(s) {_names(repeated)}: rename them, "
                         f"one column per channel")
    bad = [c for c in frame.columns if not (pd.api.types.is_numeric_dtype(frame[c])
                                            and not pd.api.types.is_complex_dtype(frame[c]))]
    if bad:
        raise InputError(f"{what} has non-numeric column(s) {_names(bad)}: convert them with "
                         f"pd.to_numeric or keep the numeric ones with "
                         f"df.select_dtypes('number')")
    # a C-ordered copy: rows are read whole downstream, and the caller's frame is never shared
    values = np.array(frame.to_numpy(dtype=np.float64, na_value=np.nan), order="C", copy=True)
    empty = ~np.isfinite(values).any(axis=0) if len(values) else np.ones(len(channels), bool)
    if empty.any():
        cols = [frame.columns[i] for i in np.flatnonzero(empty)]
        raise InputError(f"{what} has column(s) without a single finite value "
                         f"{_names(cols)}: drop them with df.dropna(axis=1, how='all')")
    interval_s = float(np.median(np.diff(timestamps))) / 1e9
    start = int(timestamps[0])
    meta: dict[str, Any] = {"interval_s": interval_s, "wall_offset_ns": start,
                            "source": "dataframe"}
    name = host if host is not None else str(frame.attrs.get("host", "dataframe"))
    return Telemetry(name, timestamps - start, values, channels, meta)


def frame_from_telemetry(tel: Telemetry) -> pd.DataFrame:
    """A frame of ``tel``: UTC ``DatetimeIndex`` (monotonic time plus the run's wall-clock
    offset), one float64 column per channel, ``attrs["host"]`` the host name."""
    import pandas as pd

    index = pd.DatetimeIndex(pd.to_datetime(tel.timestamps_ns + tel.wall_offset_ns,
                                            unit="ns", utc=True), name="time")
    frame = pd.DataFrame(tel.values, index=index, columns=list(tel.channels))
    frame.attrs["host"] = tel.host
    return frame
