"""The arguments of ``reveal trace``: its name, its help and its options."""

from __future__ import annotations

import argparse
from pathlib import Path

NAME = "trace"
HELP = ("Trace CUDA, NCCL and Python calls with eBPF (root): status of this host, a short "
        "aggregated trace, or a Chrome-trace capture.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", action="store_true",
                        help="only list what can be traced here (the default without "
                             "--duration or --chrome-trace)")
    parser.add_argument("--pid", metavar="PID[,PID]",
                        help="trace these processes and their descendants")
    parser.add_argument("--cgroup", metavar="GLOB", help="trace processes whose cgroup path "
                                                         "matches this glob")
    parser.add_argument("--comm", metavar="GLOB", help="trace processes whose command name "
                                                       "matches this glob")
    parser.add_argument("--duration", type=float, metavar="SECONDS",
                        help="trace for this long (capture default: 5)")
    parser.add_argument("--chrome-trace", type=Path, metavar="FILE",
                        help="capture every call and write Chrome-trace JSON here")
    parser.add_argument("--max-events", type=int, default=200_000, metavar="N",
                        help="stop a capture after about this many events")
    parser.add_argument("--groups", metavar="G1,G2",
                        help="what to trace: cuda, nccl, python, tcp, block, sched "
                             "(default: all but python; captures: cuda, nccl, block, tcp)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
