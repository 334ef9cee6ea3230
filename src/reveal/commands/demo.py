"""``reveal demo``: the main job on a fresh machine, end to end in about three minutes.

Starts the reference training job, records a clean baseline with the real collector, then
a run with a CPU-contention and a disk-burst episode at known times, analyses it with
detectors fitted on the baseline, prints the anomaly table and writes a report directory
(report.md, report.json, PNG figures).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

NAME = "demo"
HELP = ("Record a short fault scenario on this host (clean baseline, then CPU contention "
        "and a disk burst), analyse it, print the anomalies and write a report directory.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo-report"), metavar="DIR",
                        help="report directory to write (runs are kept in DIR/runs)")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of the baseline and of the faulted run (each, ≥ 30)")
    parser.add_argument("--workload", choices=("torch_train", "numpy_train"), default=None,
                        help="reference workload (default: PyTorch when installed)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args: argparse.Namespace) -> int:
    from reveal.errors import RevealError

    if args.duration < 30:
        raise RevealError("--duration must be at least 30 seconds")
    from reveal.analyze.derive import derive
    from reveal.analyze.pipeline import analyze_run
    from reveal.catalog import default_catalog
    from reveal.inject.cleanup import install_signal_handlers
    from reveal.inject.scenario import EpisodePlan, Scenario, run_scenario
    from reveal.inject.scoring import score_report
    from reveal.report.markdown_dir import write_report_dir
    from reveal.report.text import render_table
    from reveal.store.run_reader import read_run

    install_signal_handlers()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"reveal demo: {message}", file=sys.stderr, flush=True)

    d = float(args.duration)
    episode_s = max(8.0, round(d / 6))
    plans = [[EpisodePlan("cpu_contention", "high", round(0.2 * d), episode_s),
              EpisodePlan("disk_burst", "high", round(0.6 * d), episode_s)]]
    scenario = Scenario("demo", False, d, d, plans)
    recorded = run_scenario(scenario, args.out / "runs", say, args.workload)
    faulted = recorded.runs[0]
    say("analysing")
    run_tel, base_tel = read_run(faulted.path), read_run(recorded.baseline)
    report = analyze_run(run_tel, base_tel)
    scores, _ = score_report(report, faulted.episodes, run=str(faulted.path))
    catalog = default_catalog()
    written = write_report_dir(report, args.out, derive(run_tel, catalog)[0],
                               derive(base_tel, catalog)[0], faulted.episodes, scores,
                               title=f"Reveal demo: {recorded.workload} with injected faults")
    print(render_table(report))
    for score in scores:
        verdict = (f"detected after {score.ttd_s:.1f} s, attributed to {score.attributed}"
                   if score.detected else "not detected")
        print(f"injected {score.kind} ({score.intensity}): {verdict}")
    print(f"report: {written['md']} (+ report.json and figures in {args.out})")
    return 0
