"""Reveal against the labelled SMD / ASD machines, with an honest, causal protocol.

Per machine: window features of the ``train`` half fit the ensemble (scaling, detectors,
thresholds); the ``test`` half is scored window by window. Protocol:

- fit on train only; nothing (no scaling, no threshold) is fitted on test;
- causal: a window's verdict is assigned to its LAST row; the first test windows take
  their leading rows from the end of train (which precedes test in time), so every test
  row has exactly one window ending on it; no smoothing looks ahead;
- one global setting for all machines (:class:`EvalSettings` defaults).

Side by side, the plain baseline: PCA reconstruction error on the raw rows (PCA keeping
95 % of the train variance, threshold at the train errors' 99th percentile, metrics ranked
by their squared reconstruction error for HitRate).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from reveal.analyze.ensemble import Ensemble, EnsembleOptions, Verdicts, persistence_windows
from reveal.analyze.features import compute_features
from reveal.analyze.windows import make_windows
from reveal.config import DetectConfig, WindowConfig
from reveal.errors import InputError
from reveal.evaluate.hitrate import channel_scores, ground_truth_rows, hit_rates
from reveal.evaluate.metrics import (
    auprc,
    best_f1,
    event_prf,
    point_adjusted_prf,
    point_prf,
)
from reveal.store.labelled import LabelledMachine, list_machines, load_machine

Progress = Callable[[str], None]
HIT_PERCENTS = (1.0, 1.5)


@dataclass(frozen=True)
class EvalSettings:
    """The one global setting used for every machine."""

    window_rows: int = 10
    features: tuple[str, ...] = ("mean", "std", "min", "max", "median", "slope")
    drift_window_s: float | None = 2 * 86400.0  # the feature centre follows 2 days of past
    drift_block_s: float = 3600.0  # ... updated hourly
    detect: DetectConfig = field(default_factory=DetectConfig)
    options: EnsembleOptions = field(default_factory=EnsembleOptions)
    baseline_variance: float = 0.95  # PCA baseline on raw rows
    baseline_quantile: float = 0.99


@dataclass
class MachineRun:
    """Test-row outputs of one method on one machine."""

    scores: np.ndarray  # (T,) anomaly score per test row
    flagged: np.ndarray  # bool (T,) automatic-threshold verdict
    metric_scores: np.ndarray  # (n_labelled, C) per-metric ranking scores, labelled rows
    labelled_rows: np.ndarray  # test rows of metric_scores
    seconds: float
    extra: dict = field(default_factory=dict)


def _feature_matrix(values: np.ndarray, timestamps: np.ndarray, channels: list[str],
                    settings: EvalSettings):
    windows = make_windows(timestamps, WindowConfig(size_rows=settings.window_rows,
                                                    stride_rows=1))
    return compute_features(values, channels, ["gauge"] * len(channels), windows,
                            features=settings.features)


def ensemble_options(settings: EvalSettings, interval_s: float) -> EnsembleOptions:
    """The ensemble options with the drift window converted from seconds to windows."""
    if settings.drift_window_s is None:
        return dataclasses.replace(settings.options, drift_window=None)
    block = max(1, round(settings.drift_block_s / interval_s))
    window = max(block, round(settings.drift_window_s / interval_s))
    return dataclasses.replace(settings.options, drift_window=window, drift_block=block)


def run_reveal(lm: LabelledMachine, settings: EvalSettings) -> MachineRun:
    """Fit the ensemble on train windows, score test windows (verdict → window's last row)."""
    t0 = time.perf_counter()
    train, test = lm.train, lm.test
    n = settings.window_rows
    if train.n_samples < n:
        raise InputError(f"{lm.dataset}/{lm.machine}: train shorter than one window")
    fm_train = _feature_matrix(train.values, train.timestamps_ns, train.channels, settings)
    context = np.vstack([train.values[train.n_samples - (n - 1):], test.values])
    ctx_ts = np.r_[train.timestamps_ns[train.n_samples - (n - 1):], test.timestamps_ns]
    fm_test = _feature_matrix(context, ctx_ts, test.channels, settings)
    assert fm_test.values.shape[0] == test.n_samples
    ens = Ensemble(settings.detect, ensemble_options(settings, train.interval_s)) \
        .fit(fm_train.values)
    verdicts: Verdicts = ens.score(fm_test.values, persistence_windows(
        settings.detect.persistence_s, test.interval_s))  # stride: one row
    rows = np.flatnonzero(lm.labels == 1)
    column_channel = np.array([test.channels.index(c) for c in fm_test.channels])
    contrib = ens.explain(fm_test.values, rows)
    per_metric = channel_scores(contrib, column_channel, test.n_channels)
    extra = {
        "detector_scores": verdicts.scores,
        "detector_flags": verdicts.flags,
        "columns_used": int(ens.columns_used_.size),
        "columns": int(fm_test.values.shape[1]),
    }
    return MachineRun(verdicts.combined, verdicts.flagged, per_metric, rows,
                      time.perf_counter() - t0, extra)


def run_pca_baseline(lm: LabelledMachine, settings: EvalSettings) -> MachineRun:
    """PCA reconstruction error on raw rows, threshold at the train errors' quantile."""
    from sklearn.decomposition import PCA

    t0 = time.perf_counter()
    train, test = lm.train.values, lm.test.values
    pca = PCA(n_components=settings.baseline_variance, svd_solver="full").fit(train)

    def sq_error(x: np.ndarray) -> np.ndarray:
        return (x - pca.inverse_transform(pca.transform(x))) ** 2

    threshold = float(np.quantile(sq_error(train).sum(axis=1), settings.baseline_quantile))
    err = sq_error(test)
    scores = err.sum(axis=1)
    rows = np.flatnonzero(lm.labels == 1)
    return MachineRun(scores, scores > threshold, err[rows], rows,
                      time.perf_counter() - t0, {"components": int(pca.n_components_)})


def score_run(lm: LabelledMachine, run: MachineRun) -> dict:
    """All metrics of one method on one machine."""
    y = lm.labels.astype(bool)
    auto = point_prf(y, run.flagged)
    best, _ = best_f1(y, run.scores)
    event = event_prf(y, run.flagged)
    adjusted = point_adjusted_prf(y, run.flagged)
    gt_index, gt_sets = ground_truth_rows(y, lm.interpretation)
    gt_rows = gt_index[run.labelled_rows]
    detected = run.flagged[run.labelled_rows]
    hits_detected = hit_rates(run.metric_scores[detected], gt_rows[detected], gt_sets,
                              HIT_PERCENTS)
    hits_all = hit_rates(run.metric_scores, gt_rows, gt_sets, HIT_PERCENTS)
    return {
        "auto": {"precision": auto.precision, "recall": auto.recall, "f1": auto.f1},
        "best_f1": best.f1,
        "best": {"precision": best.precision, "recall": best.recall},
        "auprc": auprc(y, run.scores),
        "event": {"precision": event.precision, "recall": event.recall, "f1": event.f1},
        "point_adjusted_f1_inflated": adjusted.f1,
        "hitrate_100": hits_detected[1.0],
        "hitrate_150": hits_detected[1.5],
        "hitrate_all_100": hits_all[1.0],
        "hitrate_all_150": hits_all[1.5],
        "flagged_share": float(run.flagged.mean()),
        "anomaly_share": float(y.mean()),
        "seconds": run.seconds,
    }


def _mean(rows: list[dict]) -> dict:
    """Mean over machines of every numeric leaf (NaN-aware)."""
    out: dict = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        if isinstance(vals[0], dict):
            out[key] = _mean(vals)
        else:
            arr = np.array(vals, dtype=np.float64)
            out[key] = float(np.nanmean(arr)) if np.isfinite(arr).any() else float("nan")
    return out


def evaluate(root: Path, datasets: Sequence[str] = ("smd", "asd"),
             machines: Sequence[str] | None = None, settings: EvalSettings | None = None,
             progress: Progress | None = None) -> dict:
    """Evaluate Reveal and the PCA baseline on every machine; per-machine and mean metrics."""
    settings = settings or EvalSettings()
    say = progress or (lambda _msg: None)
    result: dict = {"settings": _settings_dict(settings), "datasets": {}}
    for dataset in datasets:
        names = list_machines(root, dataset)
        if machines:
            names = [m for m in names if m in set(machines)]
        if not names:
            continue
        per_machine: dict = {}
        for name in names:
            lm = load_machine(root, dataset, name)
            reveal = score_run(lm, run_reveal(lm, settings))
            pca = score_run(lm, run_pca_baseline(lm, settings))
            per_machine[name] = {"reveal": reveal, "pca_raw": pca}
            say(f"{dataset}/{name}: best-F1 {reveal['best_f1']:.3f} (PCA {pca['best_f1']:.3f}), "
                f"auto F1 {reveal['auto']['f1']:.3f}, HitRate@150 {reveal['hitrate_150']:.3f}, "
                f"{reveal['seconds']:.1f} s")
        result["datasets"][dataset] = {
            "machines": per_machine,
            "mean": {method: _mean([m[method] for m in per_machine.values()])
                     for method in ("reveal", "pca_raw")},
            "n_machines": len(per_machine),
        }
    return result


def _settings_dict(settings: EvalSettings) -> dict:
    d = asdict(settings)
    d["detect"]["detectors"] = list(d["detect"]["detectors"])
    d["features"] = list(d["features"])
    return d
