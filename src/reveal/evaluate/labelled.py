"""Reveal against the labelled SMD / ASD machines, with an honest, causal protocol.

Per machine, exactly what ``reveal analyze DATASET:MACHINE`` does (:class:`reveal.model.Reveal`
with the preset for the data's sampling interval): window features of the ``train`` half fit
the model (scaling, detectors, thresholds); the ``test`` half is scored window by window.

- fitted on train only: no scale, model or threshold is fitted on test. What adapts to
  test: the minute preset's drift-following centre, which follows the test's own past
  windows (causally);
- causal: a window's verdict is assigned to its LAST row; the first test windows take
  their leading rows from the end of train (which precedes test in time), so every test
  row has exactly one window ending on it; no smoothing looks ahead;
- one global setting for all machines (:class:`EvalSettings` defaults).

``mode="stream"`` walks the test part instead with the live logic (refits on recent
unflagged windows, consensus of model generations; :mod:`reveal.evaluate.stream`);
``"both"`` gives batch and stream side by side.

False alarms as an operator counts them: flagged runs (maximal runs of consecutive
flagged rows) that touch no labelled segment, per hour of rows outside labelled segments.

Side by side, the plain baseline: PCA reconstruction error on the raw rows (PCA keeping
95 % of the train variance, threshold at the train errors' 99th percentile, metrics ranked
by their squared reconstruction error for HitRate).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reveal.errors import InputError
from reveal.evaluate.hitrate import channel_scores, ground_truth_rows, hit_rates
from reveal.evaluate.machine_run import MachineRun
from reveal.evaluate.metrics import (
    auprc,
    best_f1,
    event_prf,
    false_alarm_episodes,
    point_adjusted_prf,
    point_prf,
)
from reveal.evaluate.stream import run_stream
from reveal.model import Reveal, fit_for_run
from reveal.store.labelled import LabelledMachine, list_machines, load_machine

Progress = Callable[[str], None]
HIT_PERCENTS = (1.0, 1.5)


@dataclass(frozen=True)
class EvalSettings:
    """The one global setting used for every machine: ``reveal analyze``'s own (the preset
    for the data's sampling interval, :mod:`reveal.analysis.presets`), plus the PCA
    baseline's. ``overrides`` change single analysis settings by dotted name."""

    preset: str = "auto"
    overrides: tuple[tuple[str, Any], ...] = ()
    baseline_variance: float = 0.95  # PCA baseline on raw rows
    baseline_quantile: float = 0.99
    chunk_s: float | None = None  # stream mode: seconds per chunk (None: the refit period)

    def validate(self) -> None:
        """Raise :class:`InputError` for an unknown analysis setting (before any work)."""
        reveal_model(self).resolve_config(60.0)


MODES = ("batch", "stream", "both")
METHODS = {"batch": ("reveal", "pca_raw"), "stream": ("stream", "pca_raw"),
           "both": ("reveal", "stream", "pca_raw")}


def reveal_model(settings: EvalSettings) -> Reveal:
    """The (unfitted) model ``reveal analyze`` would build with these settings."""
    return Reveal(preset=settings.preset, overrides=dict(settings.overrides))


def run_reveal(lm: LabelledMachine, settings: EvalSettings) -> MachineRun:
    """What ``reveal analyze DATASET:MACHINE`` does: fit on train, score test causally (a
    window's verdict on its last row, the first windows completed by train's last rows)."""
    t0 = time.perf_counter()
    train, test = lm.train, lm.test
    model = fit_for_run(reveal_model(settings), test, train)
    analysis = model.score_windows(test, lead_in=train)
    verdicts = analysis.verdicts
    if verdicts.combined.shape[0] != test.n_samples:
        raise InputError(f"{lm.dataset}/{lm.machine}: {verdicts.combined.shape[0]} windows "
                         f"for {test.n_samples} test rows")
    rows = np.flatnonzero(lm.labels == 1)
    index = {c: i for i, c in enumerate(test.channels)}
    column_channel = np.array([index[c] for c in analysis.features.channels])
    contrib = model.explain(analysis, rows)
    per_metric = channel_scores(contrib, column_channel, test.n_channels)
    extra = {
        "detector_scores": verdicts.scores,
        "detector_flags": verdicts.flags,
        "columns_used": int(model.fitted_.ensemble.columns_used_.size),
        "columns": int(analysis.features.values.shape[1]),
        "preset": model.config_.preset,
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


#: what a stream walk counts (MachineRun.extra of reveal.evaluate.stream.run_stream)
STREAM_COUNTS = ("chunks", "refits", "refits_waiting", "generations")


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
    episodes, clean_rows = false_alarm_episodes(y, run.flagged)
    clean_hours = clean_rows * lm.test.interval_s / 3600.0
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
        "false_episodes": episodes,
        "false_episodes_per_hour": episodes / clean_hours if clean_hours else float("nan"),
        "false_episodes_per_day": 24 * episodes / clean_hours if clean_hours else float("nan"),
        "clean_flagged_share": float(run.flagged[~y].mean()) if (~y).any() else float("nan"),
        "seconds": run.seconds,
        # a stream walk: chunks, refits made and refused, generations voting at the end
        **({"refits": {k: run.extra[k] for k in STREAM_COUNTS}}
           if all(k in run.extra for k in STREAM_COUNTS) else {}),
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


def run_method(lm: LabelledMachine, method: str, settings: EvalSettings) -> MachineRun:
    """One method on one machine: ``reveal`` (batch), ``stream`` or ``pca_raw``."""
    if method == "reveal":
        return run_reveal(lm, settings)
    if method == "stream":
        return run_stream(lm, reveal_model(settings), settings.chunk_s)
    if method == "pca_raw":
        return run_pca_baseline(lm, settings)
    raise InputError(f"unknown method {method!r}")


def evaluate(root: Path, datasets: Sequence[str] = ("smd", "asd"),
             machines: Sequence[str] | None = None, settings: EvalSettings | None = None,
             progress: Progress | None = None, mode: str = "batch") -> dict:
    """Evaluate Reveal (``mode``: batch, stream or both) and the PCA baseline on every
    machine; per-machine and mean metrics."""
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r} ({', '.join(MODES)})")
    methods = METHODS[mode]
    settings = settings or EvalSettings()
    say = progress or (lambda _msg: None)
    result: dict = {"datasets": {}}
    intervals: dict[str, float] = {}
    for dataset in datasets:
        names = list_machines(root, dataset)
        if machines:
            names = [m for m in names if m in set(machines)]
        if not names:
            continue
        per_machine: dict = {}
        for name in names:
            lm = load_machine(root, dataset, name)
            intervals[dataset] = lm.train.interval_s
            per_machine[name] = {method: score_run(lm, run_method(lm, method, settings))
                                 for method in methods}
            say(f"{dataset}/{name}: " + "; ".join(
                f"{method} best-F1 {r['best_f1']:.3f} auto F1 {r['auto']['f1']:.3f} "
                f"({r['seconds']:.1f} s)" for method, r in per_machine[name].items()))
        result["datasets"][dataset] = {
            "machines": per_machine,
            "mean": {method: _mean([m[method] for m in per_machine.values()])
                     for method in methods},
            "n_machines": len(per_machine),
        }
    result["mode"] = mode
    result["settings"] = _settings_dict(settings, intervals)
    return result


def _settings_dict(settings: EvalSettings, intervals: dict[str, float]) -> dict:
    """The settings and, per dataset, the analysis settings its sampling interval gets."""
    model = reveal_model(settings)
    return {"preset": settings.preset, "overrides": dict(settings.overrides),
            "chunk_s": settings.chunk_s,
            "baseline_variance": settings.baseline_variance,
            "baseline_quantile": settings.baseline_quantile,
            "analysis": {dataset: asdict(model.resolve_config(interval))
                         for dataset, interval in intervals.items()}}
