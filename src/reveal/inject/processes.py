"""Child processes of the suite: tagged, in their own process group, dying with their parent.

Every child gets the owner tag in its environment (see :mod:`reveal.inject.naming`), its own
process group (so a stop reaches its grandchildren: stress-ng workers, ``ip netns exec``
payloads) and ``PR_SET_PDEATHSIG`` so a SIGKILLed suite does not leave it running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from reveal.inject.naming import tagged_env

_PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _child_setup() -> None:  # runs in the child between fork and exec
    os.setpgrp()
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start(argv: Sequence[str], *, env: dict[str, str] | None = None,
          stdout: Path | None = None, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` tagged, in a new process group; output to ``stdout`` or discarded."""
    sink = open(stdout, "ab") if stdout is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            list(argv), env=tagged_env(env), stdin=subprocess.DEVNULL, stdout=sink,
            stderr=subprocess.STDOUT, cwd=cwd, preexec_fn=_child_setup, close_fds=True)
    finally:
        if stdout is not None:
            sink.close()  # type: ignore[union-attr]


def stop(proc: subprocess.Popen[bytes], grace_s: float = 3.0) -> int | None:
    """SIGTERM the process group, wait up to ``grace_s`` seconds, then SIGKILL it."""
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5.0)
    # A process group may outlive its leader (workers): finish it off.
    _signal_group(proc.pid, signal.SIGKILL)
    return proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def run(argv: Sequence[str], *, check: bool = True, timeout_s: float = 60.0,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a short command (``ip``, ``tc``, ``nft``, ``sync``) and return its output."""
    result = subprocess.run(
        list(argv), input=input_text, capture_output=True, text=True, timeout=timeout_s,
        check=False, env=tagged_env())
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {result.returncode}: "
                           f"{(result.stderr or result.stdout).strip()[:300]}")
    return result


def wait_until(predicate, timeout_s: float, step_s: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    """Poll ``predicate()`` until true or ``timeout_s`` seconds pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return bool(predicate())
