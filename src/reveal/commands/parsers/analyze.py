"""The arguments of ``reveal analyze``: its name, its help and its options."""

from __future__ import annotations

import argparse

from reveal.commands._shared_options import (
    add_json_report,
    add_report_format,
    add_window_options,
    non_negative_seconds,
)
from reveal.config import DetectConfig
from reveal.settings import add_set_argument

NAME = "analyze"
HELP = ("Detect anomalies in a run (directory, CSV, or smd:/asd: spec), fitted on a baseline, "
        "and report when, where and why.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="run directory, wide CSV file, or smd:MACHINE / asd:MACHINE")
    parser.add_argument("--baseline", metavar="RUN",
                        help="clean run to fit the detectors on (default: the run itself, "
                             "robustly; for smd:/asd: the machine's train part)")
    parser.add_argument("--metrics", metavar="SET", help="metric-set file from `reveal select`")
    add_json_report(parser)
    parser.add_argument("--html", metavar="OUT.html",
                        help="also write the report as one self-contained HTML page "
                             "(interactive timeline, one card per episode, traces)")
    add_report_format(parser, "what to print on stdout: text (a table fitted to the terminal, "
                              "plain when piped), markdown (for files), json, or none")
    parser.add_argument("--preset", choices=("auto", "telemetry", "minute"), default="auto",
                        help="settings for the data's resolution: 'telemetry' (samples "
                             "≤ 1 s apart: 3 s windows), 'minute' (coarser: 10-row windows, "
                             "a drift-following centre); auto picks by the sampling interval")
    parser.add_argument("--model", metavar="FILE",
                        help="score with a model saved by --save-model (no fitting)")
    parser.add_argument("--save-model", metavar="FILE",
                        help="save the fitted model here, to score later runs with --model")
    add_window_options(parser, "window size (default: the preset's, 3 s for telemetry)",
                       "window stride (default: the preset's, 1 s for telemetry)")
    parser.add_argument("--window-rows", type=int, metavar="N",
                        help="windows of N rows instead of seconds (the minute preset: 10)")
    parser.add_argument("--stride-rows", type=int, default=1, metavar="N",
                        help="stride in rows with --window-rows")
    class _Registered:  # the detector registry's names, looked up when help is shown only
        def __str__(self) -> str:  # (it imports scikit-learn: seconds at every start)
            from reveal.analysis.detectors import names

            return ",".join(names())

    option = parser.add_argument("--detectors", metavar="LIST",
                                 help="comma-separated detectors (default: all: "
                                      "%(registered)s)")
    option.registered = _Registered()  # type: ignore[attr-defined]
    parser.add_argument("--quantile", type=float, metavar="Q",
                        help="baseline score quantile that flags a window (default "
                             f"{DetectConfig().threshold_quantile})")
    parser.add_argument("--persistence", type=non_negative_seconds, metavar="SECONDS",
                        help="flag windows only once the score has stayed above the threshold "
                             f"this long (0: every window on its own; default "
                             f"{DetectConfig().persistence_s:g})")
    parser.add_argument("--cpus", choices=("rank", "sample-rank", "number"),
                        help="compare per-CPU channels by the CPUs' busy rank in each window "
                             "(the telemetry default: a job the scheduler moved is no "
                             "anomaly), by rank in each sample (a job that hops for part of a "
                             "window is none either), or by CPU number")
    parser.add_argument("--no-prune", action="store_true",
                        help="keep correlated channels (no pruning)")
    parser.add_argument("--top", type=int, default=5, help="reasons kept per anomaly")
    parser.add_argument("--explain-floors", action="store_true",
                        help="also print, per channel, the least change that matters (against "
                             "this host's memory, CPUs, links and disks) and its rule")
    parser.add_argument("--no-significance", action="store_true",
                        help="flag windows on surprise alone, however small the change in its "
                             "unit (the least change that matters is not asked)")
    add_set_argument(parser, "applied after the options above")
    parser.add_argument("--limit", type=int, default=50, help="table rows printed at most")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
