"""Errors that the command line turns into one line on stderr and exit code 2."""

from __future__ import annotations

import re
from pathlib import Path


class RevealError(Exception):
    """A problem with the user's input or environment, reported without a traceback.

    The message names the file (when there is one) and the problem in one line.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)


class InputError(RevealError):
    """Input data that cannot be read or used (truncated, wrong shape, empty)."""


class ModelFormatError(InputError):
    """A model file intact but written by a Reveal whose format this one does not read (an
    older or newer release): learning again is the remedy, not repairing the file."""


#: how far from its end a child's log is read for its reason
_LOG_TAIL_BYTES = 64 * 1024
#: "reveal collect: error: " and the like, in front of a child's own one-line error
_PREFIX = re.compile(r"^reveal [\w-]+: (?:error|warning): ")
#: "... (see PATH)" at the end of a message about a child process and its log
_SEE_LOG = re.compile(r"\(see (?P<log>[^()]+)\)$")


def log_reason(log: str | Path, limit: int = 300) -> str | None:
    """The reason a child process gave for failing: the last error line of its log.

    That is the last line saying ``error:``, else the exception line closing a Python
    traceback, else the last non-empty line; None when the log is missing or empty.
    """
    try:
        with open(log, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - _LOG_TAIL_BYTES))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    errors = [line for line in lines if "error:" in line.lower()]
    line = _PREFIX.sub("", errors[-1] if errors else lines[-1])
    return line if len(line) <= limit else line[:limit - 1] + "…"


def with_log_reason(message: str) -> str:
    """``message`` with the child's reason put in, when it ends with ``(see LOG)`` naming a
    log that gives one: "the collector exited with code 2: REASON (see LOG)"."""
    found = _SEE_LOG.search(message)
    if found is None:
        return message
    reason = log_reason(found["log"])
    if not reason or reason in message:
        return message
    head = message[:found.start()].rstrip()
    return f"{head}: {reason} {message[found.start():]}"


#: import names whose package on PyPI is called otherwise
_DISTRIBUTIONS = {"sklearn": "scikit-learn", "pynvml": "nvidia-ml-py", "yaml": "PyYAML",
                  "prometheus_client": "prometheus-client", "google": "protobuf"}


#: distribution -> Reveal's extra that brings it (pyproject.toml): the node agent (and its
#: image) has none of them
EXTRA_OF = {"matplotlib": "report", "bokeh": "report", "distributed": "fleet",
            "dask": "fleet", "pandas": "pandas"}


def missing_package(exc: ModuleNotFoundError) -> str | None:
    """The package to install for a failed import of a third-party module (None when the
    missing module is Reveal's own)."""
    name = (exc.name or "").split(".")[0]
    if not name or name == "reveal":
        return None
    return _DISTRIBUTIONS.get(name, name)
