"""Remove what a killed benign activity left: interfaces, namespaces, cgroups, scratch
and state files named ``rvbenign…`` whose owner process is gone, and a clock step.

Processes need nothing here: they carry the suite's owner tag and
:func:`reveal.inject.cleanup.remove_leftovers` kills them.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from reveal.inject import processes
from reveal.inject.benign.base import PREFIX, ifname_owner
from reveal.inject.benign.clock import step_realtime
from reveal.inject.benign.container import delete_link, delete_netns
from reveal.inject.cleanup import netns_names, remove_state_files
from reveal.inject.jobcgroup import leftover_cgroups, remove_cgroup
from reveal.inject.naming import pid_alive, temp_root

_OWNED = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-")


def owner_of(name: str) -> int | None:
    """The owner pid of a ``rvbenign-<pid>-…`` name or a benign interface name."""
    match = _OWNED.match(name)
    return int(match.group("pid")) if match else ifname_owner(name)


def links() -> list[str]:
    """Benign interfaces in the host's namespace."""
    out = processes.run(["ip", "-o", "link", "show"], check=False).stdout
    names = (line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
             if line.count(":") >= 2)
    return sorted(n for n in names if n.startswith(PREFIX))


def snapshot(owners: Iterable[int] | None = None) -> dict[str, list[str]]:
    """Every benign thing present now (for before/after comparisons); with ``owners``
    (pids), only what those processes made (by the owner in its name), so that benign
    activities of other processes (other test workers) do not disturb a comparison."""
    mine = None if owners is None else set(owners)

    def ours(name: str) -> bool:
        return mine is None or owner_of(name) in mine

    return {
        "links": [n for n in links() if ours(n)] if shutil.which("ip") else [],
        "netns": [n for n in netns_names() if n.startswith(PREFIX) and ours(n)],
        "cgroups": [str(p) for p in leftover_cgroups(prefix=f"{PREFIX}-") if ours(p.name)],
        "temp": sorted(p.name for p in temp_root().glob(f"{PREFIX}-*") if ours(p.name)),
    }


def _gone(name: str, include_live: bool) -> bool:
    owner = owner_of(name)
    return owner is not None and (include_live or not pid_alive(owner))


def remove_leftovers(include_live: bool = False) -> list[str]:
    """Remove benign leftovers of dead owners (all with ``include_live``); one line each."""
    removed: list[str] = []
    for name in (links() if shutil.which("ip") else []):
        if _gone(name, include_live):
            delete_link(name)
            removed.append(f"interface {name}")
    for name in netns_names():
        if name.startswith(PREFIX) and _gone(name, include_live):
            delete_netns(name)
            removed.append(f"network namespace {name}")
    for path in leftover_cgroups(prefix=f"{PREFIX}-"):
        if _gone(path.name, include_live) and remove_cgroup(path):
            removed.append(f"cgroup {path}")
    removed += remove_state_files(sorted(temp_root().glob(f"{PREFIX}-*")),
                                  lambda n: _gone(n, include_live),
                                  {"-clock.json": lambda p: [_undo_clock_step(p)]})
    return removed


def _undo_clock_step(state: Path) -> str:
    try:
        step = float(json.loads(state.read_text())["step_s"])
    except (OSError, ValueError, KeyError, TypeError):
        state.unlink(missing_ok=True)
        return f"file {state} (unreadable clock step)"
    with contextlib.suppress(OSError):
        step_realtime(-step)
    state.unlink(missing_ok=True)
    return f"wall clock stepped back by {step:g} s"
