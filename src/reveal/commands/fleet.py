"""``reveal fleet``: compare the hosts of one job with each other, at the same moments."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from reveal.config import WindowConfig
from reveal.errors import InputError, RevealError
from reveal.fleet import report
from reveal.fleet.config import FleetConfig
from reveal.fleet.distributed import HostSource, compare_fleet_dask, features_task, fleet_client
from reveal.fleet.engine import compare_fleet
from reveal.paths import check_writable_dir, check_writable_file
from reveal.settings import FLEET, parse_sets, replace_dotted, split_fleet
from reveal.store.prometheus_source import read_fleet


def run(args: argparse.Namespace) -> int:
    def progress(message: str) -> None:
        if not args.quiet:
            print(f"reveal fleet: {message}", file=sys.stderr, flush=True)

    if args.json_out and args.json_out != "-":
        check_writable_file(args.json_out)
    if args.out:
        check_writable_dir(args.out)
    if args.baseline_dir and not Path(args.baseline_dir).is_dir():
        raise InputError("no such directory", args.baseline_dir)
    if args.workers < 0:
        raise RevealError(f"--workers must be 0 or more, got {args.workers}")
    for path in args.runs:
        if not Path(path).exists():
            raise InputError("no such run", path)
    sources: list[HostSource] = [str(p) for p in args.runs]
    window = WindowConfig()
    if args.prometheus:
        sources += read_fleet(args.prometheus, args.match, args.start, args.end, args.step,
                              host_label=args.host_label, say=progress)
        window = WindowConfig(size_s=10 * args.step, stride_s=args.step)
    if not sources:
        raise RevealError("give run directories (one per host) or --prometheus URL --match "
                          "SELECTOR")
    window = WindowConfig(size_s=args.window or window.size_s,
                          stride_s=args.stride or window.stride_s)
    config = FleetConfig(window=window, align_clocks=not args.no_align_clocks)
    if args.channels == "all":
        config = replace(config, channels=None, job_network_only=False)
    elif args.channels:
        config = replace(config, channels=args.channels)
    analysis, fleet_settings = split_fleet(parse_sets(args.settings))
    if analysis:
        raise InputError(f"reveal fleet takes {FLEET}.NAME settings (the peer comparison; "
                         f"`reveal config --show` lists them), got {next(iter(analysis))}")
    config = replace_dotted(config, fleet_settings, "fleet", f"{FLEET}.")
    if args.scheduler or args.workers > 0:
        where = args.scheduler or f"a local cluster of {args.workers} workers"
        progress(f"{len(sources)} hosts on {where}")
        with fleet_client(args.scheduler, args.workers) as client:
            result = compare_fleet_dask(sources, config, client=client,
                                        baseline_dir=args.baseline_dir, progress=progress)
    else:
        hosts = []
        for i, source in enumerate(sources, start=1):
            hosts.append(features_task(source, config, args.baseline_dir))
            progress(f"features of {i}/{len(sources)} hosts")
        result = compare_fleet(hosts, config=config)
    if args.out:
        report.write_report_dir(result, args.out)
        progress(f"report written to {args.out}")
    if args.json_out == "-" or args.format == "json":
        json.dump(report.to_dict(result), sys.stdout, indent=1)
        print()
    if args.json_out and args.json_out != "-":
        report.write_json(result, args.json_out)
        progress(f"JSON report written to {args.json_out}")
    if args.json_out != "-":
        if args.format == "text":
            print(report.render_text(result), end="")
        elif args.format == "markdown":
            print(report.render_markdown(result), end="")
    return 0
