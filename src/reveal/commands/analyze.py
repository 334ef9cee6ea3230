"""``reveal analyze``: detect, attribute and report anomalies in one run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reveal.commands._shared_options import (
    add_json_report,
    add_report_format,
    add_window_options,
    comma_separated,
    non_negative_seconds,
)
from reveal.config import DetectConfig
from reveal.errors import InputError
from reveal.paths import check_writable_file
from reveal.settings import add_set_argument, parse_sets

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


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given on the command line, by dotted name (the preset gives the rest):
    the named options, then ``--set``."""
    out: dict[str, Any] = {}
    if args.window is not None:
        out["window.size_s"] = args.window
    if args.stride is not None:
        out["window.stride_s"] = args.stride
    if args.window_rows is not None:
        out["window.size_rows"] = args.window_rows
        out["window.stride_rows"] = args.stride_rows
    if args.detectors is not None:
        out["detect.detectors"] = tuple(comma_separated(args.detectors))
    if args.quantile is not None:
        out["detect.threshold_quantile"] = args.quantile
    if args.persistence is not None:
        out["detect.persistence_s"] = args.persistence
    if args.cpus is not None:
        out["rank_cpus"] = args.cpus != "number"
        out["rank_cpu_samples"] = args.cpus == "sample-rank"
    if args.no_prune:
        out["select.prune"] = False
    if args.top != 5:
        out["top_reasons"] = args.top
    if getattr(args, "no_significance", False):
        out["detect.significance"] = False
    out.update(parse_sets(getattr(args, "settings", None)))
    return out


def run(args: argparse.Namespace) -> int:
    settings = overrides(args)
    if settings:  # a wrong name or kind fails now, before any data is read
        from reveal.analysis.presets import TELEMETRY, with_overrides

        with_overrides(TELEMETRY, settings)
    if args.json_out and args.json_out != "-":
        check_writable_file(args.json_out)  # before the analysis, not after it
    from reveal.analysis.select import load_metric_set
    from reveal.model import Reveal, report_run
    from reveal.report.terminal import render_text
    from reveal.report.text import render_table

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"reveal analyze: {message}", file=sys.stderr, flush=True)

    metric_set = load_metric_set(args.metrics) if args.metrics else None
    if args.save_model:
        check_writable_file(args.save_model)
    if args.html:
        check_writable_file(args.html)
    if args.model:
        if args.baseline or metric_set or overrides(args) or args.preset != "auto":
            raise InputError("--model scores with the saved model's own settings: give no "
                             "--baseline, --metrics or analysis settings with it")
        model = Reveal.load(args.model)
        report = model.report(args.run, progress=progress)
    else:
        model = Reveal(preset=args.preset, overrides=overrides(args), metric_set=metric_set)
        report = report_run(args.run, args.baseline, model=model, progress=progress)
    if args.save_model:
        model.save(args.save_model)
        progress(f"model written to {args.save_model}")
    payload = report.to_dict()
    if args.json_out == "-":
        json.dump(payload, sys.stdout, indent=2)
        print()
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        progress(f"report written to {args.json_out}")
    if args.html:
        _write_html(report, args)
        progress(f"HTML report written to {args.html}")
    if args.format == "text" and args.json_out != "-":
        print(render_text(report, args.limit, args.json_out, tty=sys.stdout.isatty()), end="")
    elif args.format == "markdown" and args.json_out != "-":
        print(render_table(report, args.limit, args.json_out), end="")
    elif args.format == "json" and args.json_out != "-":
        json.dump(payload, sys.stdout, indent=2)
        print()
    if args.explain_floors:
        from reveal.report.floors_text import render_floors

        print(render_floors(model.fitted_), end="",
              file=sys.stderr if args.json_out == "-" or args.format == "json" else sys.stdout)
    return 0


def _write_html(report: Any, args: argparse.Namespace) -> None:
    """The report as an HTML page, with the run's (and baseline's) implicated channels."""
    from reveal.commands.report import write_html
    from reveal.model import load_source
    from reveal.report.html import render_html
    from reveal.store.sources import default_baseline

    baseline = args.baseline or (None if args.model else default_baseline(args.run))
    write_html(render_html(report, load_source(args.run),
                           load_source(baseline) if baseline else None), args.html)
