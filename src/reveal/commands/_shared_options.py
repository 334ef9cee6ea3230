"""Option types and option groups that several ``reveal`` subcommands take alike.

Light on purpose (argparse only): every command module imports it at each start.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def comma_separated(text: str) -> list[str]:
    """The non-empty parts of ``a, b,c``, stripped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def _seconds(bound: str, holds: Callable[[float], bool]) -> Callable[[str], float]:
    """An ``argparse`` type: a number of seconds for which ``holds`` is true (``bound`` says
    so in the error, as it does for a text that is no number)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not holds(value):
            raise argparse.ArgumentTypeError(
                f"must be a number of seconds {bound}, got {text!r}")
        return value

    return parse


positive_seconds = _seconds("> 0", lambda value: value > 0)
non_negative_seconds = _seconds("≥ 0", lambda value: value >= 0)


def add_probe_choice(parser: argparse.ArgumentParser) -> None:
    """``--probes`` or ``--exclude`` (not both): the probes a recording runs, as lists."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--probes", type=comma_separated, metavar="P1,P2",
                       help="record only these probes (see `reveal probes`)")
    group.add_argument("--exclude", type=comma_separated, metavar="P1,P2",
                       help="record the default probes except these")


def add_window_options(parser: argparse.ArgumentParser, size_help: str,
                       stride_help: str) -> None:
    """``--window`` and ``--stride``: the window's size and stride in seconds (> 0)."""
    parser.add_argument("--window", type=positive_seconds, metavar="SECONDS", help=size_help)
    parser.add_argument("--stride", type=positive_seconds, metavar="SECONDS",
                        help=stride_help)


def add_report_format(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--format``: how the report is printed on stdout (text by default)."""
    parser.add_argument("--format", choices=("text", "markdown", "json", "none"),
                        default="text", help=help_text)


def add_json_report(parser: argparse.ArgumentParser) -> None:
    """``--json FILE`` (``args.json_out``): where the JSON report goes, ``-`` for stdout."""
    parser.add_argument("--json", metavar="FILE", dest="json_out",
                        help="write the JSON report here ('-' for stdout)")
