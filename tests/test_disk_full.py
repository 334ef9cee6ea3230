"""A full disk does not stop the collector: samples are dropped and counted, one warning is
printed, and recording resumes when space returns; a disk full until the collector exits
still gets the truth into meta.json and the summary (a real 2 MiB tmpfs, filled for real)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from reveal.commands.collect import human_bytes
from reveal.store.layout import META_RESERVE_FILE, data_bytes
from reveal.store.run_reader import read_run
from tmpfs import mounted_tmpfs

pytestmark = pytest.mark.root


@pytest.fixture
def small_fs(tmp_path):
    with mounted_tmpfs(tmp_path / "mnt", "2m") as mnt:
        yield mnt


def _fill(path: Path, handle) -> None:
    """Append to ``path`` until the file system refuses (grabs space freed meanwhile)."""
    chunk = b"\0" * 65536
    while True:
        try:
            handle.write(chunk)
            handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
            with contextlib.suppress(OSError):
                handle.write(b"\0" * 4096)
                handle.flush()
            return
        if len(chunk) > 4096 and os.statvfs(path.parent).f_bavail * 4096 < len(chunk):
            chunk = b"\0" * 4096


def _wait_for_start(run: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        with contextlib.suppress(OSError, ValueError):
            if json.loads((run / "meta.json").read_text()).get("start_mono_ns"):
                return
        time.sleep(0.05)
    raise AssertionError("collector did not start")


def test_full_disk_drops_counts_and_resumes(small_fs):
    run = small_fs / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reveal.cli", "collect", "--out", str(run), "--quiet",
         "--probes", "cpu,perf", "--interval", "0.1", "--segment-seconds", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    filler = small_fs / "filler"
    try:
        _wait_for_start(run, proc)
        time.sleep(1.5)
        full_from = time.monotonic_ns()
        with open(filler, "wb", buffering=0) as handle:
            for _ in range(15):  # about 3 s full; keep taking space the collector frees
                _fill(filler, handle)
                time.sleep(0.2)
                assert proc.poll() is None, "the collector died on a full disk"
        filler.unlink()
        full_until = time.monotonic_ns()
        time.sleep(3.0)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert stderr.count("dropping samples until space returns") == 1, stderr
    assert "resumed" in stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["closed"] is True
    assert meta["stats"]["dropped_samples"] >= 15
    assert meta["stats"]["disk_full_episodes"] == 1
    tel = read_run(run)
    ts = tel.timestamps_ns
    gaps = np.diff(ts) / 1e9
    assert gaps.max() >= 1.5  # the full period is a hole, not invented samples
    hole = int(np.argmax(gaps))
    assert full_from - 1.2e9 <= ts[hole] <= full_until
    after = ts[ts > full_until]
    assert len(after) >= 15  # recording resumed once space returned
    assert not list((run / "journal").iterdir())  # late segments were written too
    assert meta["stats"]["samples"] == tel.n_samples + meta["stats"]["dropped_samples"]


def _start(run: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "reveal.cli", "collect", "--out", str(run), "--quiet",
         "--probes", "cpu,perf", "--interval", "0.1", "--segment-seconds", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _keep_full(filler: Path, handle, proc: subprocess.Popen, seconds: float) -> None:
    """Keep the file system full for ``seconds``, taking any space the collector frees."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _fill(filler, handle)
        time.sleep(0.2)
        assert proc.poll() is None, "the collector died on a full disk"


def _summary_bytes(stderr: str) -> str:
    line = next(x for x in stderr.splitlines() if " on disk" in x)
    return line.rsplit(", ", 1)[1].removesuffix(" on disk")


def test_disk_full_until_exit_still_closes_the_run_truthfully(small_fs):
    """The disk stays full until SIGTERM: the final meta.json goes into the space the
    collector kept for it, with the dropped rows and the bytes really on disk."""
    run = small_fs / "run"
    proc = _start(run)
    filler = small_fs / "filler"
    try:
        _wait_for_start(run, proc)
        time.sleep(1.5)
        assert (run / META_RESERVE_FILE).stat().st_size >= 65536
        with open(filler, "wb", buffering=0) as handle:
            _keep_full(filler, handle, proc, 3.0)
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert stderr.count("dropping samples until space returns") == 1, stderr
    assert "resumed" not in stderr and "not written" not in stderr, stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["closed"] is True
    stats = meta["stats"]
    assert stats["dropped_samples"] >= 25  # 3 s full at 100 ms, and the rows at exit
    assert stats["bytes_on_disk"] == data_bytes(run) > 0  # journals left by the full disk
    assert stats["pending_segments"] >= 1
    assert _summary_bytes(stderr) == human_bytes(data_bytes(run)), stderr
    assert not (run / META_RESERVE_FILE).exists()
    tel = read_run(run)
    assert "warnings" not in tel.meta
    assert stats["samples"] == tel.n_samples + stats["dropped_samples"]


def test_disk_full_until_exit_without_space_reads_as_not_closed(small_fs):
    """Even the kept space is taken: meta.json cannot be finalised. The collector says so,
    the summary gives the real figures, and the run reads as not closed but readable."""
    run = small_fs / "run"
    proc = _start(run)
    filler = small_fs / "filler"
    try:
        _wait_for_start(run, proc)
        time.sleep(1.5)
        with open(filler, "wb", buffering=0) as handle:
            _fill(filler, handle)
            (run / META_RESERVE_FILE).unlink()  # someone else takes the kept space
            _keep_full(filler, handle, proc, 2.0)
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                _fill(filler, handle)  # and whatever the collector frees on its way out
                time.sleep(0.05)
            _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "final metadata not written" in stderr and "not closed" in stderr, stderr
    summary = _summary_bytes(stderr)
    assert summary != "0 B"
    assert summary == human_bytes(data_bytes(run)), stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["closed"] is False  # the last periodic update, written before the disk filled
    tel = read_run(run)
    assert tel.meta["closed"] is False
    assert any("not closed" in w for w in tel.meta["warnings"])
    assert tel.n_samples >= 15  # what reached the journals before the disk filled
