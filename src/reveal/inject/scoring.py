"""Score a report's verdicts against injected ground truth.

Definitions (also in docs/validation.md); windows are ``[start_ns, end_ns)``:

- An episode is **detected** when at least one flagged window overlaps it.
- **Time to detect** (seconds): ``max(0, end of the earliest-ending flagged overlapping
  window − episode start)``, i.e. when the evidence of a flag was complete, as an online
  detector could raise it. ``ttd_start_s`` is the same with the window's start (the
  optimistic figure some papers quote).
- **Attribution** is correct when the subsystem with the largest summed share over the
  anomalies overlapping the episode equals the injected subsystem.
- A **clean window** overlaps no episode widened by ``settle_s`` seconds after its end (the
  machine needs a moment to settle: freed memory, flushed caches). The **clean flag share**
  is flagged clean windows / clean windows.
- **Separation AUC** per detector (threshold-free): the probability that a window
  overlapping the episode scores above a clean window of the same run (ties count half).
  1.0: every episode window outranks every clean window; 0.5: no better than chance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reveal.inject.groundtruth import Episode

DEFAULT_SETTLE_S = 10.0
#: Settle times (s) the clean windows are also counted with: a flagged share that falls
#: as the settle time grows says the flags are the host catching up after the faults
#: (writeback, reclaim, free lists draining); one that stays says false alarms on a
#: settled host.
SETTLE_STUDY_S = (10.0, 15.0, 20.0, 30.0)


@dataclass
class EpisodeScore:
    """The verdict on one injected episode."""

    kind: str
    intensity: str
    subsystem: str
    start_ns: int
    end_ns: int
    detected: bool
    ttd_s: float | None
    ttd_start_s: float | None
    attributed: str | None  # top subsystem of overlapping anomalies
    attribution_ok: bool
    overlapping_windows: int
    flagged_windows: int
    max_ratio: dict[str, float] = field(default_factory=dict)  # detector: max score/threshold
    run: str = ""
    auc: dict[str, float] = field(default_factory=dict)  # detector: separation AUC
    # the fault acted on a named place (cgroup, network namespace): whether the claim of
    # the strongest flagged window overlapping it names that place (None: nothing to name)
    named: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def overlap_matrix(w_start: np.ndarray, w_end: np.ndarray, e_start: np.ndarray,
                   e_end: np.ndarray) -> np.ndarray:
    """bool (episodes, windows): window ``[ws, we)`` overlaps episode ``[es, ee)``."""
    return (w_start[None, :] < e_end[:, None]) & (w_end[None, :] > e_start[:, None])


def clean_mask(w_start: np.ndarray, w_end: np.ndarray, episodes: Sequence[Episode],
               settle_s: float = DEFAULT_SETTLE_S) -> np.ndarray:
    """bool (windows,): windows overlapping no episode (each widened by ``settle_s``)."""
    if not episodes:
        return np.ones(len(w_start), dtype=bool)
    es = np.array([e.start_ns for e in episodes], dtype=np.int64)
    ee = np.array([e.end_ns for e in episodes], dtype=np.int64) + int(settle_s * 1e9)
    return ~overlap_matrix(w_start, w_end, es, ee).any(axis=0)


def score_episodes(episodes: Sequence[Episode], w_start: np.ndarray, w_end: np.ndarray,
                   flagged: np.ndarray, shares: Sequence[dict[str, float] | None],
                   scores: dict[str, np.ndarray] | None = None,
                   thresholds: dict[str, float] | None = None,
                   run: str = "") -> list[EpisodeScore]:
    """One :class:`EpisodeScore` per episode.

    ``shares[w]``: subsystem → share for flagged window ``w`` (None when not flagged).
    ``scores``/``thresholds``: per-detector window scores and thresholds, to record how
    close a missed episode came (max score / threshold over its windows).
    """
    w_start = np.asarray(w_start, dtype=np.int64)
    w_end = np.asarray(w_end, dtype=np.int64)
    flagged = np.asarray(flagged, dtype=bool)
    if not episodes:
        return []
    es = np.array([e.start_ns for e in episodes], dtype=np.int64)
    ee = np.array([e.end_ns for e in episodes], dtype=np.int64)
    over = overlap_matrix(w_start, w_end, es, ee)
    hits = over & flagged[None, :]
    out = []
    for i, episode in enumerate(episodes):
        idx = np.flatnonzero(hits[i])
        ttd = ttd_start = None
        attributed = None
        if len(idx):
            ttd = max(0.0, float(w_end[idx].min() - episode.start_ns) / 1e9)
            ttd_start = max(0.0, float(w_start[idx].min() - episode.start_ns) / 1e9)
            total: dict[str, float] = {}
            for w in idx:
                for subsystem, share in (shares[w] or {}).items():
                    total[subsystem] = total.get(subsystem, 0.0) + float(share)
            attributed = max(total, key=total.__getitem__) if total else None
        ratios: dict[str, float] = {}
        if scores and thresholds:
            cols = np.flatnonzero(over[i])
            for name, values in scores.items():
                thr = thresholds.get(name)
                if thr and len(cols) and np.isfinite(thr) and thr != 0:
                    ratios[name] = round(float(np.nanmax(values[cols]) / thr), 3)
        out.append(EpisodeScore(
            episode.kind, episode.intensity, episode.subsystem, episode.start_ns,
            episode.end_ns, bool(len(idx)), ttd, ttd_start, attributed,
            attributed == episode.subsystem, int(over[i].sum()), len(idx), ratios, run))
    return out


def separation_auc(inside: np.ndarray, clean: np.ndarray) -> float | None:
    """P(score of an episode window > score of a clean window), ties counting half."""
    a = np.asarray(inside, dtype=float)
    b = np.asarray(clean, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if not len(a) or not len(b):
        return None
    greater = (a[:, None] > b[None, :]).mean()
    ties = (a[:, None] == b[None, :]).mean()
    return float(greater + 0.5 * ties)


def score_report(report: Any, episodes: Sequence[Episode], settle_s: float = DEFAULT_SETTLE_S,
                 run: str = "") -> tuple[list[EpisodeScore], dict[str, int]]:
    """Score a :class:`reveal.report.schema.Report`: episode verdicts and clean-window counts."""
    table = report.windows
    shares: list[dict[str, float] | None] = [None] * len(table.start_ns)
    for anomaly in report.anomalies:
        shares[anomaly.window_id] = dict(anomaly.subsystem_shares) or (
            {anomaly.subsystems[0]: 1.0} if anomaly.subsystems else {})
    thresholds = {d.name: d.threshold for d in report.detectors}
    scored = score_episodes(episodes, table.start_ns, table.end_ns, table.flagged, shares,
                            table.scores, thresholds, run)
    start, end = np.asarray(table.start_ns), np.asarray(table.end_ns)
    masks = {settle: clean_mask(start, end, episodes, settle)
             for settle in sorted({*SETTLE_STUDY_S, float(settle_s)})}
    clean = masks[float(settle_s)]
    if episodes:
        over = overlap_matrix(start, end,
                              np.array([e.start_ns for e in episodes], dtype=np.int64),
                              np.array([e.end_ns for e in episodes], dtype=np.int64))
        columns = {**{k: np.asarray(v, dtype=float) for k, v in table.scores.items()},
                   "combined": np.asarray(table.combined, dtype=float)}
        for i, score in enumerate(scored):
            for name, values in columns.items():
                auc = separation_auc(values[over[i]], values[clean])
                if auc is not None:
                    score.auc[name] = round(auc, 3)
    flagged = np.asarray(table.flagged, dtype=bool)
    by_settle = {f"{settle:g}": [int(mask.sum()), int((mask & flagged).sum())]
                 for settle, mask in masks.items()}
    return scored, {"clean_windows": int(clean.sum()),
                    "clean_flagged": int((clean & flagged).sum()),
                    "clean_by_settle": by_settle}


def merge_by_settle(counts: Sequence[dict[str, list[int]]]) -> dict[str, dict[str, Any]]:
    """Per settle time (s, as text), the clean windows, flagged ones and their share,
    summed over runs (each ``{settle: [windows, flagged]}`` from :func:`score_report`)."""
    total: dict[str, list[int]] = {}
    for run in counts:
        for settle, (windows, flagged) in run.items():
            acc = total.setdefault(settle, [0, 0])
            acc[0] += windows
            acc[1] += flagged
    return {settle: {"windows": w, "flagged": f, "share": f / w if w else None}
            for settle, (w, f) in sorted(total.items(), key=lambda kv: float(kv[0]))}


def names_place(episode: Episode, w_start: np.ndarray, w_end: np.ndarray,
                combined: np.ndarray, flagged: np.ndarray, claims: dict[int, str],
                ) -> bool | None:
    """Whether the claim of the strongest flagged window overlapping ``episode`` names one
    of the places the fault acted on (its detail's ``where``); None when it names none or
    no flagged window overlaps."""
    where = [str(w) for w in episode.detail.get("where", []) if w]
    if not where:
        return None
    inside = np.flatnonzero(overlap_matrix(w_start, w_end, np.array([episode.start_ns]),
                                           np.array([episode.end_ns]))[0] & flagged)
    if not len(inside):
        return None
    strongest = int(inside[np.argmax(np.nan_to_num(combined[inside], nan=-np.inf))])
    claim = claims.get(strongest, "")
    return any(w in claim for w in where)


def summarise(scores: Sequence[EpisodeScore], clean_windows: int,
              clean_flagged: int) -> dict[str, Any]:
    """Totals and per (kind, intensity) rows: recall, median TTD, attribution accuracy."""

    def block(group: Sequence[EpisodeScore]) -> dict[str, Any]:
        detected = [s for s in group if s.detected]
        ttd = [s.ttd_s for s in detected if s.ttd_s is not None]
        ttd0 = [s.ttd_start_s for s in detected if s.ttd_start_s is not None]
        names = sorted({n for s in group for n in s.auc})
        to_name = [s for s in detected if s.named is not None]
        return {
            "auc": {n: round(float(np.mean([s.auc[n] for s in group if n in s.auc])), 3)
                    for n in names},
            "episodes": len(group),
            "detected": len(detected),
            "recall": len(detected) / len(group) if group else None,
            "median_ttd_s": float(np.median(ttd)) if ttd else None,
            "median_ttd_start_s": float(np.median(ttd0)) if ttd0 else None,
            "attributed_ok": sum(s.attribution_ok for s in group),
            "attribution_accuracy": (sum(s.attribution_ok for s in detected) / len(detected)
                                     if detected else None),
            "named": sum(bool(s.named) for s in to_name),
            "naming_accuracy": (sum(bool(s.named) for s in to_name) / len(to_name)
                                if to_name else None),
        }

    rows = []
    for key in sorted({(s.kind, s.intensity) for s in scores}):
        group = [s for s in scores if (s.kind, s.intensity) == key]
        rows.append({"kind": key[0], "intensity": key[1], "subsystem": group[0].subsystem,
                     **block(group)})
    total = block(scores)
    total["clean_windows"] = clean_windows
    total["clean_flagged"] = clean_flagged
    total["clean_flag_share"] = clean_flagged / clean_windows if clean_windows else None
    return {"total": total, "rows": rows}
