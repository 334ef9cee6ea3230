"""The arguments of ``reveal config``: its name, its help and its options."""

from __future__ import annotations

import argparse

from reveal.settings import add_set_argument

NAME = "config"
HELP = ("Print every setting of the analysis, the fleet comparison and the watch, by the "
        "dotted name --set takes, with the values a preset and --set give.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show", action="store_true",
                        help="print the effective tree (what this command does; the flag "
                             "may be left out)")
    parser.add_argument("--preset", choices=("auto", "telemetry", "minute"), default="auto",
                        help="the preset to start from; auto picks by --interval")
    parser.add_argument("--interval", type=float, default=0.1, metavar="SECONDS",
                        help="the data's sampling interval, for --preset auto (the "
                             "collector's: 0.1 s)")
    parser.add_argument("--watch", action="store_true",
                        help="the settings reveal watch learns with: its own defaults "
                             "(marked '# watch') under --set")
    add_set_argument(parser, "fleet.NAME for the fleet comparison, watch.NAME for the "
                     "watch")
    parser.add_argument("--json", action="store_true",
                        help="print the tree as one JSON object instead of NAME = VALUE lines")
