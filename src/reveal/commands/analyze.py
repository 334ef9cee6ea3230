"""``reveal analyze``: detect, attribute and report anomalies in one run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reveal.config import AnalyzeConfig, DetectConfig, SelectConfig, WindowConfig

NAME = "analyze"
HELP = ("Detect anomalies in a run (directory, CSV, or smd:/asd: spec), fitted on a baseline, "
        "and report when, where and why.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run directory, wide CSV file, or smd:MACHINE / asd:MACHINE")
    parser.add_argument("--baseline", metavar="RUN",
                        help="clean run to fit the detectors on (default: the run itself, "
                             "robustly; for smd:/asd: the machine's train part)")
    parser.add_argument("--metrics", metavar="SET", help="metric-set file from `reveal select`")
    parser.add_argument("--json", metavar="FILE", dest="json_out",
                        help="write the JSON report here ('-' for stdout)")
    parser.add_argument("--format", choices=("markdown", "json", "none"), default="markdown",
                        help="what to print on stdout")
    parser.add_argument("--window", type=float, default=3.0, metavar="SECONDS",
                        help="window size")
    parser.add_argument("--stride", type=float, default=1.0, metavar="SECONDS",
                        help="window stride")
    parser.add_argument("--window-rows", type=int, metavar="N",
                        help="windows of N rows instead of seconds (minute-level data)")
    parser.add_argument("--stride-rows", type=int, default=1, metavar="N",
                        help="stride in rows with --window-rows")
    parser.add_argument("--detectors", default=",".join(DetectConfig().detectors),
                        help="comma-separated detectors: zscore,pca_mahalanobis,iforest,gmm")
    parser.add_argument("--quantile", type=float, default=DetectConfig().threshold_quantile,
                        help="baseline score quantile that flags a window")
    parser.add_argument("--persistence", type=_non_negative, metavar="SECONDS",
                        default=DetectConfig().persistence_s,
                        help="flag windows only once the score has stayed above the threshold "
                             "this long (0: every window on its own)")
    parser.add_argument("--cpus", choices=("rank", "sample-rank", "number"), default="rank",
                        help="compare per-CPU channels by the CPUs' busy rank in each window "
                             "(default: a job the scheduler moved is no anomaly), by rank in "
                             "each sample (a job that hops for part of a window is none "
                             "either), or by CPU number")
    parser.add_argument("--no-prune", action="store_true",
                        help="keep correlated channels (no pruning)")
    parser.add_argument("--top", type=int, default=5, help="reasons kept per anomaly")
    parser.add_argument("--limit", type=int, default=50, help="table rows printed at most")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds ≥ 0, got {text}")
    return value


def build_config(args: argparse.Namespace) -> AnalyzeConfig:
    window = WindowConfig(size_s=args.window, stride_s=args.stride,
                          size_rows=args.window_rows,
                          stride_rows=args.stride_rows if args.window_rows else None)
    detectors = tuple(d.strip() for d in args.detectors.split(",") if d.strip())
    return AnalyzeConfig(window=window, select=SelectConfig(prune=not args.no_prune),
                         detect=DetectConfig(detectors=detectors,
                                             threshold_quantile=args.quantile,
                                             persistence_s=args.persistence),
                         rank_cpus=args.cpus != "number",
                         rank_cpu_samples=args.cpus == "sample-rank",
                         top_reasons=args.top)


def run(args: argparse.Namespace) -> int:
    from reveal.paths import check_writable_file

    if args.json_out and args.json_out != "-":
        check_writable_file(args.json_out)  # before the analysis, not after it
    from reveal.analyze.pipeline import analyze_run
    from reveal.analyze.select import load_metric_set
    from reveal.report.text import render_table

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"reveal analyze: {message}", file=sys.stderr, flush=True)

    metric_set = load_metric_set(args.metrics) if args.metrics else None
    report = analyze_run(args.run, args.baseline, build_config(args), metric_set, progress)
    payload = report.to_dict()
    if args.json_out == "-":
        json.dump(payload, sys.stdout, indent=2)
        print()
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        progress(f"report written to {args.json_out}")
    if args.format == "markdown" and args.json_out != "-":
        print(render_table(report, args.limit), end="")
    elif args.format == "json" and args.json_out != "-":
        json.dump(payload, sys.stdout, indent=2)
        print()
    return 0
