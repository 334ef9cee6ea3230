"""Helpers the tests share for what they run and make: a real ``reveal collect`` around a
block, and removing a directory the kernel may still hold a moment (a cgroup)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def collecting(out_dir: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A real ``reveal collect`` into ``out_dir`` around the body; it must end well."""
    collector = subprocess.Popen(
        [sys.executable, "-m", "reveal.cli", "collect", "--quiet", "--out", str(out_dir),
         *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield collector
        _, err = collector.communicate(timeout=60)
        assert collector.returncode == 0, err
    finally:
        if collector.poll() is None:
            collector.kill()
            collector.wait()


def rmdir_patiently(path: Path, tries: int = 50, wait_s: float = 0.05) -> None:
    """Remove an empty directory, retrying while it is busy (a cgroup a killed task is
    still leaving); gone already is fine."""
    for _ in range(tries):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(wait_s)
