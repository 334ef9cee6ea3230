"""Per-process GPU usage through NVML, attributed to the process's cgroup (container).

Each tick, per GPU: ``nvmlDeviceGetComputeRunningProcesses`` and
``nvmlDeviceGetGraphicsRunningProcesses`` (``nvmlProcessInfo_t``: pid, used memory, MIG
GPU/compute instance) and ``nvmlDeviceGetProcessUtilization`` (``nvmlProcessUtilizationSample_t``
samples newer than the last one seen: SM, memory, encoder, decoder percent). Several
samples of one pid since the previous tick are averaged.

Channels, labels ``{gpu, pid, comm, cgroup}`` (memory adds ``type`` = compute | graphics,
and ``gi``/``ci`` on a MIG-enabled GPU):

- ``gpu.proc.mem_used_bytes``: GPU memory the process holds (bytes; NaN when NVML reports
  it as not available, e.g. under MIG without per-instance accounting or WDDM);
- ``gpu.proc.sm_util``, ``gpu.proc.mem_util``, ``gpu.proc.enc_util``, ``gpu.proc.dec_util``:
  percent of the driver's last sample period(s); 0 for a listed process with no new sample.

Processes appear as channels at the next ``refresh()``; a channel whose process has left
the GPU reads NaN until it retires. **Retirement** (at a refresh): a process's channels
are removed once NVML has not listed it for ``retire_s`` seconds (default 30), or at the
first refresh after it stopped being listed when its ``/proc/PID`` is gone (it exited). Only
a listing NVML answered counts as "not listed", so a failing query retires nothing. **Cap**:
at most ``max_channels`` (default 2048) process channels; processes beyond it get none
(counted in ``info["processes_over_cap"]``, and the probe is ``degraded`` saying so) until
retirements make room. Nothing is dropped silently: a GPU in MIG mode, or a query NVML answers
``NOT_SUPPORTED``/``NO_PERMISSION``, makes the probe ``degraded`` with the GPU and query
named in ``reason`` (``info["unsupported"]`` lists them).

The NVML module is ``pynvml`` (nvidia-ml-py) or any pynvml-shaped object given as option
``nvml`` (the tests replay recorded NVML structures this way).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from reveal.collect._nvml import error_is, load_nvml, start_nvml
from reveal.collect.ebpf.targets import read_cgroup, read_comm
from reveal.collect.probe import Probe, ProbeUnavailable, register
from reveal.frame import format_channel

UTIL_FIELDS = (("gpu.proc.sm_util", "smUtil"), ("gpu.proc.mem_util", "memUtil"),
               ("gpu.proc.enc_util", "encUtil"), ("gpu.proc.dec_util", "decUtil"))
_NOT_AVAILABLE_U32 = 0xFFFFFFFF
_LIST_QUERIES = (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                 ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"))
_UTIL_QUERY = "nvmlDeviceGetProcessUtilization"


@dataclass
class _Gpu:
    """One GPU: its handle, which queries work, and the last utilisation timestamp (µs)."""

    index: int
    handle: Any
    mig: bool = False
    lists: list[tuple[str, str]] = field(default_factory=list)
    utilisation: bool = False
    last_seen_us: int = 0


class GpuProcessProbe(Probe):
    """GPU memory and utilisation per process (NVML), labelled with the process's cgroup."""

    name = "gpu_procs"
    description = "per-process GPU memory and SM/memory/encoder/decoder use (NVML), by cgroup"
    options_help: ClassVar[dict[str, str]] = {
        "nvml": "a pynvml-shaped object to use instead of the pynvml module (default: pynvml)",
        "proc_root": "where /proc is mounted, for comm and cgroup (default /proc)",
        "retire_s": "seconds a process may go unlisted by NVML before its channels are "
                    "removed at a refresh; an exited process goes at the next refresh "
                    "(default 30)",
        "max_channels": "most process channels kept; newer processes get none until "
                        "others retire (default 2048)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._nvml: Any = None
        self._gpus: list[_Gpu] = []
        self._initialised = False
        self._proc_root = str(options.get("proc_root", "/proc"))
        self._labels: dict[int, dict[str, str]] = {}
        self._index: dict[str, int] = {}
        self._pending: dict[str, float] = {}
        self._unsupported: list[str] = []
        self.retire_s = float(options.get("retire_s", 30.0))
        self.max_channels = int(options.get("max_channels", 2048))
        self._pid_of: dict[str, int] = {}  # channel → pid
        self._listed_at: dict[int, float] = {}  # pid → last time NVML listed it (monotonic s)
        self._listed_now: set[int] = set()  # pids in the latest answered listing
        self._over_cap: set[int] = set()
        self.retired = 0  # process channels removed, over the probe's life

    # -- setup -----------------------------------------------------------------------------
    def _is(self, exc: Exception, *names: str) -> bool:
        return error_is(self._nvml, exc, *names)

    def open(self) -> None:
        nvml = self._nvml = load_nvml(self.options, "gpu_procs")
        try:
            start_nvml(nvml, "gpu_procs")
        except ProbeUnavailable as exc:
            self.status, self.reason = "unavailable", str(exc)
            raise
        self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise ProbeUnavailable("gpu_procs: NVML started but reports no GPU")
            self._gpus = [self._setup(i) for i in range(count)]
        except nvml.NVMLError as exc:
            self.close()
            raise ProbeUnavailable(f"gpu_procs: NVML query failed at start: {exc}") from exc
        except ProbeUnavailable:
            self.close()
            raise
        if not any(gpu.lists or gpu.utilisation for gpu in self._gpus):
            self.close()
            raise ProbeUnavailable("gpu_procs: no per-process NVML query is supported: "
                                   + "; ".join(self._unsupported))
        self.info["unsupported"] = list(self._unsupported)
        self.info["mig_gpus"] = [gpu.index for gpu in self._gpus if gpu.mig]
        if self._unsupported:
            self.status = "degraded"
            self.reason = "gpu_procs: " + "; ".join(self._unsupported)
        self._open_status = (self.status, self.reason)
        self.channels = []
        self._pending.update(self._collect(commit=False))  # the processes running now
        self.refresh()

    def _setup(self, index: int) -> _Gpu:
        nvml = self._nvml
        gpu = _Gpu(index, nvml.nvmlDeviceGetHandleByIndex(index))
        if hasattr(nvml, "nvmlDeviceGetMigMode"):
            try:
                current, _pending = nvml.nvmlDeviceGetMigMode(gpu.handle)
                gpu.mig = current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
            except nvml.NVMLError:
                gpu.mig = False  # NOT_SUPPORTED: a GPU without MIG
        for kind, query in _LIST_QUERIES:
            func = getattr(nvml, query, None)
            if func is None:
                self._unsupported.append(f"GPU {index}: {query} missing from the bindings")
                continue
            try:
                func(gpu.handle)
                gpu.lists.append((kind, query))
            except nvml.NVMLError as exc:
                self._unsupported.append(f"GPU {index}: {query}: {exc}")
        func = getattr(nvml, _UTIL_QUERY, None)
        if func is None:
            self._unsupported.append(f"GPU {index}: {_UTIL_QUERY} missing from the bindings")
        else:
            try:
                func(gpu.handle, 0)
                gpu.utilisation = True
            except nvml.NVMLError as exc:
                if self._is(exc, "NVML_ERROR_NOT_FOUND"):
                    gpu.utilisation = True  # supported; simply no sample yet
                else:
                    why = " (GPU in MIG mode)" if gpu.mig else ""
                    self._unsupported.append(f"GPU {index}: {_UTIL_QUERY}: {exc}{why}")
        return gpu

    # -- labels ------------------------------------------------------------------------------
    def _process(self, pid: int) -> dict[str, str]:
        labels = self._labels.get(pid)
        if labels is None:
            labels = self._labels[pid] = {"pid": str(pid),
                                          "comm": read_comm(pid, self._proc_root),
                                          "cgroup": read_cgroup(pid, self._proc_root)}
        return labels

    # -- sampling ----------------------------------------------------------------------------
    def _collect(self, commit: bool = True) -> dict[str, float]:
        """Current values of every channel NVML answers for now (name → value). Without
        ``commit`` the utilisation samples read stay unseen (read again next time)."""
        nvml = self._nvml
        values: dict[str, float] = {}
        now = time.monotonic()
        listed_all: set[int] = set()
        for gpu in self._gpus:
            listed: set[int] = set()
            for kind, query in gpu.lists:
                try:
                    procs = getattr(nvml, query)(gpu.handle)
                except nvml.NVMLError:
                    listed_all.update(self._listed_now)  # no answer: nobody left
                    continue
                for proc in procs:
                    pid = int(proc.pid)
                    listed.add(pid)
                    labels = {"gpu": str(gpu.index), **self._process(pid), "type": kind}
                    if gpu.mig:
                        gi, ci = getattr(proc, "gpuInstanceId", None), \
                            getattr(proc, "computeInstanceId", None)
                        labels["gi"] = "?" if gi in (None, _NOT_AVAILABLE_U32) else str(gi)
                        labels["ci"] = "?" if ci in (None, _NOT_AVAILABLE_U32) else str(ci)
                    used = proc.usedGpuMemory
                    name = format_channel("gpu.proc.mem_used_bytes", labels)
                    values[name] = math.nan if used is None else float(used)
            if gpu.utilisation:
                self._utilisation(gpu, listed, values, commit)
            listed_all |= listed
        for pid in listed_all:
            self._listed_at[pid] = now
        self._listed_now = listed_all
        return values

    def _utilisation(self, gpu: _Gpu, listed: set[int], values: dict[str, float],
                     commit: bool) -> None:
        nvml = self._nvml
        try:
            samples = nvml.nvmlDeviceGetProcessUtilization(gpu.handle, gpu.last_seen_us)
        except nvml.NVMLError as exc:
            if not self._is(exc, "NVML_ERROR_NOT_FOUND"):
                return  # a transient failure: these channels read NaN this tick
            samples = []
        sums: dict[int, list[float]] = {}
        newest = gpu.last_seen_us
        for sample in samples:
            pid = int(sample.pid)
            newest = max(newest, int(sample.timeStamp))
            acc = sums.setdefault(pid, [0.0] * (len(UTIL_FIELDS) + 1))
            for i, (_, attr) in enumerate(UTIL_FIELDS):
                acc[i] += float(getattr(sample, attr))
            acc[-1] += 1
        if commit:
            gpu.last_seen_us = newest
        for pid in listed | set(sums):
            labels = {"gpu": str(gpu.index), **self._process(pid)}
            acc = sums.get(pid)
            for i, (metric, _) in enumerate(UTIL_FIELDS):
                values[format_channel(metric, labels)] = acc[i] / acc[-1] if acc else 0.0

    def read(self, out: np.ndarray) -> None:
        out.fill(np.nan)
        for name, value in self._collect().items():
            index = self._index.get(name)
            if index is None:
                self._pending[name] = value
            else:
                out[index] = value

    def refresh(self) -> bool:
        """Retire the channels of processes gone (see the module's policy), then add those
        of new processes up to ``max_channels``."""
        changed = self._retire()
        self._over_cap.clear()
        for name in self._pending:
            if name in self._index:
                continue
            pid = self._pid_in(name)
            if len(self.channels) >= self.max_channels:
                self._over_cap.add(pid)
                continue
            self._index[name] = len(self.channels)
            self._pid_of[name] = pid
            self.channels.append(name)
            changed = True
        self._pending = {}
        self.info["processes_over_cap"] = len(self._over_cap)
        self.info["retired_channels"] = self.retired
        if self._over_cap:
            self.status = "degraded"
            self.reason = (f"gpu_procs: {len(self._over_cap)} process(es) without channels: "
                           f"max_channels={self.max_channels} reached")
        elif self.reason.startswith("gpu_procs: ") and "max_channels" in self.reason:
            self.status, self.reason = self._open_status
        return changed

    def _pid_in(self, name: str) -> int:
        body = name[name.index("{") + 1:-1]
        return int(next(p[4:] for p in body.split(",") if p.startswith("pid=")))

    def _retire(self) -> bool:
        now = time.monotonic()
        gone = set()
        for pid in {*self._pid_of.values()} - self._listed_now:
            unlisted_s = now - self._listed_at.get(pid, now)
            if unlisted_s >= self.retire_s or not os.path.exists(f"{self._proc_root}/{pid}"):
                gone.add(pid)
        if not gone:
            return False
        kept = [c for c in self.channels if self._pid_of[c] not in gone]
        self.retired += len(self.channels) - len(kept)
        self.channels = kept
        self._index = {name: i for i, name in enumerate(kept)}
        self._pid_of = {name: self._pid_of[name] for name in kept}
        for pid in gone:
            self._labels.pop(pid, None)
            self._listed_at.pop(pid, None)
        self._pending = {k: v for k, v in self._pending.items() if self._pid_in(k) not in gone}
        return True

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._initialised = False


register(GpuProcessProbe)
