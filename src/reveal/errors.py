"""Errors that the command line turns into one line on stderr and exit code 2."""

from __future__ import annotations


class RevealError(Exception):
    """A problem with the user's input or environment, reported without a traceback.

    The message names the file (when there is one) and the problem in one line.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class InputError(RevealError):
    """Input data that cannot be read or used (truncated, wrong shape, empty)."""
