"""One module per ``reveal`` subcommand: its work (``run(args) -> int``), loaded when it
runs; its arguments (``NAME``, ``HELP``, ``add_arguments``) are in
:mod:`reveal.commands.parsers`, loaded for every ``--help``."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default where it says something: not for None or False, and not
    where the help text already states it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)
