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
- ``settings``: every setting the benchmark ran with, in full: its options
  (:func:`arguments`) and, where it runs the analysis or the fleet comparison, the whole
  effective settings tree of :func:`analysis_settings` or :func:`fleet_settings`, not only
  what was changed.

Results written before the block was kept carry one marked ``recorded_before_provenance``:
the commit that added the file stands for the code's revision, and what was not recorded
(host, command, full settings) is null.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: numeric libraries whose versions can move a figure
LIBRARIES = ("numpy", "scipy", "scikit-learn", "pandas", "pyarrow")
#: the benchmark's start, for ``duration_s`` when the caller gives none (monotonic seconds)
STARTED = time.monotonic()


def _git(*args: str, repo: Path = ROOT) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    # only the end trimmed: a status line starts with a space where the index is unchanged
    return done.stdout.rstrip() if done.returncode == 0 else None


def revision(repo: Path = ROOT) -> dict[str, Any]:
    """The commit of the code in ``repo`` (this checkout by default; a clone a benchmark
    ran) and the paths where its work tree differs from it (results under
    ``bench/results`` not counted: writing them is what a benchmark does)."""
    commit = _git("rev-parse", "HEAD", repo=repo)
    changed = changed_paths(_git("status", "--porcelain", "--untracked-files=no",
                                 repo=repo) or "")
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:50]}


def changed_paths(status: str) -> list[str]:
    """The paths of ``git status --porcelain`` lines (``XY PATH``, a rename ``XY OLD -> NEW``),
    those under ``bench/results`` left out."""
    paths = [line[3:] for line in status.splitlines() if len(line) > 3]
    return [p for p in paths if not p.split(" -> ")[-1].startswith("bench/results/")]


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


def plain(value: Any) -> Any:
    """``value`` as JSON holds it: paths as strings, tuples and sets as lists, mappings as
    dicts with string keys, NumPy scalars and arrays as Python numbers and lists."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if hasattr(value, "tolist") and hasattr(value, "dtype"):  # NumPy scalar or array
        return value.tolist()
    return value


def arguments(args: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
    """Every option a benchmark ran with (``vars(args)``), paths as strings."""
    return plain(vars(args) if isinstance(args, argparse.Namespace) else dict(args))


def script_argv(script: str, argv: Sequence[str] | None) -> list[str] | None:
    """The command line of ``script`` when its ``main`` was given ``argv`` (None: this
    process's own, ``sys.argv``)."""
    if argv is None:
        return None
    path = Path(script).resolve()
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [str(shown), *argv]


def fleet_settings(config: Any = None) -> dict[str, Any]:
    """The whole fleet comparison settings tree by dotted name (``FleetConfig``, its window
    included) of ``config``, by default ``reveal fleet``'s."""
    from reveal.fleet.config import FleetConfig
    from reveal.settings import flatten

    return plain(flatten(FleetConfig() if config is None else config))


def dataclass_settings(config: Any) -> dict[str, Any]:
    """Every field of the dataclass ``config`` by dotted name (nested dataclasses flattened)."""
    from reveal.settings import flatten

    if not dataclasses.is_dataclass(config):
        raise TypeError(f"not a dataclass: {type(config).__name__}")
    return plain(flatten(config))


def provenance(settings: Mapping[str, Any], argv: Sequence[str] | None = None,
               started: float | None = None, repo: Path = ROOT) -> dict[str, Any]:
    """The ``provenance`` block: revision (of the code in ``repo``), date, host, command,
    ``settings`` and the wall time since ``started`` (monotonic seconds; default: this
    module's import)."""
    args = list(sys.argv if argv is None else argv)
    return {"revision": revision(repo),
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - (STARTED if started is None else started), 1),
            "host": host(),
            "command": shlex.join([Path(sys.executable).name, *args]),
            "settings": plain(settings)}


def _json_default(value: Any) -> Any:
    """What ``json`` cannot write by itself and has one plain form: paths, NumPy values."""
    if isinstance(value, Path) or (hasattr(value, "tolist") and hasattr(value, "dtype")):
        return plain(value)
    raise TypeError(f"a result cannot hold {type(value).__name__} ({value!r:.60})")


def write_result(path: Path | str, result: Mapping[str, Any], settings: Mapping[str, Any],
                 argv: Sequence[str] | None = None, started: float | None = None,
                 indent: int | None = 1, default: Callable[[Any], Any] | None = None,
                 repo: Path = ROOT) -> Path:
    """Write ``result`` as JSON to ``path`` with its ``provenance`` (see :func:`provenance`);
    the file is written whole or not at all: the JSON text is made first (a value it cannot
    hold raises ``TypeError`` before anything is written; ``default`` converts such values
    instead, as ``json.dumps`` takes it), then written to a temporary file renamed over
    ``path``."""
    path = Path(path)
    payload = {**result, "provenance": provenance(settings, argv, started, repo)}
    text = json.dumps(payload, indent=indent, default=default or _json_default) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
