"""Each host's own baseline, found by host name in a directory.

``DIR/<host>.model`` (a model saved by ``reveal analyze --save-model``) is loaded;
else ``DIR/<host>/`` (a clean run of that host) is fitted. Host names come from the hosts
themselves: only names of letters, digits, ``.``, ``_`` and ``-`` (not starting with a
dot) are looked up, so no name can reach outside the directory.
"""

from __future__ import annotations

import re
from pathlib import Path

from reveal.analysis.pipeline import FittedAnalysis
from reveal.model import Reveal

_SAFE = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}$")


def baseline_path(host: str, directory: str | Path) -> Path | None:
    """The model file or baseline run of ``host`` in ``directory`` (None: none, or a
    name that is not a plain file name)."""
    if not _SAFE.match(host):
        return None
    root = Path(directory)
    for candidate in (root / f"{host}.model", root / host):
        if candidate.exists():
            return candidate
    return None


def own_baseline(host: str, directory: str | Path) -> FittedAnalysis | None:
    """The host's fitted own analysis from ``directory`` (None when it has none)."""
    path = baseline_path(host, directory)
    if path is None:
        return None
    model = Reveal.load(path) if path.is_file() else Reveal().fit(path)
    return model.fitted_
