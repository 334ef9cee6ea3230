"""The arguments of ``reveal probes``: its name, its help and its options."""

from __future__ import annotations

import argparse

NAME = "probes"
HELP = "List the probes, whether each works on this host (or why not), and channel counts."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--channels", action="store_true",
                        help="also list every channel name")
    parser.add_argument("--options", action="store_true",
                        help="list the options of every probe (for --probe-option and the "
                             "[probes.NAME] tables of --config) instead of opening them")
    parser.add_argument("--probe-option", action="append", default=[], metavar="P.KEY=VALUE",
                        dest="probe_option", help="open a probe with this option (repeat)")
