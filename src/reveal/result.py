"""What :func:`reveal.analyze` returns: the report, as tables, JSON and HTML.

Times in the tables are UTC Timestamps: a window's monotonic ``start_ns`` plus the run's
``wall_offset_ns``. A run that recorded no wall clock (the SMD and ASD data sets) counts
from the Unix epoch, so its times read as durations since 1970-01-01.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from reveal.frame import Telemetry
from reveal.report.escape import plain
from reveal.report.schema import Report

if TYPE_CHECKING:
    import pandas as pd

    from reveal.model import Reveal

#: columns of :attr:`Result.anomalies`, with their dtypes
ANOMALY_COLUMNS = {"start": "datetime64[ns, UTC]", "end": "datetime64[ns, UTC]",
                   "score": "float64", "subsystem": "object", "claim": "object",
                   "detectors": "object", "channel": "object", "feature": "object",
                   "robust_z": "float64", "subsystems": "object"}
#: columns of :attr:`Result.episodes`, with their dtypes
EPISODE_COLUMNS = {"start": "datetime64[ns, UTC]", "end": "datetime64[ns, UTC]",
                   "duration_s": "float64", "windows": "int64", "peak_score": "float64",
                   "subsystem": "object", "claim": "object"}
#: height of the notebook view (CSS pixels)
NOTEBOOK_HEIGHT_PX = 720


def _utc(ns: Any, offset_ns: int) -> pd.DatetimeIndex:
    import pandas as pd

    return pd.DatetimeIndex(pd.to_datetime(np.asarray(ns, dtype=np.int64) + offset_ns,
                                           unit="ns", utc=True))


def _table(rows: dict[str, Any], dtypes: dict[str, str], index: np.ndarray) -> pd.DataFrame:
    import pandas as pd

    frame = pd.DataFrame({name: pd.Series(rows[name], dtype=dtype, index=None)
                          for name, dtype in dtypes.items()})
    frame.index = pd.Index(np.asarray(index, dtype=np.int64), name="window")
    return frame


def _write(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8); returns the path."""
    path = Path(os.fspath(path))
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class Result:
    """One analysed run: the :class:`Report` plus tables for pandas.

    Attributes
    ----------
    report : Report
        The report (``report.to_dict()`` is the versioned JSON of docs/report-schema.md).
    telemetry : Telemetry
        The run as analysed.
    baseline : Telemetry or None
        The baseline it was fitted on (None: fitted on the run itself, or a given model).
    model : Reveal
        The fitted model (save it with ``result.model.save(path)``).
    """

    def __init__(self, report: Report, telemetry: Telemetry, baseline: Telemetry | None,
                 model: Reveal) -> None:
        self.report = report
        self.telemetry = telemetry
        self.baseline = baseline
        self.model = model
        self._page: str | None = None

    # -- verdict -----------------------------------------------------------------------
    @property
    def verdict(self) -> str:
        """``"no anomaly"`` or ``"anomalies found"``."""
        return "no anomaly" if self.report.no_anomaly else "anomalies found"

    @property
    def warnings(self) -> list[str]:
        """What the analysis could not use or should be read with (one line each)."""
        return list(self.report.warnings)

    @property
    def self_fitted(self) -> bool:
        """Whether the detectors were fitted on the run itself (no baseline)."""
        return bool(self.report.decision.get("self_fitted", False))

    @property
    def _offset(self) -> int:
        return int(self.report.run.get("wall_offset_ns") or 0)

    # -- tables ------------------------------------------------------------------------
    @property
    def anomalies(self) -> pd.DataFrame:
        """One row per flagged window, by window id, in time order.

        Columns: ``start``, ``end`` (UTC Timestamps), ``score`` (combined), ``subsystem``
        (the strongest), ``claim`` (one line), ``detectors`` (those that flagged it,
        comma-separated), ``channel``, ``feature`` and ``robust_z`` of the strongest reason
        (baseline sigmas), ``subsystems`` (all, strongest first, comma-separated).
        """
        items = sorted(self.report.anomalies, key=lambda a: a.start_ns)
        top = [a.reasons[0] if a.reasons else None for a in items]
        rows = {
            "start": _utc([a.start_ns for a in items], self._offset),
            "end": _utc([a.end_ns for a in items], self._offset),
            "score": [a.score for a in items],
            "subsystem": [a.subsystems[0] if a.subsystems else "unknown" for a in items],
            "claim": [a.claim for a in items],
            "detectors": [", ".join(a.detectors) for a in items],
            "channel": [r.channel if r else None for r in top],
            "feature": [r.feature if r else None for r in top],
            "robust_z": [r.robust_z if r else np.nan for r in top],
            "subsystems": [", ".join(a.subsystems) for a in items],
        }
        return _table(rows, ANOMALY_COLUMNS, np.array([a.window_id for a in items]))

    @property
    def windows(self) -> pd.DataFrame:
        """Every window, by window id: ``start``, ``end`` (UTC), ``score`` (combined),
        ``<detector>_score`` and ``<detector>_flag`` per detector, ``flagged``."""
        import pandas as pd

        w = self.report.windows
        columns: dict[str, Any] = {"start": _utc(w.start_ns, self._offset),
                                   "end": _utc(w.end_ns, self._offset),
                                   "score": np.asarray(w.combined, dtype=np.float64)}
        for name, scores in w.scores.items():
            columns[f"{name}_score"] = np.asarray(scores, dtype=np.float64)
        for name, flags in w.flags.items():
            columns[f"{name}_flag"] = np.asarray(flags, dtype=bool)
        columns["flagged"] = np.asarray(w.flagged, dtype=bool)
        frame = pd.DataFrame(columns)
        frame.index = pd.RangeIndex(len(frame), name="window")
        return frame

    @property
    def episodes(self) -> pd.DataFrame:
        """Runs of consecutive flagged windows: ``start``, ``end`` (UTC), ``duration_s``
        (seconds), ``windows`` (count), ``peak_score``, ``subsystem``, ``claim``; indexed by
        the episode's first window."""
        eps = self.report.episodes
        rows = {
            "start": _utc([e.start_ns for e in eps], self._offset),
            "end": _utc([e.end_ns for e in eps], self._offset),
            "duration_s": [(e.end_ns - e.start_ns) / 1e9 for e in eps],
            "windows": [len(e.window_ids) for e in eps],
            "peak_score": [e.peak_score for e in eps],
            "subsystem": [e.subsystem for e in eps],
            "claim": [e.claim for e in eps],
        }
        return _table(rows, EPISODE_COLUMNS,
                      np.array([min(e.window_ids) for e in eps], dtype=np.int64))

    # -- output ------------------------------------------------------------------------
    def to_dict(self, with_windows: bool = True) -> dict[str, Any]:
        """The versioned report (docs/report-schema.md) as a dict."""
        return self.report.to_dict(with_windows)

    def to_json(self, path: str | os.PathLike | None = None, *,
                indent: int | None = None) -> str | Path:
        """The versioned JSON report: the text, or written to ``path`` (atomically) and the
        path returned."""
        text = json.dumps(self.report.to_dict(), indent=indent, allow_nan=False)
        return text if path is None else _write(path, text + "\n")

    def to_html(self, path: str | os.PathLike | None = None) -> str | Path:
        """The self-contained HTML report (plots included): the page, or written to
        ``path`` (atomically) and the path returned."""
        if self._page is None:  # rendered once: the notebook view shows the same page
            from reveal.report.html import render_html

            self._page = render_html(self.report, self.telemetry, self.baseline)
        return self._page if path is None else _write(path, self._page)

    def _repr_html_(self) -> str:
        """The HTML report in a notebook: an iframe holding the whole page (``srcdoc``),
        so its styles and scripts stay out of the notebook's."""
        page = self.to_html()
        assert isinstance(page, str)
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" '
                f'style="width: 100%; height: {NOTEBOOK_HEIGHT_PX}px; border: 0" '
                f'sandbox="allow-scripts allow-popups allow-downloads" '
                f'title="Reveal report"></iframe>')

    def __str__(self) -> str:
        from reveal.report.terminal import render_text

        return render_text(self.report)

    def __repr__(self) -> str:
        s = self.report.to_dict(with_windows=False)["summary"]
        fit = "self-fitted" if self.self_fitted else "baseline-fitted"
        return (f"<reveal Result for host {plain(self.telemetry.host, 60)!r}: "
                f"{s['verdict']}; {s['anomalous_windows']} of {s['windows']} windows flagged "
                f"in {s['episodes']} episode(s); {fit}>")
