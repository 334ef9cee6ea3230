"""The arguments of ``reveal report``: its name, its help and its options."""

from __future__ import annotations

import argparse

NAME = "report"
HELP = ("Render a saved JSON report (from `reveal analyze --json` or a demo's report.json) "
        "as one self-contained HTML page; with --run and --baseline, with the implicated "
        "channels' traces.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT.json", help="the JSON report to render")
    parser.add_argument("--html", metavar="OUT.html", required=True,
                        help="HTML file to write (one page, opens with no network)")
    parser.add_argument("--run", metavar="RUN",
                        help="the run the report is about (directory, CSV, or smd:/asd: "
                             "spec), to draw its implicated channels")
    parser.add_argument("--baseline", metavar="RUN",
                        help="the baseline it was fitted on, to draw its band beside them")
    parser.add_argument("--title", default="Reveal report", help="the page's title")
