"""The arguments of ``reveal demo``: its name, its help and its options."""

from __future__ import annotations

import argparse
from pathlib import Path

from reveal.settings import add_set_argument
from reveal.workload_names import SINGLE_WORKLOADS

NAME = "demo"
HELP = ("Record a short fault scenario on this host (clean baseline, then CPU contention "
        "and a disk burst), analyse it, print the anomalies and write a report directory.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("demo-report"), metavar="DIR",
                        help="report directory to write (runs are kept in DIR/runs); when DIR "
                             "already holds a report, the new one goes to the first free "
                             "DIR-2, DIR-3, ... and the earlier one is kept (default: "
                             "demo-report)")
    parser.add_argument("--force", action="store_true",
                        help="replace the report already in DIR instead")
    parser.add_argument("--duration", type=float, default=60.0, metavar="S",
                        help="seconds of the faulted run (≥ 30); the baseline is as long, and at "
                             "least long enough to place the threshold (about 72 s)")
    parser.add_argument("--workload", choices=SINGLE_WORKLOADS, default=None,
                        help="reference workload (default: PyTorch when installed)")
    parser.add_argument("--html", type=Path, metavar="OUT.html",
                        help="where to write the HTML report (default: DIR/report.html)")
    add_set_argument(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
