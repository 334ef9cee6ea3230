"""The ``reveal`` command: parse arguments, call the command module, print, exit.

Each subcommand lives in :mod:`reveal.commands` as a module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Errors the user can act on
(:class:`reveal.errors.RevealError`), a file that cannot be read or written (``OSError``)
and a Python package missing from the installation become one line on stderr and exit
code 2; any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import warnings
from types import ModuleType

from reveal._version import __version__
from reveal.commands import HelpFormatter
from reveal.errors import RevealError, missing_package, with_log_reason

COMMANDS = (
    "analyze", "evaluate", "select", "collect", "profile", "probes", "watch",
    "validate", "demo", "compare", "trace", "report", "fleet", "config",
)


class Unavailable:
    """Stands for a command whose module could not be imported: listed by ``--help`` as
    unavailable, and running it is an error that names what is missing."""

    def __init__(self, name: str, exc: ImportError) -> None:
        self.NAME = name
        package = missing_package(exc) if isinstance(exc, ModuleNotFoundError) else None
        if package is not None:
            self.reason = (f"needs the Python package {package!r}, which is not installed "
                           f"(pip install {package}, or run scripts/install.sh)")
        else:
            self.reason = (f"cannot load reveal.commands.{name} ({exc}); the installation "
                           f"is incomplete: run scripts/install.sh again")
        self.HELP = f"(unavailable: {self.reason})".replace("%", "%%")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        raise RevealError(self.reason)


def _load(name: str) -> ModuleType | Unavailable:
    try:
        return importlib.import_module(f"reveal.commands.{name}")
    except ImportError as exc:
        return Unavailable(name, exc)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reveal",
        description="Find performance anomalies in ML hosts from hardware and OS telemetry.",
    )
    parser.add_argument("--version", action="version", version=f"reveal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = _load(name)
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP,
                                 formatter_class=HelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_module=module, _parser=command)
    return parser


def _os_error(exc: OSError) -> str:
    """One line for a file that could not be read or written: the path(s) and the reason."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is not None and exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {reason}"
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return reason


def one_line(text: str, limit: int = 600) -> str:
    """``text`` on one line (a library's message may span several), at most ``limit``
    characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    # a library's warning: one line naming the command, not a file, line and source excerpt
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda message, category, *_: (
        f"reveal {args.command}: warning: {one_line(str(message))} ({category.__name__})\n")
    try:
        return _run(parser, args, argv)
    finally:
        warnings.formatwarning = formatwarning


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace,
         argv: list[str] | None) -> int:
    prefix = f"reveal {args.command}: error:"
    try:
        if getattr(args, "config", None) is not None and hasattr(args._module, "apply_config"):
            args = args._module.apply_config(parser, args, argv)
        return int(args._module.run(args) or 0)
    except RevealError as exc:
        print(f"{prefix} {one_line(with_log_reason(str(exc)))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"reveal {args.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0
    except OSError as exc:
        print(f"{prefix} {one_line(_os_error(exc))}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        package = missing_package(exc)
        if package is None:
            raise  # one of Reveal's own modules: a bug, keep its traceback
        print(f"{prefix} needs the Python package {package!r}, which is not installed "
              f"(pip install {package}, or run scripts/install.sh)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
