"""The ``reveal`` command: parse arguments, call the command module, print, exit.

Each subcommand has two modules: :mod:`reveal.commands.parsers.<name>` (``NAME``, ``HELP``,
``add_arguments(parser)``; light, so that building the parser loads no analysis, collector
or report) and :mod:`reveal.commands.<name>` (``run(args) -> int``, with the imports its
work needs at the top), loaded only when that command runs. Errors the user can act on
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
from reveal.errors import EXTRA_OF, RevealError, missing_package, with_log_reason

COMMANDS = (
    "analyze", "evaluate", "select", "collect", "profile", "probes", "watch",
    "validate", "demo", "compare", "trace", "report", "fleet", "config",
)


def needs_package(package: str) -> str:
    """What to say when a third-party Python package is missing: the extra of Reveal's
    that brings it, where one does (the node agent and its image have none)."""
    extra = EXTRA_OF.get(package)
    if extra is not None:
        return (f"needs the Python package {package!r} of Reveal's {extra!r} extra, which "
                f"this installation (the node agent) does not have (pip install "
                f"'reveal[{extra}]', or run scripts/install.sh)")
    return (f"needs the Python package {package!r}, which is not installed "
            f"(pip install {package}, or run scripts/install.sh)")


def unavailable(name: str, exc: ImportError) -> RevealError:
    """The error for a command whose module cannot be imported: the Python package that is
    missing, or the module of this installation that would not load."""
    package = missing_package(exc) if isinstance(exc, ModuleNotFoundError) else None
    if package is not None:
        return RevealError(needs_package(package))
    return RevealError(f"cannot load reveal.commands.{name} ({exc}); the installation is "
                       f"incomplete: run scripts/install.sh again")


def load_command(name: str) -> ModuleType:
    """The module that does the work of ``reveal NAME``."""
    try:
        return importlib.import_module(f"reveal.commands.{name}")
    except ImportError as exc:
        raise unavailable(name, exc) from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reveal",
        description="Find performance anomalies in ML hosts from hardware and OS telemetry.",
    )
    parser.add_argument("--version", action="version", version=f"reveal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        arguments = importlib.import_module(f"reveal.commands.parsers.{name}")
        command = sub.add_parser(arguments.NAME, help=arguments.HELP,
                                 description=arguments.HELP, formatter_class=HelpFormatter)
        arguments.add_arguments(command)
        command.set_defaults(_parser=command)
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
        module = load_command(args.command)
        if getattr(args, "config", None) is not None and hasattr(module, "apply_config"):
            args = module.apply_config(parser, args, argv)
        return int(module.run(args) or 0)
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
        print(f"{prefix} {needs_package(package)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
