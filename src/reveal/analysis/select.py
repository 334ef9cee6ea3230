"""Select: correlation pruning of redundant channels (paper §4.1, Figure 4).

Channels whose Pearson |r| exceeds the threshold (default 0.5) form clusters; one
representative per cluster is kept, chosen by the catalog's priority table, then by the
higher coefficient of variation (a scale-free spread). The greedy pass walks channels in
that order and keeps a channel unless it correlates above the threshold with one already
kept. Constant channels (no information in this run) are never representatives but are
not declared redundant either: they are reported separately and kept available, because a
channel flat in a baseline (a retransmit counter at zero) is exactly what moves in a fault.

With ``same_subsystem`` (the analysis's default, ``select.same_subsystem``) a channel stands
only for channels of its own subsystem: a baseline in which the job's memory grew with its
CPU use must not leave memory measured by a CPU's busy share, which says nothing of memory
when memory alone changes.

Selections over several runs are merged by **union** of kept channels; the result is a
*metric-set file* (JSON) that ``reveal analyze --metrics`` reuses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from reveal.catalog import Catalog, default_catalog
from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.jsonfile import read_format_json

METRIC_SET_FORMAT = "reveal-metric-set"
_MAX_ROWS = 200_000  # rows used for correlations (evenly subsampled beyond this)


@dataclass
class Selection:
    """Result of pruning one run (or the union of several)."""

    threshold: float
    kept: list[str]
    redundant: dict[str, str] = field(default_factory=dict)  # dropped -> its representative
    constant: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    @property
    def selected_ratio(self) -> float:
        total = len(self.kept) + len(self.redundant)
        return len(self.kept) / total if total else float("nan")

    def to_dict(self) -> dict:
        return {"format": METRIC_SET_FORMAT, "version": 1, "threshold": self.threshold,
                "channels": self.kept, "redundant": self.redundant,
                "constant": self.constant, "runs": self.runs}


def _usable_rows(values: np.ndarray) -> np.ndarray:
    if len(values) > _MAX_ROWS:
        values = values[np.linspace(0, len(values) - 1, _MAX_ROWS).astype(np.int64)]
    return values


def correlation_matrix(values: np.ndarray) -> np.ndarray:
    """|Pearson r| between columns of ``(T, C)`` values; NaNs are filled with column means.

    Constant columns get 0 correlation with everything (and 1 with themselves).
    """
    x = _usable_rows(np.asarray(values, dtype=np.float64))
    means = np.nanmean(x, axis=0) if len(x) else np.zeros(x.shape[1])
    means = np.where(np.isfinite(means), means, 0.0)
    x = np.where(np.isfinite(x), x, means)
    x = x - x.mean(axis=0)
    norms = np.sqrt(np.einsum("tc,tc->c", x, x))
    safe = np.where(norms > 0, norms, 1.0)
    corr = np.abs((x.T @ x) / np.outer(safe, safe))
    corr[norms == 0, :] = 0.0
    corr[:, norms == 0] = 0.0
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, 0.0, 1.0)


def _order(telemetry: Telemetry, catalog: Catalog, std: np.ndarray) -> np.ndarray:
    """Channel indices by (priority desc, coefficient of variation desc, name)."""
    x = _usable_rows(telemetry.values)
    mean_abs = np.nanmean(np.abs(x), axis=0)
    cv = np.where(mean_abs > 0, std / np.where(mean_abs > 0, mean_abs, 1.0), 0.0)
    priority = np.array([catalog.lookup(c).priority for c in telemetry.channels], dtype=float)
    names = np.array(telemetry.channels, dtype=object)
    return np.lexsort((names, -np.nan_to_num(cv), -priority))


def prune(telemetry: Telemetry, threshold: float = 0.5, catalog: Catalog | None = None,
          min_std: float = 1e-12, corr: np.ndarray | None = None,
          same_subsystem: bool = False) -> Selection:
    """Greedy correlation pruning of one run's channels (rated values, not raw counters).

    ``same_subsystem``: a channel is redundant only with a kept channel of its own catalog
    subsystem, so that each subsystem keeps the channels that measure it (the host's
    available memory is not represented by a CPU's busy share it rose with)."""
    if not 0.0 < threshold <= 1.0:
        raise InputError(f"correlation threshold must be in (0, 1], got {threshold}")
    catalog = catalog or default_catalog()
    x = _usable_rows(telemetry.values)
    with np.errstate(invalid="ignore"):
        std = np.nanstd(x, axis=0) if len(x) else np.zeros(telemetry.n_channels)
    std = np.nan_to_num(std)
    constant_mask = std <= min_std
    corr = correlation_matrix(telemetry.values) if corr is None else corr
    if same_subsystem:
        groups = np.array([catalog.lookup(c).subsystem for c in telemetry.channels])
        corr = np.where(groups[:, None] == groups[None, :], corr, 0.0)
    kept: list[int] = []
    redundant: dict[str, str] = {}
    for i in _order(telemetry, catalog, std):
        if constant_mask[i]:
            continue
        if kept:
            r = corr[i, kept]
            j = int(np.argmax(r))
            if r[j] > threshold:
                redundant[telemetry.channels[i]] = telemetry.channels[kept[j]]
                continue
        kept.append(int(i))
    kept_names = [telemetry.channels[i] for i in sorted(kept)]
    constant = [c for c, flat in zip(telemetry.channels, constant_mask, strict=True) if flat]
    source = str(telemetry.meta.get("path", telemetry.host))
    return Selection(threshold, kept_names, redundant, constant, [source])


def union(selections: list[Selection]) -> Selection:
    """Union of kept channels over several runs (a channel kept anywhere is kept)."""
    if not selections:
        raise InputError("no selections to merge")
    kept = sorted({c for s in selections for c in s.kept})
    kept_set = set(kept)
    redundant: dict[str, str] = {}
    for s in selections:
        for c, rep in s.redundant.items():
            if c not in kept_set:
                redundant.setdefault(c, rep)
    constant = sorted({c for s in selections for c in s.constant} - kept_set - set(redundant))
    return Selection(selections[0].threshold, kept, redundant, constant,
                     [r for s in selections for r in s.runs])


def pruning_curves(telemetry: Telemetry, thresholds: np.ndarray | None = None,
                   catalog: Catalog | None = None) -> dict[str, list[float]]:
    """Data for Figure 4: selected ratio, avg max |r| and avg multi-R² proxy per threshold.

    - *selected ratio*: kept / non-constant channels;
    - *avg max |r|*: for each kept channel, its strongest |r| with any other channel of the
      run, averaged (how redundant what remains still is to the full set);
    - *avg multi-R² proxy*: for every non-constant channel, the R² of a least-squares fit of
      it on the kept channels (standardised), averaged: the linear information retained.
    """
    thresholds = np.round(np.arange(0.05, 1.0001, 0.05), 2) if thresholds is None else thresholds
    catalog = catalog or default_catalog()
    corr = correlation_matrix(telemetry.values)
    x = _usable_rows(telemetry.values)
    x = np.where(np.isfinite(x), x, np.nanmean(x, axis=0))
    std = x.std(axis=0)
    live = std > 1e-12
    z = (x[:, live] - x[:, live].mean(axis=0)) / std[live]
    live_names = [c for c, ok in zip(telemetry.channels, live, strict=True) if ok]
    pos = {c: i for i, c in enumerate(live_names)}
    off_diag = corr[np.ix_(live, live)].copy()
    np.fill_diagonal(off_diag, 0.0)
    out: dict[str, list[float]] = {"threshold": [], "selected_ratio": [], "avg_max_abs_r": [],
                                   "avg_multi_r2": []}
    total_ss = np.einsum("tc,tc->c", z, z)
    for t in thresholds:
        sel = prune(telemetry, float(t), catalog, corr=corr)
        idx = [pos[c] for c in sel.kept if c in pos]
        out["threshold"].append(float(t))
        out["selected_ratio"].append(len(idx) / max(len(live_names), 1))
        out["avg_max_abs_r"].append(float(off_diag[idx].max(axis=1).mean()) if idx else 0.0)
        if idx:
            coef, *_ = np.linalg.lstsq(z[:, idx], z, rcond=None)
            resid = z - z[:, idx] @ coef
            r2 = 1.0 - np.einsum("tc,tc->c", resid, resid) / total_ss
            out["avg_multi_r2"].append(float(np.clip(r2, 0.0, 1.0).mean()))
        else:
            out["avg_multi_r2"].append(0.0)
    return out


def save_metric_set(selection: Selection, path: str | Path) -> None:
    Path(path).write_text(json.dumps(selection.to_dict(), indent=2) + "\n", encoding="utf-8")


def load_metric_set(path: str | Path) -> list[str]:
    """Channel names of a metric-set file written by ``reveal select``."""
    path = Path(path)
    payload = read_format_json(path, METRIC_SET_FORMAT, "metric-set file", "file")
    channels = payload.get("channels")
    if not isinstance(channels, list) or not all(isinstance(c, str) for c in channels):
        raise InputError("'channels' must be a list of channel names", str(path))
    return channels
