"""Reference ML workloads and their launcher.

- ``torch_train``: a small CNN on CPU (PyTorch, one thread), DataLoader over files on disk.
- ``torch_busy``: the same with one compute thread per CPU, a job that keeps the host busy
  (a host whose CPUs it already fills cannot show a neighbour by the host's CPU busy share).
- ``torch_ddp``: the same, two ranks over gloo, each rank in its own network namespace.
- ``numpy_train``: a NumPy MLP for machines without PyTorch.

:class:`WorkloadRun` starts one as tagged child processes and stops it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from reveal.errors import RevealError
from reveal.inject import processes
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.veth_pair import NetnsPair
from reveal.workload_names import WORKLOADS

DDP_PORT = 29513
_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def default_workload(distributed: bool = False) -> str:
    """The best workload this machine can run (PyTorch when installed, else NumPy)."""
    if not torch_available():
        return "numpy_train"
    return "torch_ddp" if distributed else "torch_train"


def busy_threads() -> int:
    """Compute threads of ``torch_busy``: one per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def unavailable_reason(name: str) -> str | None:
    if name not in WORKLOADS:
        return f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)})"
    if name.startswith("torch") and not torch_available():
        return "PyTorch is not installed (pip install torch==2.13.0)"
    return None


@dataclass
class WorkloadRun:
    """A running reference workload; ``netns`` is required for ``torch_ddp``."""

    name: str
    workdir: Path
    duration_s: float
    netns: NetnsPair | None = None
    samples: int = 1024
    cgroup: JobCgroup | None = None  # moved here right after start, like a container
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> WorkloadRun:
        reason = unavailable_reason(self.name)
        if reason:
            raise RevealError(f"workload {self.name}: {reason}")
        threads = busy_threads() if self.name == "torch_busy" else 1
        module = "reveal.inject.workloads." + ("torch_train" if self.name == "torch_busy"
                                               else self.name)
        base = [sys.executable, "-m", module, "--duration", f"{self.duration_s:.1f}",
                "--samples", str(self.samples), "--threads", str(threads)]
        if self.name == "torch_ddp":
            if self.netns is None:
                raise RevealError("workload torch_ddp needs a network namespace pair")
            for rank in (0, 1):
                argv = [*self.netns.exec_prefix(rank), *base, "--data-dir",
                        str(self.workdir / f"data{rank}"), "--rank", str(rank), "--world", "2",
                        "--master", self.netns.addrs[0], "--port", str(DDP_PORT)]
                env = {**_THREAD_ENV, "GLOO_SOCKET_IFNAME": self.netns.ifnames[rank]}
                self.procs.append(processes.start(argv, env=env,
                                                  stdout=self.log_path(rank)))
        else:
            argv = [*base, "--data-dir", str(self.workdir / "data")]
            env = {key: str(threads) for key in _THREAD_ENV}
            self.procs.append(processes.start(argv, env=env, stdout=self.log_path(0)))
        if self.cgroup is not None:
            for proc in self.procs:
                self.cgroup.add(proc.pid)
        return self

    def log_path(self, rank: int) -> Path:
        return self.workdir / f"workload-{self.name}-{rank}.log"

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            processes.stop(proc)

    def wait(self, timeout_s: float) -> bool:
        """Wait for a natural end; True when every process exited within ``timeout_s``."""
        try:
            for proc in self.procs:
                proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def progress(self) -> list[dict[str, object]]:
        """The JSON progress lines the ranks printed (steps, steps/s, loss)."""
        lines: list[dict[str, object]] = []
        for rank in range(len(self.procs)):
            path = self.log_path(rank)
            if not path.is_file():
                continue
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    try:
                        lines.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        return lines

    def __enter__(self) -> WorkloadRun:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
