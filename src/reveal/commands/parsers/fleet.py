"""The arguments of ``reveal fleet``: its name, its help and its options."""

from __future__ import annotations

import argparse

from reveal.commands._shared_options import (
    add_json_report,
    add_report_format,
    add_window_options,
    comma_separated,
    positive_seconds,
)
from reveal.settings import add_set_argument

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
