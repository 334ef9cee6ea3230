"""Directories heard gaining or losing entries (inotify), on a real file system and on the
real cgroup hierarchy: a cgroup made mid-run joins the recording within a second or two,
not at the next periodic refresh."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from reveal.collect._dirwatch import DirWatch
from reveal.collect.cgroup import CgroupProbe, cgroup_label, cgroup_mounts
from reveal.collect.sampler import MemorySink, Sampler
from reveal.frame import parse_channel
from runs import rmdir_patiently


def _changed_soon(watch: DirWatch, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if watch.changed():
            return True
        time.sleep(0.02)
    return False


def test_entries_made_removed_or_moved_are_heard_and_only_in_watched_directories(tmp_path):
    watched, other = tmp_path / "watched", tmp_path / "other"
    watched.mkdir()
    other.mkdir()
    watch = DirWatch()
    if not watch.supported:
        pytest.skip(watch.reason)
    watch.watch([str(watched)])
    assert watch.watching == 1 and not watch.changed()
    (other / "a").mkdir()
    assert not _changed_soon(watch, 0.3)  # not a watched directory
    (watched / "a").mkdir()
    assert _changed_soon(watch)
    assert not watch.changed()  # every queued event was consumed
    (watched / "a").rename(watched / "b")
    assert _changed_soon(watch)
    (watched / "b").rmdir()
    assert _changed_soon(watch)
    watch.watch([])  # dropped: heard no more
    (watched / "c").mkdir()
    assert not _changed_soon(watch, 0.3)
    watch.close()
    assert not watch.changed() and not watch.supported


def test_a_removed_watched_directory_is_forgotten_without_error(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    watch = DirWatch()
    if not watch.supported:
        pytest.skip(watch.reason)
    watch.watch([str(gone), str(tmp_path / "never-made")])
    assert watch.watching == 1  # what does not exist is not watched
    gone.rmdir()
    watch.watch([str(tmp_path)])  # the kernel dropped the old watch already
    (tmp_path / "d").mkdir()
    assert _changed_soon(watch)
    watch.close()


def test_a_directory_made_again_at_a_watched_path_is_watched_again(tmp_path):
    """A container restarted under the same cgroup name: the new directory is another
    directory, and what is made inside it must still be heard."""
    parent, box = tmp_path, tmp_path / "box"
    box.mkdir()
    watch = DirWatch()
    if not watch.supported:
        pytest.skip(watch.reason)
    watch.watch([str(parent), str(box)])
    box.rmdir()
    box.mkdir()
    assert _changed_soon(watch)  # heard in the parent; the old watch's end is read too
    watch.watch([str(parent), str(box)])  # the next discovery lists it again
    (box / "inner").mkdir()
    assert _changed_soon(watch)
    watch.close()


def _v1_cpu_root() -> Path:
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    for kind in ("cpu", "v2"):
        if kind in mounts and Path(mounts[kind]).is_dir():
            return Path(mounts[kind])
    pytest.skip("no cpu or v2 cgroup hierarchy here")


def test_a_cgroup_made_mid_run_joins_within_seconds_with_a_long_refresh_period():
    root = _v1_cpu_root()
    name = f"reveal-dirwatch-{uuid.uuid4().hex[:8]}"
    probe = CgroupProbe()
    probe.open()
    sampler = Sampler([probe], interval_s=0.1, refresh_s=120.0)
    sink = MemorySink(sampler.channels)
    stop = threading.Event()
    runner = threading.Thread(target=sampler.run, args=(sink, stop.is_set))
    made = root / name
    runner.start()
    try:
        time.sleep(2.0)
        made.mkdir()
        made_at = time.monotonic_ns()
        time.sleep(4.0)
    finally:
        stop.set()
        runner.join(10)
        probe.close()
        rmdir_patiently(made)
    label = cgroup_label(name)
    joined = [ts[0] for channels, ts, _ in sink.parts if ts and any(
        parse_channel(c)[1].get("cgroup") == label for c in channels)]
    assert joined, "the new cgroup never joined (only the 120 s refresh would have found it)"
    assert (joined[0] - made_at) / 1e9 < 3.0
