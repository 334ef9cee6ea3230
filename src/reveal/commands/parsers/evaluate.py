"""The arguments of ``reveal evaluate``: its name, its help and its options."""

from __future__ import annotations

import argparse

from reveal.settings import add_set_argument

NAME = "evaluate"
HELP = ("Score Reveal on the labelled SMD/ASD machines (fit on train, causal scoring of "
        "test, at once or as a live stream) beside a PCA reconstruction-error baseline; "
        "honest point-wise, event-wise and HitRate metrics, false alarms a day, plus the "
        "inflated point-adjusted F1 for reference.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="ROOT",
                        help="labelled data root holding smd/ and asd/ "
                             "(default: $REVEAL_DATA or the nearest shared/data)")
    parser.add_argument("--datasets", nargs="+", default=["smd", "asd"],
                        choices=["smd", "asd"], help="datasets to evaluate")
    parser.add_argument("--machines", nargs="+", metavar="NAME",
                        help="only these machines (e.g. machine-1-2 omi-3)")
    parser.add_argument("--mode", choices=["batch", "stream", "both"], default="batch",
                        help="batch: score the test part at once, as `reveal analyze` "
                             "(default); stream: walk it chunk by chunk with the live "
                             "logic (refits on unflagged recent windows, consensus of model "
                             "generations); both: side by side")
    add_set_argument(parser, "e.g. refit.every_s=86400")
    parser.add_argument("--json", metavar="FILE", help="write every figure to this JSON file")
    parser.add_argument("--quiet", action="store_true", help="no per-machine progress lines")
