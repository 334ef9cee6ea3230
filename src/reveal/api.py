"""The Python API for notebooks: analyse DataFrames or runs, get tables back.

    import reveal
    result = reveal.analyze(df, baseline=df0)     # also callable as reveal.api.analyze
    result.anomalies                              # one row per flagged window
    result.to_html("report.html")

``df`` and ``df0`` are pandas DataFrames (one host each: ``DatetimeIndex``, one numeric
column per channel; see :mod:`reveal.dataframe`), run paths (a run directory, a CSV file,
``smd:``/``asd:`` specs: what ``reveal analyze`` takes) or :class:`~reveal.frame.Telemetry`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Union

from reveal.analysis import frontend
from reveal.analysis.derive import derive
from reveal.analysis.pipeline import Progress
from reveal.config import WindowConfig
from reveal.dataframe import telemetry_from_frame
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.model import Reveal, continues, fit_for_run
from reveal.result import Result
from reveal.store.sources import default_baseline, open_source

if TYPE_CHECKING:
    import pandas as pd

#: what :func:`analyze` takes as a run or a baseline
Data = Union["pd.DataFrame", str, os.PathLike, Telemetry]

__all__ = ["Data", "Result", "analyze", "to_telemetry", "window_features"]


def _is_path(data: object) -> bool:
    return isinstance(data, str | os.PathLike)


def to_telemetry(data: Data, what: str = "run", host: str | None = None) -> Telemetry:
    """Telemetry from a DataFrame, a run path or Telemetry (as given).

    ``what`` names the input in errors (``"run"``, ``"baseline"``); ``host`` names the host
    of a DataFrame (default ``df.attrs["host"]``, else ``"dataframe"``).
    """
    if isinstance(data, Telemetry):
        return data
    if _is_path(data):
        return open_source(os.fspath(data))
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return telemetry_from_frame(data, host, what=f"the {what} DataFrame")
    raise InputError(f"the {what} is a {type(data).__name__}: give a pandas DataFrame "
                     f"(DatetimeIndex, one numeric column per channel), a run path or "
                     f"Telemetry")


def analyze(data: Data, baseline: Data | None = None, *, preset: str = "auto",
            model: Reveal | None = None, host: str | None = None,
            progress: Progress | None = None) -> Result:
    """Analyse one host's run and return a :class:`~reveal.result.Result`.

    Parameters
    ----------
    data : DataFrame, path or Telemetry
        The run: a DataFrame with a ``DatetimeIndex`` (UTC when naive) and one numeric
        column per channel, a run directory, CSV file or ``smd:``/``asd:`` spec, or
        Telemetry.
    baseline : DataFrame, path or Telemetry, optional
        A clean recording of the same host to fit on. Without one the run is fitted on
        itself, robustly (median/MAD), and the result says so; for ``smd:M``/``asd:M`` the
        machine's ``train`` part is the baseline by default.
    preset : str
        Settings by resolution for a new model: ``"auto"`` (from the baseline's sampling
        interval), ``"telemetry"`` (100 ms samples) or ``"minute"``.
    model : Reveal, optional
        A fitted model scores the run as it is (no baseline then); an unfitted one gives
        its settings to the fit.
    host : str, optional
        Host name of DataFrame inputs.
    progress : callable, optional
        Called with a line of text at each step of long work.

    Raises
    ------
    RevealError
        One line saying what is wrong with the input and what to do.
    """
    fitted = model is not None and hasattr(model, "fitted_")
    if model is not None and preset != "auto":
        raise InputError("preset= sets up a new model; a given model keeps its own settings "
                         "(build it with Reveal(preset=...))")
    if fitted and baseline is not None:
        raise InputError("give a baseline or a fitted model, not both: a fitted model scores "
                         "against the baseline it was fitted on")
    run = to_telemetry(data, "run", host)
    if baseline is None and not fitted and _is_path(data):
        baseline = default_baseline(os.fspath(data))
    base = to_telemetry(baseline, "baseline", host) if baseline is not None else None
    model = model if model is not None else Reveal(preset=preset)
    if fitted:
        report = model.report(run, progress=progress)
    elif base is None:
        report = model.fit_report(run, progress=progress)
    else:
        fit_for_run(model, run, base, progress)
        follows = _is_path(data) and _is_path(baseline) and \
            continues(os.fspath(data), os.fspath(baseline))  # type: ignore[arg-type]
        report = model.report(run, lead_in=base if follows else None, progress=progress)
    return Result(report, run, base, model)


def window_features(data: Data, *, size_s: float = 3.0, stride_s: float = 1.0,
                    features: Sequence[str] | None = None,
                    host: str | None = None) -> pd.DataFrame:
    """Window features of a run as a DataFrame: the matrix the detectors score.

    Counters become per-second rates first (as in the analysis); then each window of
    ``size_s`` seconds, every ``stride_s`` seconds, gets the features of each channel
    (docs/features.md; ``features`` picks some of them).

    Returns
    -------
    DataFrame of shape (windows, channels × features)
        Index: window start (UTC Timestamps); columns ``"channel|feature"``; NaN where a
        feature is undefined (a flat window's skewness).
    """
    import pandas as pd

    tel = to_telemetry(data, "run", host)
    rated, _ = derive(tel)
    fm = frontend.window_features(rated, rated.channels,
                                  WindowConfig(size_s=size_s, stride_s=stride_s),
                                  tel.interval_s, state_levels=True, features=features)
    windows = fm.windows
    index = pd.DatetimeIndex(pd.to_datetime(windows.start_ns + tel.wall_offset_ns, unit="ns",
                                            utc=True), name="start")
    return pd.DataFrame(fm.values, index=index, columns=fm.columns)
