"""The ``reveal`` command: parse arguments, call the command module, print, exit.

Each subcommand lives in :mod:`reveal.commands` as a module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Errors the user can act on
(:class:`reveal.errors.RevealError`) become one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from types import ModuleType

from reveal import __version__
from reveal.commands import HelpFormatter
from reveal.errors import RevealError

COMMANDS = (
    "analyze", "evaluate", "select", "collect", "profile", "probes",
    "validate", "demo", "compare", "trace",
)


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"reveal.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("reveal.commands"):
            return None  # command not built yet in this version
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reveal",
        description="Find performance anomalies in ML hosts from hardware and OS telemetry.",
    )
    parser.add_argument("--version", action="version", version=f"reveal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        if module is None:
            continue
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP,
                                 formatter_class=HelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_module=module, _parser=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if getattr(args, "config", None) is not None and hasattr(args._module, "apply_config"):
            args = args._module.apply_config(parser, args, argv)
        return int(args._module.run(args) or 0)
    except RevealError as exc:
        print(f"reveal {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"reveal {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
