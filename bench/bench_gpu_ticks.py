"""Ticks on a simulated 8-GPU host: does NVML's blocking reach the sampler?

NVML's ``nvmlDeviceGetPcieThroughput`` measures for 20 ms before it answers; called twice
per GPU on the tick, 8 GPUs would block each 100 ms tick for 320 ms. Here the ``gpu`` and
``gpu_procs`` probes poll NVML on their own threads and the sampler only copies the latest
values. No GPU is reachable on this machine, so NVML is the replay of
``tests/fixtures/nvml`` (two H100 answers repeated over 8 GPUs) with the PCIe query
sleeping 20 ms per call, and per-process answers (``procs.py``, 10 ms per call) for
``--procs-per-gpu`` live ``sleep`` processes per GPU; every ``--churn-s`` one of them ends
and a new one starts on the next GPU, so processes join and retire at refreshes. The
sampler, the procfs probes (cpu, memory, network, storage, pressure, interrupts) and both
GPU probes' threads are the real ones.

    python bench/bench_gpu_ticks.py                       # 40 s, then 30 s with GPU 7 hung
    python bench/bench_gpu_ticks.py --duration 60 --hung-duration 0

Phases: ``8_gpus`` (every GPU answers; PCIe at ``--slow-interval``), ``8_gpus_one_hung``
(every NVML call on GPU 7 blocks for the whole phase). Per phase: who takes the ticks
(``c-thread`` or ``python``), ticks, missed ticks, tick lag and read latency (p50, p99,
max, ms), the share of ticks after the first second in which each GPU's power and its
first process's memory read a value, process channels joined and retired, NVML calls per
second, and polls the GPU threads skipped. Writes JSON to
``bench/results/gpu_ticks.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, write_result
from reveal.collect.cpu import CpuProbe
from reveal.collect.gpu import GpuProbe
from reveal.collect.gpu_procs import GpuProcessProbe
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NetworkProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.sampler import MemorySink, Sampler
from reveal.collect.storage import StorageProbe
from reveal.frame import parse_channel

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "nvml"
GPUS = 8
PCIE_CALL_S = 0.020  # what NVML documents one PCIe throughput sample to take
PROC_CALL_S = 0.010  # each per-process query, seconds (simulated)
PROC_QUERIES = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                "nvmlDeviceGetProcessUtilization")
GIB = 2**30


def _replay_module() -> Any:
    spec = importlib.util.spec_from_file_location("nvml_procs_replay", FIXTURES / "procs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _procfs_probes() -> list[Probe]:
    probes: list[Probe] = []
    for cls in (CpuProbe, MemoryProbe, NetworkProbe, StorageProbe, PressureProbe,
                InterruptsProbe):
        probe = cls()
        try:
            probe.open()
        except ProbeUnavailable:
            continue
        probes.append(probe)
    return probes


def _ms(value: float) -> float:
    return round(value * 1e3, 3)


class _Churn(threading.Thread):
    """Live processes on the simulated GPUs: ``per_gpu`` each; every ``every_s`` the
    oldest started by churning ends and a new one starts on the next GPU."""

    def __init__(self, nvml: Any, per_gpu: int, every_s: float) -> None:
        super().__init__(name="bench-churn", daemon=True)
        self.nvml = nvml
        self.every_s = every_s
        self.stop_event = threading.Event()
        self.procs: list[tuple[int, subprocess.Popen[bytes]]] = []
        self.first: dict[int, int] = {}  # GPU → pid of its first process (never ends)
        self.started = self.ended = 0
        for gpu in range(GPUS):
            for _ in range(per_gpu):
                pid = self._start(gpu)
                self.first.setdefault(gpu, pid)

    def _start(self, gpu: int) -> int:
        proc = subprocess.Popen(["sleep", "600"])
        self.nvml.run(gpu, proc.pid, (gpu + 1) * GIB, sm_pct=80.0)
        self.procs.append((gpu, proc))
        return proc.pid

    def run(self) -> None:
        k = 0
        while not self.stop_event.wait(self.every_s):
            victim = next(((g, p) for g, p in self.procs if p.pid != self.first[g]), None)
            if victim is not None:
                self.procs.remove(victim)
                self.nvml.end(victim[0], victim[1].pid)
                victim[1].kill()
                victim[1].wait()
                self.ended += 1
            self._start(k % GPUS)
            self.started += 1
            k += 1

    def close(self) -> None:
        self.stop_event.set()
        self.join()
        for _, proc in self.procs:
            proc.kill()
            proc.wait()


def run_phase(name: str, seconds: float, hung: int | None, slow_interval_s: float,
              per_gpu: int, churn_s: float, refresh_s: float) -> dict:
    replay = _replay_module()
    fixture = json.loads((FIXTURES / "h100_sxm5_x2.json").read_text())
    nvml = replay.ProcessReplayNvml(
        fixture, gpus=GPUS, delays={"nvmlDeviceGetPcieThroughput": PCIE_CALL_S,
                                    **dict.fromkeys(PROC_QUERIES, PROC_CALL_S)})
    churn = _Churn(nvml, per_gpu, churn_s)
    gpu = GpuProbe(nvml=nvml, interval_s=0.1, slow_interval_s=slow_interval_s)
    procs = GpuProcessProbe(nvml=nvml, interval_s=0.1)
    procfs = _procfs_probes()
    gpu.open()
    procs.open()
    proc_channels_at_open = len(procs.channels)
    probes: list[Probe] = [*procfs, gpu, procs]
    nvml.forbidden = threading.current_thread()  # an NVML call on the tick would be listed
    if hung is not None:
        nvml.hang(hung)
    calls_before = dict(nvml.calls)
    sampler = Sampler(probes, 0.1, refresh_s=refresh_s)
    sink = MemorySink(sampler.channels)
    t0 = time.monotonic()
    churn.start()
    try:
        sampler.run(sink, duration_s=seconds)
    finally:
        elapsed = time.monotonic() - t0
        churn.close()
        if hung is not None:
            nvml.release(hung)
        gpu.refresh()
        procs.refresh()
        info = dict(gpu.info)
        status, reason = gpu.status, gpu.reason
        procs_info = dict(procs.info)
        procs_status, procs_reason = procs.status, procs.reason
        for probe in reversed(probes):
            probe.close()
    channels = sink.parts[-1][0]
    power = {i: _share(sink, lambda c, i=i: f"gpu.power_mw{{gpu={i}}}") for i in range(GPUS)}
    pcie = {i: _share(sink, lambda c, i=i: f"gpu.pcie_tx_kbps{{gpu={i}}}")
            for i in range(GPUS)}
    proc_mem = {i: _share(sink, lambda c, i=i: _mem_channel(c, i, churn.first[i]))
                for i in range(GPUS)}
    calls = {k: round((v - calls_before.get(k, 0)) / elapsed, 1)
             for k, v in sorted(nvml.calls.items()) if v - calls_before.get(k, 0)}
    stats = sampler.stats
    return {
        "phase": name,
        "seconds": seconds,
        "hung_gpu": hung,
        "ticks_taken_by": "c-thread" if sampler.mode == "native" else "python",
        "realtime": sampler.realtime_granted,
        "channels": len(channels),
        "gpu_channels": sum(c.startswith("gpu.") and not c.startswith("gpu.proc.")
                            for c in channels),
        "gpu_proc_channels": {"at_open": proc_channels_at_open,
                              "at_end": sum(c.startswith("gpu.proc.") for c in channels)},
        "processes": {"per_gpu": per_gpu, "churn_every_s": churn_s,
                      "started_during_run": churn.started, "ended_during_run": churn.ended},
        "proc_channels_retired": procs_info.get("retired_channels"),
        "segments": len(sink.parts),
        "schema_changes": sampler.stats.schema_changes,
        "procfs_probes": [p.name for p in procfs],
        "ticks": stats.samples,
        "missed_ticks": stats.missed_ticks,
        "tick_lag_ms": {"p50": _ms(stats.lag_s.quantile(0.5)),
                        "p99": _ms(stats.lag_s.quantile(0.99)), "max": _ms(stats.lag_s.max)},
        "read_latency_ms": {"p50": _ms(stats.latency_s.quantile(0.5)),
                            "p99": _ms(stats.latency_s.quantile(0.99)),
                            "max": _ms(stats.latency_s.max)},
        "share_of_ticks_with_gpu_power": power,
        "share_of_ticks_with_gpu_pcie_tx": pcie,
        "share_of_ticks_with_first_process_mem": proc_mem,
        "nvml_calls_per_s": calls,
        "nvml_calls_on_tick_thread": nvml.unrecorded,
        "poll_overruns": info.get("poll_overruns"),
        "stale_expiries": info.get("stale_expiries"),
        "gpu_status": status,
        "gpu_reason": reason,
        "gpu_procs_poll_overruns": procs_info.get("poll_overruns"),
        "gpu_procs_stale_expiries": procs_info.get("stale_expiries"),
        "gpu_procs_status": procs_status,
        "gpu_procs_reason": procs_reason,
    }


def _share(sink: MemorySink, channel: Callable[[list[str]], str]) -> float:
    """Share of the ticks after the first second (every segment) in which the channel
    ``channel(segment's channels)`` names reads a value."""
    found = [np.isfinite(np.asarray(rows)[:, names.index(channel(names))])
             for names, _, rows in sink.parts if rows]
    return float(np.concatenate(found)[10:].mean())


def _mem_channel(channels: list[str], gpu: int, pid: int) -> str:
    """The ``gpu.proc.mem_used_bytes`` channel of ``pid`` on GPU ``gpu``."""
    for name in channels:
        metric, labels = parse_channel(name)
        if (metric == "gpu.proc.mem_used_bytes" and labels.get("pid") == str(pid)
                and labels.get("gpu") == str(gpu)):
            return name
    raise KeyError(f"no channel for pid {pid} on GPU {gpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=40.0, help="seconds, all GPUs up")
    parser.add_argument("--hung-duration", type=float, default=30.0,
                        help="seconds with GPU 7 hung (0: skip)")
    parser.add_argument("--slow-interval", type=float, default=1.0,
                        help="seconds between PCIe throughput polls")
    parser.add_argument("--procs-per-gpu", type=int, default=2,
                        help="live processes per simulated GPU")
    parser.add_argument("--churn-s", type=float, default=3.0,
                        help="seconds between one process ending and a new one starting")
    parser.add_argument("--refresh-s", type=float, default=5.0,
                        help="the sampler's refresh period, seconds")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_ticks.json")
    args = parser.parse_args()
    phases = [run_phase("8_gpus", args.duration, None, args.slow_interval, args.procs_per_gpu,
                        args.churn_s, args.refresh_s)]
    if args.hung_duration > 0:
        phases.append(run_phase("8_gpus_one_hung", args.hung_duration, GPUS - 1,
                                args.slow_interval, args.procs_per_gpu, args.churn_s,
                                args.refresh_s))
    result = {
        "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "interval_s": 0.1, "refresh_s": args.refresh_s, "gpus": GPUS,
        "pcie_call_s": PCIE_CALL_S, "per_process_call_s": PROC_CALL_S,
        "slow_interval_s": args.slow_interval,
        "blocking_per_tick_if_on_tick_path_s": GPUS * (2 * PCIE_CALL_S + 3 * PROC_CALL_S),
        "phases": phases,
    }
    write_result(args.out, result,
                 {**arguments(args), "interval_s": 0.1, "gpus": GPUS, "pcie_call_s": PCIE_CALL_S,
                  "per_process_call_s": PROC_CALL_S})
    for phase in phases:
        print(f"{phase['phase']}: {phase['ticks_taken_by']}, {phase['ticks']} ticks, "
              f"{phase['missed_ticks']} missed, lag p50 {phase['tick_lag_ms']['p50']} ms "
              f"p99 {phase['tick_lag_ms']['p99']} ms, max {phase['tick_lag_ms']['max']} ms, "
              f"process channels {phase['gpu_proc_channels']}, "
              f"{phase['proc_channels_retired']} retired, {phase['segments']} segments")
    print(args.out)


if __name__ == "__main__":
    main()
