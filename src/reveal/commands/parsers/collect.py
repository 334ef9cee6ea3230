"""The arguments of ``reveal collect``: its name, its help and its options."""

from __future__ import annotations

import argparse
from pathlib import Path

from reveal.commands._shared_options import add_probe_choice

NAME = "collect"
REFRESH_S = 30.0  # the collector's default (CollectOptions.refresh_s)
HELP = "Record this host's telemetry (every probe that works here) into a run directory."


def add_collect_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``collect`` and ``profile``."""
    parser.add_argument("--interval", type=float, default=0.1, metavar="SECONDS",
                        help="sampling interval")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="run directory to create (default: runs/HOST-YYYYmmdd-HHMMSS)")
    add_probe_choice(parser)
    parser.add_argument("--segment-seconds", type=float, default=300.0, metavar="SECONDS",
                        help="length of one Parquet segment")
    parser.add_argument("--refresh", type=float, default=REFRESH_S, metavar="SECONDS",
                        help="how often probes look again for new devices, sensors and "
                             "namespaces; cgroups made, namespaces mounted in /run/netns and "
                             "interfaces or qdiscs added are heard at once and join within a "
                             "second or two; a channel that appears joins the run then")
    parser.add_argument("--self-channels", action="store_true",
                        help="also record the collector's own read latency, tick lag and "
                             "missed ticks as channels (reveal.*)")
    parser.add_argument("--no-realtime", dest="realtime", action="store_false",
                        help="keep the thread that takes the ticks at normal priority (by "
                             "default it asks for SCHED_FIFO priority 1, where permitted, so "
                             "that busy tasks do not delay its ticks; it runs about 1 ms per "
                             "tick)")
    parser.add_argument("--progress-every", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between status lines on stderr")
    parser.add_argument("--quiet", action="store_true",
                        help="no status lines (warnings are still printed)")
    parser.add_argument("--probe-option", action="append", default=[], metavar="P.KEY=VALUE",
                        dest="probe_option",
                        help="an option of one probe, e.g. gpu.pcie_throughput=false or "
                             "storage.devices=nvme*,sd*; repeat for more (`reveal probes "
                             "--options` lists them)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="TOML file with a [collect] table (these options by their long "
                             "names) and [probes.NAME] tables of probe options; the command "
                             "line wins over it")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, metavar="SECONDS",
                        help="stop after this long (default: until SIGINT/SIGTERM)")
    add_collect_options(parser)
