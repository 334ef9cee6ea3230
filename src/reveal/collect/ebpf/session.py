"""One running bpftrace process, read without ever blocking the caller.

bpftrace runs with JSON output (``-f json``), line-buffered, in its own session so a
terminal Ctrl-C reaches the collector first (which then stops bpftrace cleanly and reads
its last batch). Should the collector die, bpftrace's next print hits a closed pipe and it
exits, detaching its probes. The program goes through a private temporary file, so its size
is not bound by the argument-length limit.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from typing import Any

from reveal.collect.ebpf.scripts import ATTACHED_MARKER

#: bpftrace prints this on hosts where the memlock limit is irrelevant (memcg accounting).
_NOISE = ("couldn't set RLIMIT_MEMLOCK",)
_STDERR_KEEP = 8192


class BpftraceSession:
    """A bpftrace process running ``program``.

    Parameters
    ----------
    program : str
        bpftrace program text.
    bpftrace : str
        Path of the bpftrace executable.
    map_keys : int
        ``BPFTRACE_MAP_KEYS_MAX``: entries per map (pid x function x bucket keys).
    perf_pages : int or None
        ``BPFTRACE_PERF_RB_PAGES``: per-CPU output buffer pages (per-event captures).
    """

    def __init__(self, program: str, bpftrace: str = "bpftrace", map_keys: int = 16384,
                 perf_pages: int | None = None) -> None:
        self.program = program
        self.bpftrace = bpftrace
        self.map_keys = int(map_keys)
        self.perf_pages = perf_pages
        self.proc: subprocess.Popen[bytes] | None = None
        self.attached_probes: int | None = None  # bpftrace's count, printed before attaching
        self.attached = False  # True once BEGIN ran, i.e. every probe is attached
        self.lost_events = 0
        self.started_at = 0.0
        self._out = b""
        self._err = b""
        self._eof = False
        self._file: str | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn bpftrace (returns at once; see :meth:`wait_attached`)."""
        fd, self._file = tempfile.mkstemp(prefix="reveal-", suffix=".bt")
        with os.fdopen(fd, "w") as handle:
            handle.write(self.program)
        env = dict(os.environ, BPFTRACE_MAP_KEYS_MAX=str(self.map_keys))
        if self.perf_pages:
            env["BPFTRACE_PERF_RB_PAGES"] = str(int(self.perf_pages))
        self.proc = subprocess.Popen(
            [self.bpftrace, "-B", "line", "-f", "json", self._file],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        os.set_blocking(self.proc.stderr.fileno(), False)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def finished(self) -> bool:
        """True once bpftrace exited and all its output was read."""
        return self.proc is None or (self._eof and self.proc.poll() is not None)

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def error_text(self) -> str:
        """bpftrace's stderr without known noise: its last error lines, joined."""
        lines = [line.strip() for line in self._err.decode("utf-8", "replace").splitlines()]
        lines = [line for line in lines if line and not any(n in line for n in _NOISE)]
        errors = [line for line in lines if "ERROR" in line] or lines
        return "; ".join(errors[-3:])

    # -- reading ---------------------------------------------------------------------------
    def drain(self) -> list[dict[str, Any]]:
        """Every complete JSON record printed since the last call (never blocks)."""
        if self.proc is None or self.proc.stdout is None or self.proc.stdout.closed:
            return []
        self._read_err()
        chunks = []
        while True:
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                self._eof = True
                break
            if not chunk:
                self._eof = True
                break
            chunks.append(chunk)
        if not chunks:
            return []
        data = self._out + b"".join(chunks)
        lines = data.split(b"\n")
        self._out = lines.pop()
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # not JSON: bpftrace warnings that reached stdout
            kind = record.get("type")
            if kind == "attached_probes":
                self.attached_probes = int(record.get("data", {}).get("probes", 0))
            elif kind == "printf" and record.get("data", "").strip() == ATTACHED_MARKER:
                self.attached = True
            elif kind == "lost_events":
                self.lost_events += int(record.get("data", {}).get("events", 0))
            records.append(record)
        return records

    def _read_err(self) -> None:
        if self.proc is None or self.proc.stderr is None or self.proc.stderr.closed:
            return
        while True:
            try:
                chunk = os.read(self.proc.stderr.fileno(), 65536)
            except (BlockingIOError, OSError):
                return
            if not chunk:
                return
            self._err = (self._err + chunk)[-_STDERR_KEEP:]

    def wait(self, timeout_s: float, until_attached: bool = False) -> list[dict[str, Any]]:
        """Read until bpftrace exits (or attaches, with ``until_attached``) or the timeout."""
        records: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout_s
        while self.proc is not None:
            records.extend(self.drain())
            if self.finished or (until_attached and self.attached):
                break
            left = deadline - time.monotonic()
            if left <= 0:
                break
            assert self.proc.stdout is not None and self.proc.stderr is not None
            fds = [self.proc.stdout.fileno(), self.proc.stderr.fileno()]
            if self._eof:
                time.sleep(min(0.02, left))
            else:
                select.select(fds, [], [], min(0.1, left))
        return records

    # -- stopping --------------------------------------------------------------------------
    def interrupt(self) -> None:
        """Ask bpftrace to run ``END`` and exit (SIGINT); returns at once."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)

    def stop(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """Interrupt, read the last records, and make sure the process is gone."""
        if self.proc is None:
            return []
        self.interrupt()
        records = self.wait(timeout_s)
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2.0)
            records.extend(self.drain())
        self.close()
        return records

    def close(self) -> None:
        """Release pipes and the program file (the process must have exited)."""
        if self.proc is not None:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self._eof = True
        if self._file:
            with contextlib.suppress(OSError):
                os.unlink(self._file)
            self._file = None
