"""``reveal fleet``: compare the hosts of one job with each other, at the same moments."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from reveal.commands._shared_options import (
    add_json_report,
    add_report_format,
    add_window_options,
    comma_separated,
    positive_seconds,
)
from reveal.errors import InputError, RevealError
from reveal.paths import check_writable_dir, check_writable_file
from reveal.settings import FLEET, add_set_argument, parse_sets, replace_dotted, split_fleet

NAME = "fleet"
HELP = ("Compare the hosts of one job with each other (runs, or a Prometheus server): who "
        "stands apart from its peers, when and why; configuration that differs; clocks "
        "that are off. Scales out on Dask.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help="run directories or CSV files, one per host (at least 3 hosts "
                             "in all)")
    parser.add_argument("--baseline-dir", metavar="DIR",
                        help="each host's own baseline, by host name: DIR/HOST.model (from "
                             "`reveal analyze --save-model`) or a clean run DIR/HOST/; the "
                             "report then says whether a host's own baseline agrees")
    parser.add_argument("--out", metavar="DIR",
                        help="write report.md, fleet.json and the figures (score heatmap, "
                             "traces against the peer band) here")
    add_report_format(parser, "what to print on stdout (default text)")
    add_json_report(parser)
    parser.add_argument("--workers", type=int, default=2, metavar="N",
                        help="Dask worker processes of a local cluster (default 2; 0: all "
                             "work in this process)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="use this running Dask scheduler instead of a local cluster")
    add_window_options(parser, "window size (default 3 s; 10 steps with --prometheus)",
                       "window stride (default 1 s; one step with --prometheus)")
    parser.add_argument("--channels", metavar="PREFIX,...|all", type=_channels, default=None,
                        help="metric prefixes compared across hosts (default: the job's "
                             "view: CPU, load, memory available and huge pages, major faults "
                             "and reclaim, pressure, network and TCP of the job's namespaces "
                             "where there are some, the job's cgroups, GPUs, InfiniBand, CUDA "
                             "and NCCL calls); 'all' for every channel. Configuration "
                             "channels are compared whatever this says")
    parser.add_argument("--no-align-clocks", action="store_true",
                        help="report hosts whose clock is off but compare them as recorded")
    prom = parser.add_argument_group("Prometheus source (hosts read from a server)")
    prom.add_argument("--prometheus", metavar="URL", help="Prometheus server, http://HOST:9090")
    prom.add_argument("--match", action="append", default=[], metavar="SELECTOR",
                      help="series selector, repeatable ('{job=\"node\"}')")
    prom.add_argument("--from", dest="start", default="-1h", metavar="TIME",
                      help="start: Unix seconds, RFC 3339, or relative like -1h (default)")
    prom.add_argument("--to", dest="end", default="now", metavar="TIME",
                      help="end (default now)")
    prom.add_argument("--step", type=positive_seconds, default=15.0, metavar="SECONDS",
                      help="sampling step (default 15 s)")
    prom.add_argument("--host-label", default="instance", metavar="LABEL",
                      help="label that names the host (default instance)")
    add_set_argument(parser, "fleet.NAME settings of the peer comparison, applied after "
                     "the options above")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _channels(text: str) -> tuple[str, ...] | str:
    """``all`` or a comma-separated list of metric prefixes (``cpu.,mem.MemAvailable``)."""
    if text.strip() == "all":
        return "all"
    prefixes = tuple(comma_separated(text))
    if not prefixes:
        raise argparse.ArgumentTypeError("give metric prefixes separated by commas, or all")
    return prefixes


def run(args: argparse.Namespace) -> int:
    from reveal.config import WindowConfig
    from reveal.fleet import report
    from reveal.fleet.config import FleetConfig
    from reveal.fleet.distributed import HostSource, compare_fleet_dask, features_task
    from reveal.fleet.engine import compare_fleet

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
        from reveal.store.prometheus_source import read_fleet

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
        from reveal.fleet.distributed import fleet_client

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
