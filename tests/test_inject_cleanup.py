"""The suite leaves the machine as found: after a normal end, after SIGTERM, and after a
SIGKILL followed by ``remove_leftovers`` (``reveal validate --cleanup``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from reveal.inject.cleanup import remove_leftovers, snapshot, tagged_processes
from reveal.inject.undo import UndoStack

pytestmark = pytest.mark.root

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, sysctl)")

# A suite process that makes every kind of change, prints "ready", then waits to be killed.
_SUITE = """
import sys, threading, time
from reveal.inject.cleanup import install_signal_handlers
from reveal.inject.faults import FaultContext, make_fault, run_episode
from reveal.inject.cleanup import make_temp_dir
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.veth_pair import NetnsPair
install_signal_handlers()
JobCgroup().create()
workdir = make_temp_dir("kill")
pair = NetnsPair(tag="kill").create()
context = FaultContext(workdir, pair)
faults = [make_fault(k, "low", context) for k in
          ("cpu_contention", "hugepages_reserved", "packet_loss", "net_throttle")]
for fault in faults:
    threading.Thread(target=run_episode, args=(fault, 120.0, None), daemon=True).start()
time.sleep(2.0)
print("ready", flush=True)
time.sleep(120)
"""


def _start_suite() -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _SUITE], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _state(*children: int) -> dict:
    """What this test process and the suite processes ``children`` made (names and tags
    carrying their pids: another pytest-xdist worker's suite runs beside this one make
    their own), with the host-wide root qdiscs, nftables tables and ``vm.nr_hugepages``.
    Taken before a child starts, the state without it is the state with it: nothing can
    carry the pid of a process that does not exist yet once ``remove_leftovers`` removed
    what dead processes left."""
    return snapshot(owners=(os.getpid(), *children))


def _changed(before: dict, pid: int) -> bool:
    now = _state(pid)
    return now["nr_hugepages"] != before["nr_hugepages"] and len(now["netns"]) > len(
        before["netns"]) and any(owner == pid for owner in tagged_processes().values())


@needs_root
def test_sigterm_undoes_every_change() -> None:
    remove_leftovers()  # what earlier, killed runs left must not count as "before"
    before = _state()
    proc = _start_suite()
    assert _changed(before, proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _state(proc.pid) != before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _state(proc.pid) == before


@needs_root
def test_sigkill_leftovers_are_removed_by_prefix() -> None:
    remove_leftovers()  # what earlier, killed runs left must not count as "before"
    before = _state()
    proc = _start_suite()
    assert _changed(before, proc.pid)
    proc.kill()
    proc.wait(timeout=10)
    left = _state(proc.pid)
    assert left != before  # namespaces, HugePages, temp dir are still there
    removed = remove_leftovers()
    assert any("network namespace" in line for line in removed)
    assert any("nr_hugepages" in line for line in removed)
    deadline = time.monotonic() + 10
    while _state(proc.pid) != before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _state(proc.pid) == before
    assert remove_leftovers() == []


def test_leftovers_of_a_live_owner_are_kept() -> None:
    from reveal.inject.cleanup import make_temp_dir
    from reveal.inject.naming import owned_name

    path = make_temp_dir("live")
    try:
        assert path.name.startswith(owned_name("live"))
        # The owner (this process) is alive, but its own leftovers may be removed by itself;
        # another live owner's would be kept: simulate with pid 1 (always alive).
        foreign = path.with_name(path.name.replace(f"-{os.getpid()}-", "-1-"))
        path.rename(foreign)
        assert all(str(foreign) not in line for line in remove_leftovers())
        assert foreign.exists()
    finally:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(foreign, ignore_errors=True)


def test_undo_stack_runs_newest_first_and_once() -> None:
    stack = UndoStack()
    calls: list[str] = []
    stack.push("a", lambda: calls.append("a"))
    handle = stack.push("b", lambda: calls.append("b"))
    stack.push("c", lambda: calls.append("c"))
    stack.pop(handle)
    assert calls == ["b"]
    assert stack.run_all() == ["c", "a"]
    assert calls == ["b", "c", "a"]
    assert stack.run_all() == []
