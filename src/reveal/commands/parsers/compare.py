"""The arguments of ``reveal compare``: its name, its help and its options."""

from __future__ import annotations

import argparse
from pathlib import Path

from reveal.commands import HelpFormatter

NAME = "compare"
HELP = ("Studies across analyses: 'windows' (agreement of flagged time under 3 s/1 s, "
        "1.5 s/0.5 s and 5 s/2 s windows) and 'repro' (DTW reproducibility of metrics "
        "across repeated runs, Wilcoxon signed-rank test).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="study", metavar="STUDY", required=True)
    windows = sub.add_parser("windows", help="window-granularity agreement (paper Table 2)",
                             formatter_class=HelpFormatter)
    windows.add_argument("run", metavar="RUN", help="run directory (or any analyse source)")
    windows.add_argument("--baseline", metavar="RUN", default=None,
                         help="baseline to fit the detectors on (default: the run itself)")
    windows.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
    repro = sub.add_parser("repro", help="reproducibility of metrics across repeated runs",
                           formatter_class=HelpFormatter)
    repro.add_argument("runs", metavar="RUN", nargs="+", help="two or more repeated runs")
    repro.add_argument("--step", type=float, default=0.5, metavar="S",
                       help="common time grid step, seconds")
    repro.add_argument("--chunk", type=float, default=10.0, metavar="S",
                       help="chunk length for the paired test, seconds")
    repro.add_argument("--alpha", type=float, default=0.05, help="significance level")
    repro.add_argument("--show", type=int, default=15, metavar="N",
                       help="channels listed (least reproducible first)")
    repro.add_argument("--json", type=Path, metavar="FILE", help="also write the result here")
