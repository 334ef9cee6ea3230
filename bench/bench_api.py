"""What the Python API adds to an analysis: DataFrame conversion and the result's tables.

1. ``telemetry_from_frame`` (validation and conversion) on a host frame of ``--hours`` of
   100 ms samples × ``--channels`` channels, and ``frame_from_telemetry`` back.
2. ``reveal.analyze`` on a synthetic host (``--run-s`` seconds scored against a
   ``--baseline-s`` baseline, a CPU level shift in the middle) given as DataFrames and as
   Telemetry: the wall time of each (median of ``--repeat``), so the API's share shows.
3. The result's tables (``anomalies``, ``windows``, ``episodes``) and the JSON report.

    python bench/bench_api.py                      # about a minute on a quiet machine
    python bench/bench_api.py --hours 0.5 --out /tmp/api.json

Writes JSON to ``bench/results/api.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import reveal  # noqa: E402
from provenance import analysis_settings, arguments, write_result  # noqa: E402
from reveal.dataframe import frame_from_telemetry, telemetry_from_frame  # noqa: E402
from synthetic import ar1_host  # noqa: E402

START = pd.Timestamp("2026-03-02 14:00", tz="UTC")


def _median_s(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _frame(seconds: float, seed: int, fault: tuple[float, float] | None = None) -> pd.DataFrame:
    tel = ar1_host(seconds, seed, fault=fault)
    tel.meta["wall_offset_ns"] = START.value
    return frame_from_telemetry(tel)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0,
                        help="length of the conversion frame in hours (default 1)")
    parser.add_argument("--channels", type=int, default=500,
                        help="channels of the conversion frame (default 500)")
    parser.add_argument("--run-s", type=float, default=600.0,
                        help="seconds of the analysed run (default 600)")
    parser.add_argument("--baseline-s", type=float, default=600.0,
                        help="seconds of its baseline (default 600)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats (median)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "api.json")
    args = parser.parse_args()

    rows = int(args.hours * 36000)
    rng = np.random.default_rng(0)
    index = pd.date_range(START, periods=rows, freq="100ms")
    big = pd.DataFrame(rng.normal(size=(rows, args.channels)), index=index,
                       columns=[f"app.metric{{id={i}}}" for i in range(args.channels)])
    print(f"conversion: {rows} rows x {args.channels} channels", flush=True)
    to_tel_s, tel = _median_s(lambda: telemetry_from_frame(big), args.repeat)
    to_frame_s, _ = _median_s(lambda: frame_from_telemetry(tel), args.repeat)
    values = rows * args.channels

    print(f"analysis: {args.run_s:g} s run, {args.baseline_s:g} s baseline", flush=True)
    mid = args.run_s / 2
    base_df = _frame(args.baseline_s, seed=1)
    run_df = _frame(args.run_s, seed=3, fault=(mid, mid + 20))
    base_tel, run_tel = telemetry_from_frame(base_df), telemetry_from_frame(run_df)
    reveal.analyze(run_tel, baseline=base_tel)  # warm: caches of catalog lookups, imports
    frame_times, tel_times = [], []
    for _ in range(args.repeat):  # interleaved, so load from elsewhere hits both alike
        t, result = _median_s(lambda: reveal.analyze(run_df, baseline=base_df), 1)
        frame_times.append(t)
        tel_times.append(_median_s(lambda: reveal.analyze(run_tel, baseline=base_tel), 1)[0])
    frames_s, tels_s = statistics.median(frame_times), statistics.median(tel_times)
    tables_s, _ = _median_s(lambda: (result.anomalies, result.windows, result.episodes),
                            args.repeat)
    json_s, text = _median_s(result.to_json, args.repeat)

    out = {
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "conversion": {"rows": rows, "channels": args.channels,
                       "frame_to_telemetry_s": round(to_tel_s, 4),
                       "frame_to_telemetry_values_per_s": round(values / to_tel_s),
                       "telemetry_to_frame_s": round(to_frame_s, 4)},
        "analysis": {"run_s": args.run_s, "baseline_s": args.baseline_s,
                     "windows": len(result.report.windows.start_ns),
                     "anomalies": len(result.report.anomalies),
                     "from_frames_s": round(frames_s, 3),
                     "from_telemetry_s": round(tels_s, 3),
                     "api_share": round(max(frames_s - tels_s, 0.0) / frames_s, 4),
                     "tables_s": round(tables_s, 4),
                     "json_s": round(json_s, 4), "json_bytes": len(text)},
        "repeat": args.repeat,
    }
    write_result(args.out, out, {**arguments(args), "analysis": analysis_settings()}, indent=2)
    print(json.dumps(out, indent=2))
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    raise SystemExit(main())
