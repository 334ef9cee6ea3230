"""Benchmark: window features for one day of 400 channels at 100 ms.

864,000 rows × 400 channels, windows of 3 s with a 1 s stride (86,400 windows of 30 rows),
all dynamic features including ADF. Records wall time, peak RSS, a per-feature time
breakdown, and tsfresh's ``extract_features`` on a slice of the same windows (time per
window-channel and agreement). Writes bench/results/features.json.

    python bench/bench_features.py                  # the full day (a few minutes)
    python bench/bench_features.py --rows 86400     # a tenth, for a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import psutil

from provenance import arguments, dataclass_settings, write_result
from reveal.analysis.features import DYNAMIC_FEATURES, compute_features
from reveal.analysis.windows import make_windows
from reveal.config import WindowConfig

RESULTS = Path(__file__).resolve().parent / "results" / "features.json"
INTERVAL_NS = 100_000_000

# channel families of synthetic telemetry and their share of the channels
FAMILIES = (
    ("random_walk", 0.25),  # memory used, queue depths
    ("ar1", 0.25),  # utilisations, rates around a level
    ("noise_spikes", 0.15),  # latencies with outliers
    ("sparse_spikes", 0.10),  # mostly idle counters turned rates
    ("steps", 0.10),  # configuration-like levels that change now and then
    ("sine_noise", 0.10),  # periodic load
    ("constant", 0.05),  # unchanging channels
)


def synthetic_telemetry(rows: int, channels: int, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    """(rows, channels) float64 matrix of telemetry-like series and the family of each."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    values = np.empty((rows, channels))
    families: list[str] = []
    for name, share in FAMILIES:
        families += [name] * round(share * channels)
    families = (families + ["ar1"] * channels)[:channels]
    t = np.arange(rows, dtype=np.float64)
    for c, fam in enumerate(families):
        scale = 10.0 ** rng.uniform(-2, 6)
        level = scale * rng.uniform(0, 100)
        if fam == "random_walk":
            col = level + scale * np.cumsum(rng.standard_normal(rows))
        elif fam == "ar1":
            phi = rng.uniform(0.3, 0.98)
            col = level + scale * lfilter([1.0], [1.0, -phi], rng.standard_normal(rows))
        elif fam == "noise_spikes":
            col = level + scale * rng.standard_normal(rows)
            hit = rng.random(rows) < 0.002
            col[hit] += scale * rng.exponential(20.0, hit.sum())
        elif fam == "sparse_spikes":
            col = np.where(rng.random(rows) < 0.03, scale * rng.exponential(5.0, rows), 0.0)
        elif fam == "steps":
            change = rng.random(rows) < 0.0005
            col = level + scale * np.cumsum(np.where(change, rng.standard_normal(rows), 0.0))
            col += scale * 1e-3 * rng.standard_normal(rows)
        elif fam == "sine_noise":
            period = rng.uniform(50, 5000)
            col = level + scale * (np.sin(2 * np.pi * t / period) + 0.1 * rng.standard_normal(rows))
        else:
            col = np.full(rows, level)
        values[:, c] = col
    return values, families


class PeakRss:
    """Samples this process's RSS every 20 ms while active."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def tsfresh_settings() -> dict:
    return {
        "mean": None,
        "variance": None,
        "standard_deviation": None,
        "skewness": None,
        "kurtosis": None,
        "minimum": None,
        "maximum": None,
        "median": None,
        "linear_trend": [{"attr": "slope"}],
        "autocorrelation": [{"lag": 1}],
        "augmented_dickey_fuller": [{"attr": "teststat", "autolag": "AIC"}],
    }


TSFRESH_NAME = {
    "mean": "mean",
    "variance": "variance",
    "std": "standard_deviation",
    "skewness": "skewness",
    "kurtosis": "kurtosis",
    "min": "minimum",
    "max": "maximum",
    "median": "median",
    "slope": 'linear_trend__attr_"slope"',
    "autocorr_lag1": "autocorrelation__lag_1",
    "adf_stat": 'augmented_dickey_fuller__attr_"teststat"__autolag_"AIC"',
}


def run_tsfresh(
    values: np.ndarray, starts: np.ndarray, size: int, chans: list[int], n_jobs: int
) -> tuple[float, np.ndarray]:
    """tsfresh extract_features on the given windows × channels: (seconds, (W, C, F))."""
    import pandas as pd
    from tsfresh import extract_features

    frames = {
        "id": np.repeat(np.arange(len(starts)), size),
        "time": np.tile(np.arange(size), len(starts)),
    }
    rows = (starts[:, None] + np.arange(size)[None, :]).ravel()
    for c in chans:
        frames[f"c{c}"] = values[rows, c]
    df = pd.DataFrame(frames)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        res = extract_features(
            df,
            column_id="id",
            column_sort="time",
            default_fc_parameters=tsfresh_settings(),
            n_jobs=n_jobs,
            disable_progressbar=True,
        )
        seconds = time.perf_counter() - t0
    out = np.empty((len(starts), len(chans), len(DYNAMIC_FEATURES)))
    for i, c in enumerate(chans):
        for j, f in enumerate(DYNAMIC_FEATURES):
            out[:, i, j] = res[f"c{c}__{TSFRESH_NAME[f]}"].to_numpy()
    return seconds, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=864_000)
    ap.add_argument("--channels", type=int, default=400)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--n-jobs", type=int, default=None)
    ap.add_argument(
        "--breakdown-rows",
        type=int,
        default=36_000,
        help="rows used for the per-feature breakdown (single thread)",
    )
    ap.add_argument("--tsfresh-windows", type=int, default=100)
    ap.add_argument("--tsfresh-channels", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=2, help="full-day runs; the best is reported")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()

    started = time.monotonic()
    t0 = time.perf_counter()
    values, families = synthetic_telemetry(args.rows, args.channels)
    gen_s = time.perf_counter() - t0
    ts = np.arange(args.rows, dtype=np.int64) * INTERVAL_NS
    windows = make_windows(ts, WindowConfig())
    names = [f"{fam}.{c}" for c, fam in enumerate(families)]
    kinds = ["gauge"] * args.channels
    dtype = np.float32 if args.dtype == "float32" else np.float64

    rss_before = psutil.Process().memory_info().rss
    runs: list[dict[str, float]] = []
    fm = None
    for _ in range(args.repeat):
        fm = None  # free the previous output before the next run
        load_start = os.getloadavg()[0]
        with PeakRss() as peak:
            t0 = time.perf_counter()
            cpu0 = time.process_time()
            fm = compute_features(values, names, kinds, windows, dtype=dtype, n_jobs=args.n_jobs)
            wall = time.perf_counter() - t0
            cpu = time.process_time() - cpu0
        runs.append(
            {
                "wall_s": round(wall, 2),
                "cpu_s": round(cpu, 2),
                "peak_rss_gib": round(peak.peak / 2**30, 3),
                "load_avg_1m_at_start": load_start,
                "load_avg_1m_after": os.getloadavg()[0],
            }
        )
        print(
            f"{len(windows)} windows x {fm.values.shape[1]} columns in {wall:.1f} s "
            f"(cpu {cpu:.1f} s), peak RSS {peak.peak / 2**30:.2f} GiB, "
            f"load {load_start:.1f}"
        )
    assert fm is not None
    best = min(runs, key=lambda r: r["wall_s"])
    wall, cpu = best["wall_s"], best["cpu_s"]

    # per-feature breakdown on a slice, single thread
    br_rows = min(args.breakdown_rows, args.rows)
    br_values = np.ascontiguousarray(values[:br_rows])
    br_windows = make_windows(ts[:br_rows], WindowConfig())
    breakdown: dict[str, float] = {}
    for feat in DYNAMIC_FEATURES:
        t1 = time.perf_counter()
        compute_features(br_values, names, kinds, br_windows, features=[feat], n_jobs=1)
        breakdown[feat] = time.perf_counter() - t1
    t1 = time.perf_counter()
    compute_features(br_values, names, kinds, br_windows, n_jobs=1)
    all_one_thread = time.perf_counter() - t1
    n_br = len(br_windows) * args.channels
    print(
        "per feature (ns per window-channel, one thread):",
        {k: round(v / n_br * 1e9) for k, v in breakdown.items()},
    )

    # tsfresh on a slice of the same windows
    n_tw = min(args.tsfresh_windows, len(windows))
    pick = np.linspace(0, len(windows) - 1, n_tw).astype(np.int64)
    step = max(1, args.channels // args.tsfresh_channels)
    chans = list(range(0, args.channels, step))[: args.tsfresh_channels]
    ts_seconds, ts_out = run_tsfresh(
        values, windows.start[pick], windows.size, chans, n_jobs=min(2, os.cpu_count() or 1)
    )
    ours = fm.values.reshape(len(windows), args.channels, len(DYNAMIC_FEATURES))
    ours = ours[pick][:, chans].astype(np.float64)
    rows = windows.start[pick][:, None] + np.arange(windows.size)[None, :]
    scale = np.abs(values[rows][:, :, chans]).max(axis=1)  # (windows, channels)
    both_nan = np.isnan(ours) & np.isnan(ts_out)
    tol = 1e-6 if dtype == np.float32 else 1e-9
    # tsfresh's own round-off: a constant window's np.var is ~1e-21 * level², not 0
    power = {"variance": 2, "std": 1, "mean": 1, "min": 1, "max": 1, "median": 1, "slope": 1}
    agree: dict[str, float] = {}
    mismatched_families: dict[str, list[str]] = {}
    for j, f in enumerate(DYNAMIC_FEATURES):
        atol = 1e-12 * scale ** power.get(f, 0) if f in power else 0.0
        ok = np.abs(ours[..., j] - ts_out[..., j]) <= tol * np.abs(ts_out[..., j]) + atol
        ok |= both_nan[..., j]
        agree[f] = float(ok.mean())
        bad_cols = np.flatnonzero(~ok.all(axis=0))
        mismatched_families[f] = sorted({families[chans[i]] for i in bad_cols})
    per_series_ts = ts_seconds / (n_tw * len(chans))
    per_series_ours = wall / (len(windows) * args.channels)

    result = {
        "benchmark": "window features, all dynamic features incl. ADF",
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "load_avg_1m_at_start_of_best_run": best["load_avg_1m_at_start"],
        },
        "note": "2 cores shared with other work (see load averages): wall time depends on "
        "the load, cpu_s much less so",
        "rows": args.rows,
        "channels": args.channels,
        "windows": len(windows),
        "window_rows": windows.size,
        "stride_rows": windows.stride,
        "columns": int(fm.values.shape[1]),
        "output_dtype": args.dtype,
        "n_jobs": args.n_jobs,
        "data_generation_s": round(gen_s, 2),
        "wall_s": wall,
        "cpu_s": cpu,
        "cores_used": round(cpu / wall, 2),
        "peak_rss_gib": max(r["peak_rss_gib"] for r in runs),
        "runs": runs,
        "rss_before_gib": round(rss_before / 2**30, 3),
        "max_rss_gib_getrusage": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3
        ),
        "input_gib": round(values.nbytes / 2**30, 3),
        "output_gib": round(fm.values.nbytes / 2**30, 3),
        "ns_per_window_channel": round(per_series_ours * 1e9, 1),
        "breakdown": {
            "rows": br_rows,
            "window_channels": n_br,
            "one_thread_all_features_s": round(all_one_thread, 3),
            "one_thread_ns_per_window_channel": {
                k: round(v / n_br * 1e9, 1) for k, v in breakdown.items()
            },
            "note": "each feature alone, including the shared gather/centring it needs",
        },
        "tsfresh": {
            "windows": n_tw,
            "channels": len(chans),
            "n_jobs": min(2, os.cpu_count() or 1),
            "seconds": round(ts_seconds, 2),
            "ns_per_window_channel": round(per_series_ts * 1e9, 1),
            "speedup_per_window_channel": round(per_series_ts / per_series_ours, 1),
            "share_equal_within_tol": agree,
            "tol": tol,
            "families_with_differences": mismatched_families,
            "note": "ADF differs only on degenerate windows of spiky series (perfect fits, "
            "exact AIC ties: see docs/features.md)",
        },
    }
    settings = {**arguments(args), "interval_ns": INTERVAL_NS,
                "window": dataclass_settings(WindowConfig()),
                "features": list(DYNAMIC_FEATURES), "families": dict(FAMILIES)}
    write_result(args.out, result, settings, started=started, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
