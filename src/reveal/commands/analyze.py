"""``reveal analyze``: detect, attribute and report anomalies in one run."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from reveal.analysis.presets import TELEMETRY, with_overrides
from reveal.analysis.select import load_metric_set
from reveal.commands._shared_options import comma_separated
from reveal.errors import InputError
from reveal.model import Reveal, load_source, report_run
from reveal.paths import check_writable_file
from reveal.report.floors_text import render_floors
from reveal.report.terminal import render_text
from reveal.report.text import render_table
from reveal.settings import parse_sets
from reveal.store.sources import default_baseline


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

        with_overrides(TELEMETRY, settings)
    if args.json_out and args.json_out != "-":
        check_writable_file(args.json_out)  # before the analysis, not after it

    def progress(message: str) -> None:
        if not args.quiet:
            print(f"reveal analyze: {message}", file=sys.stderr, flush=True)

    metric_set = load_metric_set(args.metrics) if args.metrics else None
    if args.save_model:
        check_writable_file(args.save_model)
    if args.html:
        check_writable_file(args.html)
        import reveal.report.html  # noqa: F401  the report extra: missing, say so before the analysis
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
        print(render_floors(model.fitted_), end="",
              file=sys.stderr if args.json_out == "-" or args.format == "json" else sys.stdout)
    return 0


def _write_html(report: Any, args: argparse.Namespace) -> None:
    """The report as an HTML page, with the run's (and baseline's) implicated channels
    (Reveal's ``report`` extra: the node agent analyses without it)."""
    from reveal.commands.report import write_html
    from reveal.report.html import render_html

    baseline = args.baseline or (None if args.model else default_baseline(args.run))
    write_html(render_html(report, load_source(args.run),
                           load_source(baseline) if baseline else None), args.html)
