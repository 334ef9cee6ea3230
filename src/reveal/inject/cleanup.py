"""Leave the machine as found: undo stack, signal handling, leftover removal, snapshots.

Three layers keep a run from leaving anything behind:

1. every injector undoes its change in ``try/finally`` (normal end, exception, Ctrl-C);
2. :data:`reveal.inject.undo.UNDO` holds an undo callback for every live change and runs
   them at interpreter exit (``atexit``) and on SIGTERM/SIGHUP (turned into :class:`SystemExit`);
3. :func:`remove_leftovers` (``reveal validate --cleanup``) finds what a SIGKILLed run left
   (namespaces, temp dirs, tagged processes, HugePages state files) by the ``rvinj-<pid>-``
   prefix and removes those whose owner is dead.

:func:`snapshot` lists the suite-relevant machine state for before/after comparisons (every
suite run's, or only what given owner processes made).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from reveal.inject.jobcgroup import leftover_cgroups, remove_cgroup
from reveal.inject.naming import (
    IFNAME_PREFIX,
    PREFIX,
    TAG_ENV,
    ifname_owner,
    owned_name,
    owner_of,
    pid_alive,
    temp_root,
)
from reveal.inject.undo import UNDO

HUGEPAGES_FILE = Path("/proc/sys/vm/nr_hugepages")
SWAPS_FILE = Path("/proc/swaps")
#: what the name of a swap file a fault made ends with (:func:`switch_off` undoes it)
SWAPFILE_SUFFIX = "-swapfile"


def install_signal_handlers() -> None:
    """Turn SIGTERM and SIGHUP into SystemExit so ``finally`` blocks and atexit run.

    Only from the main thread (Python's rule for signal handlers); a no-op elsewhere.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def _exit(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit)


def make_temp_dir(kind: str) -> Path:
    """A fresh directory ``/tmp/rvinj-<pid>-<kind>-XXXX``, removed at exit or on SIGTERM
    (and by :func:`remove_leftovers` after a SIGKILL)."""
    path = Path(tempfile.mkdtemp(prefix=owned_name(kind) + "-", dir=temp_root()))
    UNDO.push(f"directory {path}", lambda: shutil.rmtree(path, ignore_errors=True))
    return path


# ----------------------------------------------------------------------------- snapshot

def _cmd(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def netns_names() -> list[str]:
    """Names of the named network namespaces (``ip netns list``)."""
    return sorted(line.split()[0] for line in _cmd(["ip", "netns", "list"]).splitlines()
                  if line.strip())


def tagged_processes() -> dict[int, int]:
    """pid → owner pid of every live process carrying the suite's environment tag."""
    found: dict[int, int] = {}
    needle = f"{TAG_ENV}=".encode()
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        for item in environ.split(b"\0"):
            if item.startswith(needle):
                with contextlib.suppress(ValueError):
                    found[int(entry.name)] = int(item[len(needle):])
                break
    return found


def temp_leftovers() -> list[Path]:
    """Suite files and directories in the temp dir (``/tmp/rvinj-*``)."""
    return sorted(temp_root().glob(f"{PREFIX}-*"))




def active_swaps() -> list[str]:
    """The paths of the swap areas in use (``/proc/swaps``, its header left out)."""
    try:
        lines = SWAPS_FILE.read_text().splitlines()[1:]
    except OSError:
        return []
    return [line.split()[0] for line in lines if line.split()]


def switch_off(path: Path) -> list[str]:
    """Switch the swap file ``path`` off (where it is on) and delete it; one line per
    thing done."""
    done = []
    if str(path) in active_swaps():
        subprocess.run(["swapoff", str(path)], capture_output=True, timeout=300, check=False)
        done.append(f"swap file {path} switched off")
    path.unlink(missing_ok=True)
    return [*done, f"file {path}"]


def read_hugepages() -> int | None:
    try:
        return int(HUGEPAGES_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def _qdisc_device(line: str) -> str:
    """The device a ``tc qdisc show`` line is about (``""`` when it names none)."""
    words = line.split()
    return next((b for a, b in itertools.pairwise(words) if a == "dev"), "")


def snapshot(owners: Iterable[int] | None = None) -> dict[str, Any]:
    """The machine state the suite could change: its own namespaces, veth ends, nftables
    tables, temp files, cgroups and processes (found by name or tag, so other users'
    namespaces or interfaces do not disturb a comparison), plus the root namespace's qdiscs
    and ``vm.nr_hugepages``, which it must restore, and its swap files in use. Equal before
    and after a suite run.

    ``owners`` (pids): only what those processes made, by the owner in its name
    (``rvinj-<pid>-…``, ``rvi<pid>a``) or its tag, so that suite runs beside them (other
    test workers) do not disturb a comparison either; the root namespace's qdiscs (less
    those of other owners' veth ends), its ``rvinj`` nftables tables and
    ``vm.nr_hugepages`` are host-wide and listed whole. None: every suite run's.
    """
    mine = None if owners is None else set(owners)

    def ours(owner: int | None) -> bool:
        return mine is None or owner in mine

    links = sorted(name for line in _cmd(["ip", "-o", "link", "show"]).splitlines()
                   if line.count(":") >= 2
                   and (name := line.split(":")[1].strip().split("@")[0])
                   .startswith(IFNAME_PREFIX) and ours(ifname_owner(name)))
    qdiscs = sorted(line.strip() for line in _cmd(["tc", "qdisc", "show"]).splitlines()
                    if IFNAME_PREFIX in line or " root " in line)
    if mine is not None:
        qdiscs = [q for q in qdiscs if not (device := _qdisc_device(q))
                  .startswith(IFNAME_PREFIX) or ours(ifname_owner(device))]
    return {
        "netns": [n for n in netns_names() if n.startswith(PREFIX) and ours(owner_of(n))],
        "links": links,
        "qdiscs": qdiscs,
        "nft": [t for t in _cmd(["nft", "list", "tables"]).split() if t.startswith(PREFIX)],
        "nr_hugepages": read_hugepages(),
        "swaps": [s for s in active_swaps() if Path(s).name.startswith(PREFIX)
                  and ours(owner_of(Path(s).name))],
        "temp": [p.name for p in temp_leftovers() if ours(owner_of(p.name))],
        "cgroups": [str(p) for p in leftover_cgroups() if ours(owner_of(p.name))],
        "processes": sorted(pid for pid, owner in tagged_processes().items() if ours(owner)),
    }


# ----------------------------------------------------------------------------- leftovers

def _dead_owner(name: str, include_live: bool) -> bool:
    owner = owner_of(name)
    if owner is None:
        return False
    return include_live or owner == os.getpid() or not pid_alive(owner)


def remove_leftovers(include_live: bool = False) -> list[str]:
    """Remove what dead suite runs left behind; returns one line per thing removed.

    ``include_live``: also remove resources of suite processes still running (use only
    when no ``reveal validate``/``demo`` is meant to be running).
    """
    removed: list[str] = []
    me = os.getpid()
    for pid, owner in sorted(tagged_processes().items()):
        if include_live or owner == me or not pid_alive(owner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                removed.append(f"process {pid}")
    for name in netns_names():
        if _dead_owner(name, include_live):
            for pid in _cmd(["ip", "netns", "pids", name]).split():
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            _cmd(["ip", "netns", "delete", name])
            removed.append(f"network namespace {name}")
    for path in leftover_cgroups():
        if _dead_owner(path.name, include_live) and remove_cgroup(path):
            removed.append(f"cgroup {path}")
    removed += remove_state_files(temp_leftovers(), lambda n: _dead_owner(n, include_live),
                                  {"-hugepages.json": _restore_hugepages,
                                   SWAPFILE_SUFFIX: switch_off})
    return removed


def remove_state_files(paths: Iterable[Path], gone: Callable[[str], bool],
                       undo: Mapping[str, Callable[[Path], list[str]]]) -> list[str]:
    """Remove each of ``paths`` whose owner is ``gone`` (asked of its name); one whose
    name ends with a key of ``undo`` records host state a fault or an activity changed,
    and is handed to that function, which puts the state back and removes the file.
    Returns one line per thing removed or put back."""
    removed: list[str] = []
    for path in paths:
        if gone(path.name):
            ending = next((e for e in undo if path.name.endswith(e)), None)
            removed += undo[ending](path) if ending is not None else [remove_path(path)]
    return removed


def remove_path(path: Path) -> str:
    """Delete a leftover directory (with its contents, not following a link) or file;
    returns the line that reports it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
        return f"directory {path}"
    path.unlink(missing_ok=True)
    return f"file {path}"


def _restore_hugepages(state: Path) -> list[str]:
    try:
        original = int(json.loads(state.read_text())["original"])
    except (OSError, ValueError, KeyError, TypeError):
        state.unlink(missing_ok=True)
        return [f"file {state} (unreadable HugePages state)"]
    with contextlib.suppress(OSError):
        HUGEPAGES_FILE.write_text(f"{original}\n")
    state.unlink(missing_ok=True)
    return [f"vm.nr_hugepages restored to {original}"]
