"""The arguments of ``reveal select``: its name, its help and its options."""

from __future__ import annotations

import argparse

NAME = "select"
HELP = ("Prune correlated channels (Pearson |r| above a threshold, one kept per cluster) over "
        "one or more runs and write the union as a metric-set file.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", metavar="RUN",
                        help="run directories, CSV files or smd:/asd: specs")
    parser.add_argument("--threshold", type=float, default=0.5, help="|r| threshold")
    parser.add_argument("--out", default="metrics.json", help="metric-set file to write")
    parser.add_argument("--curves", metavar="FILE",
                        help="also write the pruning curves (Figure 4 data) as JSON")
