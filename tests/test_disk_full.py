"""A full disk does not stop the collector: samples are dropped and counted, one warning is
printed, and recording resumes when space returns (a real 2 MiB tmpfs, filled for real)."""

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

from reveal.store.run_reader import read_run

pytestmark = pytest.mark.root


@pytest.fixture
def small_fs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


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
    assert not list((run / "journal").glob("*.arrows"))  # late segments were written too
    assert meta["stats"]["samples"] == tel.n_samples + meta["stats"]["dropped_samples"]
