"""The arguments of ``reveal profile``: its name, its help and its options."""

from __future__ import annotations

import argparse

from reveal.commands.parsers.collect import add_collect_options
from reveal.settings import add_set_argument

NAME = "profile"
HELP = ("Record this host for the life of a command (reveal profile -- CMD ARGS...), then "
        "analyse. Without --baseline the run is its own baseline: it needs a command that runs "
        "at least about 12 s (10 windows of 3 s); a shorter one's run is kept on disk and can "
        "be analysed against a baseline with reveal analyze RUN --baseline BASE.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_collect_options(parser)
    parser.add_argument("--baseline", metavar="RUN",
                        help="clean run to fit the detectors on (default: the run itself)")
    parser.add_argument("--no-analyze", action="store_true",
                        help="only record; print the run directory")
    add_set_argument(parser)
    parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the command to run and record")
