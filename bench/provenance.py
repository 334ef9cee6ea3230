"""Where a benchmark result came from: code revision, date, host, command, settings, time.

Every benchmark writes its JSON through :func:`write_result`, which adds a ``provenance``
block so a figure quoted in ``docs/`` can be traced to the code and the machine that made
it, and re-made:

- ``revision``: the commit (``git rev-parse HEAD``) and whether the work tree differed from
  it (``dirty``: the paths that differed, results themselves not counted);
- ``date``: when the result was written (UTC, ISO 8601) and ``duration_s``, the wall time
  from the benchmark's start (seconds);
- ``host``: kernel, architecture, CPUs (count and model), memory (bytes), virtualisation
  (``systemd-detect-virt``, else the CPU's hypervisor flag), Python and the versions of the
  numeric libraries;
- ``command``: the full command line, as run;
- ``settings``: every setting the benchmark ran with, in full (for the analysis, the whole
  effective settings tree of :func:`analysis_settings`, not only what was changed).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: numeric libraries whose versions can move a figure
LIBRARIES = ("numpy", "scipy", "scikit-learn", "pandas", "pyarrow")
#: the benchmark's start, for ``duration_s`` when the caller gives none (monotonic seconds)
STARTED = time.monotonic()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def revision() -> dict[str, Any]:
    """The code's commit and the paths where the work tree differs from it (results under
    ``bench/results`` not counted: writing them is what a benchmark does)."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    changed = [line[3:] for line in (status or "").splitlines()
               if not line[3:].startswith("bench/results/")]
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:50]}


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _virtualisation() -> str:
    try:
        done = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True,
                              timeout=10, check=False)
        if done.stdout.strip():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    return "a hypervisor (CPU flag)" if " hypervisor" in flags else "none seen"


def host() -> dict[str, Any]:
    """What the machine is: kernel, CPUs, memory (bytes), virtualisation, Python, libraries."""
    uname = platform.uname()
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"hostname": uname.node, "kernel": uname.release, "machine": uname.machine,
            "cpus": os.cpu_count(), "cpu_model": _cpu_model(), "memory_bytes": _memory_bytes(),
            "virtualisation": _virtualisation(), "python": platform.python_version(),
            "libraries": versions}


def analysis_settings(overrides: Mapping[str, Any] | None = None,
                      interval_s: float = 0.1) -> dict[str, Any]:
    """The whole effective analysis settings tree (as ``reveal config --show`` lists it) for
    data sampled every ``interval_s`` seconds, with ``overrides`` by dotted name applied."""
    from reveal.analysis.presets import preset_for, with_overrides
    from reveal.settings import flatten

    tree = flatten(with_overrides(preset_for(interval_s), dict(overrides or {})))
    return {k: list(v) if isinstance(v, tuple) else v for k, v in tree.items()}


def provenance(settings: Mapping[str, Any], argv: Sequence[str] | None = None,
               started: float | None = None) -> dict[str, Any]:
    """The ``provenance`` block: revision, date, host, command, ``settings`` and the wall
    time since ``started`` (monotonic seconds; default: this module's import)."""
    args = list(sys.argv if argv is None else argv)
    return {"revision": revision(),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - (STARTED if started is None else started), 1),
            "host": host(),
            "command": shlex.join([Path(sys.executable).name, *args]),
            "settings": dict(settings)}


def write_result(path: Path, result: Mapping[str, Any], settings: Mapping[str, Any],
                 argv: Sequence[str] | None = None, started: float | None = None) -> Path:
    """Write ``result`` as JSON to ``path`` with its ``provenance`` (see :func:`provenance`);
    the file is written whole or not at all (a temporary file renamed over it)."""
    payload = {**result, "provenance": provenance(settings, argv, started)}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
