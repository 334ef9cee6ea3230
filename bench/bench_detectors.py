"""Detector cost at scale: fit + score 86,400 windows × 4,400 feature columns.

A synthetic baseline and run (float32, a 40-factor latent structure plus noise, a planted
6-sigma shift in 5 % of the columns for 600 windows of the run) of the given size; the
ensemble (robust scaling, Z, MAHA, IF, GMM, combined verdict) is fitted on the baseline
(each model on a seeded subsample of ``--fit-rows`` windows, thresholds from the scores of
every baseline window) and scores the run; then up to 2,000 flagged windows are explained.
Wall time per stage and per detector, and the peak RSS of this process
(``resource.getrusage``, which includes the two input matrices, 1.4 GiB each), go to JSON.

    python bench/bench_detectors.py                     # 86,400 × 4,400 (the target)
    python bench/bench_detectors.py --windows 8640 --columns 440 --out /tmp/small.json

Writes ``bench/results/detectors.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

from provenance import analysis_settings, arguments, dataclass_settings, write_result
from reveal.analysis.ensemble import Ensemble, EnsembleOptions
from reveal.config import DetectConfig

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"fit_plus_score_s_max": 120.0, "peak_rss_gib_max": 8.0}


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def synthetic(n: int, k: int, seed: int, factors: int = 40) -> np.ndarray:
    """(n, k) float32: ``factors`` latent factors mixed into k columns (the same mixing for
    every seed), plus noise."""
    mix = np.random.default_rng(0).normal(size=(factors, k)).astype(np.float32)
    rng = np.random.default_rng(seed)
    out = np.empty((n, k), dtype=np.float32)
    step = 8192
    for r0 in range(0, n, step):
        m = min(step, n - r0)
        out[r0:r0 + m] = rng.standard_normal((m, factors), dtype=np.float32) @ mix
        out[r0:r0 + m] += 0.5 * rng.standard_normal((m, k), dtype=np.float32)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=86_400)
    parser.add_argument("--columns", type=int, default=4_400)
    parser.add_argument("--fit-rows", type=int, default=20_000,
                        help="baseline windows each model is fitted on (seeded subsample)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "detectors.json"))
    args = parser.parse_args()

    started = time.monotonic()
    t0 = time.perf_counter()
    base = synthetic(args.windows, args.columns, seed=1)
    run = synthetic(args.windows, args.columns, seed=2)
    planted = slice(args.windows // 2, args.windows // 2 + 600)
    n_planted = max(1, args.columns // 20)  # a shift in 5 % of the columns
    run[planted, :n_planted] += 6.0 * base[:, :n_planted].std(axis=0)
    t_data = time.perf_counter() - t0
    rss_data = peak_rss_gib()

    options = EnsembleOptions(max_fit_rows=args.fit_rows, dtype="float32")
    ens = Ensemble(DetectConfig(), options)
    t0 = time.perf_counter()
    ens.fit(base)
    t_fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    verdicts = ens.score(run)
    t_score = time.perf_counter() - t0
    per_detector = {name: {"fit_s": round(ens.fit_seconds_[name], 2),
                           "score_s": round(ens.score_seconds_[name], 2)}
                    for name in ens.fit_seconds_}
    rows = np.flatnonzero(verdicts.flagged)
    t0 = time.perf_counter()
    contrib = ens.explain(run, rows[:2000])
    t_explain = time.perf_counter() - t0

    recall = float(verdicts.flagged[planted].mean())
    clean = np.ones(args.windows, dtype=bool)
    clean[planted] = False
    in_planted = (rows[:2000] >= planted.start) & (rows[:2000] < planted.stop)
    top = contrib[in_planted].argmax(axis=1) if in_planted.any() else np.zeros(0, int)
    result = {
        "windows": args.windows,
        "columns": args.columns,
        "dtype": "float32",
        "fit_rows": args.fit_rows,
        "detectors": [d.tag for d in ens.detectors_],
        "seconds": {
            "synthetic_data": round(t_data, 2),
            "ensemble_fit": round(t_fit, 2),
            "ensemble_score": round(t_score, 2),
            "fit_plus_score": round(t_fit + t_score, 2),
            "explain_flagged": round(t_explain, 2),
            "explained_windows": int(min(rows.size, 2000)),
        },
        "per_detector": per_detector,
        "per_detector_note": "fit_s includes scoring every baseline window (threshold); "
                             "the ensemble's fit also includes robust scaling",
        "peak_rss_gib": round(peak_rss_gib(), 2),
        "rss_after_data_gib": round(rss_data, 2),
        "sanity": {
            "planted_recall": round(recall, 3),
            "flagged_share_clean": round(float(verdicts.flagged[clean].mean()), 4),
            "planted_columns": n_planted,
            "planted_windows_explained_by_planted_column": round(float(np.mean(top < n_planted)),
                                                                 3)
            if top.size else None,
            "mahalanobis_components": next((int(d.n_components_) for d in ens.detectors_
                                            if d.name == "pca_mahalanobis"), None),
        },
        "targets": TARGETS,
        "meets": {
            "fit_plus_score": t_fit + t_score <= TARGETS["fit_plus_score_s_max"],
            "peak_rss": peak_rss_gib() <= TARGETS["peak_rss_gib_max"],
        },
        "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                 "python": platform.python_version(),
                 "note": "shared 2-core machine; timings are noisy while others work"},
    }
    settings = {**arguments(args), "ensemble": dataclass_settings(options),
                "detect": dataclass_settings(ens.config), "analysis": analysis_settings()}
    write_result(args.out, result, settings, started=started, indent=2)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
