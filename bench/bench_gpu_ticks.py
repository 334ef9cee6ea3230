"""Ticks on a simulated 8-GPU host: does NVML's blocking reach the sampler?

NVML's ``nvmlDeviceGetPcieThroughput`` measures for 20 ms before it answers; called twice
per GPU on the tick, 8 GPUs would block each 100 ms tick for 320 ms. Here the GPU probe
polls NVML on its own threads and the sampler only copies the latest values. No GPU is
reachable on this machine, so NVML is the replay of ``tests/fixtures/nvml`` (two H100
answers repeated over 8 GPUs) with the PCIe query sleeping 20 ms per call; the sampler,
the procfs probes (cpu, memory, network, storage, pressure, interrupts) and the GPU
probe's threads are the real ones.

    python bench/bench_gpu_ticks.py                       # 40 s, then 30 s with GPU 7 hung
    python bench/bench_gpu_ticks.py --duration 60 --hung-duration 0

Phases: ``8_gpus`` (every GPU answers; PCIe at ``--slow-interval``), ``8_gpus_one_hung``
(every NVML call on GPU 7 blocks for the whole phase). Per phase: who takes the ticks
(``c-thread`` or ``python``), ticks, missed ticks, tick lag and read latency (p50, p99,
max, ms), the share of ticks after the first second in which each GPU's power reads a
value, NVML calls per second, and polls the GPU threads skipped. Writes JSON to
``bench/results/gpu_ticks.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from reveal.collect.cpu import CpuProbe
from reveal.collect.gpu import GpuProbe
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NetworkProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.sampler import MemorySink, Sampler
from reveal.collect.storage import StorageProbe

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "nvml"
GPUS = 8
PCIE_CALL_S = 0.020  # what NVML documents one PCIe throughput sample to take


def _replay_module() -> Any:
    spec = importlib.util.spec_from_file_location("nvml_replay", FIXTURES / "replay.py")
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


def run_phase(name: str, seconds: float, hung: int | None, slow_interval_s: float) -> dict:
    replay = _replay_module()
    fixture = json.loads((FIXTURES / "h100_sxm5_x2.json").read_text())
    nvml = replay.ReplayNvml(fixture, gpus=GPUS,
                             delays={"nvmlDeviceGetPcieThroughput": PCIE_CALL_S})
    gpu = GpuProbe(nvml=nvml, interval_s=0.1, slow_interval_s=slow_interval_s)
    procfs = _procfs_probes()
    gpu.open()
    probes: list[Probe] = [*procfs, gpu]
    nvml.forbidden = threading.current_thread()  # an NVML call on the tick would be listed
    if hung is not None:
        nvml.hang(hung)
    calls_before = dict(nvml.calls)
    sampler = Sampler(probes, 0.1, refresh_s=10.0)
    sink = MemorySink(sampler.channels)
    t0 = time.monotonic()
    try:
        sampler.run(sink, duration_s=seconds)
    finally:
        elapsed = time.monotonic() - t0
        if hung is not None:
            nvml.release(hung)
        gpu.refresh()
        info = dict(gpu.info)
        status, reason = gpu.status, gpu.reason
        for probe in probes:
            probe.close()
    channels, _, rows_list = sink.parts[-1]
    rows = np.asarray(rows_list)[10:]  # after the first second
    power = {i: float(np.isfinite(rows[:, channels.index(f"gpu.power_mw{{gpu={i}}}")]).mean())
             for i in range(GPUS)}
    pcie = {i: float(np.isfinite(rows[:, channels.index(f"gpu.pcie_tx_kbps{{gpu={i}}}")]).mean())
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
        "gpu_channels": sum(c.startswith("gpu.") for c in channels),
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
        "nvml_calls_per_s": calls,
        "nvml_calls_on_tick_thread": nvml.unrecorded,
        "poll_overruns": info.get("poll_overruns"),
        "stale_expiries": info.get("stale_expiries"),
        "gpu_status": status,
        "gpu_reason": reason,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=40.0, help="seconds, all GPUs up")
    parser.add_argument("--hung-duration", type=float, default=30.0,
                        help="seconds with GPU 7 hung (0: skip)")
    parser.add_argument("--slow-interval", type=float, default=1.0,
                        help="seconds between PCIe throughput polls")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_ticks.json")
    args = parser.parse_args()
    phases = [run_phase("8_gpus", args.duration, None, args.slow_interval)]
    if args.hung_duration > 0:
        phases.append(run_phase("8_gpus_one_hung", args.hung_duration, GPUS - 1,
                                args.slow_interval))
    result = {
        "host": platform.node(), "cpus": os.cpu_count(),
        "load_avg_at_end": os.getloadavg(),
        "interval_s": 0.1, "gpus": GPUS, "pcie_call_s": PCIE_CALL_S,
        "slow_interval_s": args.slow_interval,
        "blocking_per_tick_if_on_tick_path_s": GPUS * 2 * PCIE_CALL_S,
        "phases": phases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for phase in phases:
        print(f"{phase['phase']}: {phase['ticks_taken_by']}, {phase['ticks']} ticks, "
              f"{phase['missed_ticks']} missed, lag p50 {phase['tick_lag_ms']['p50']} ms "
              f"p99 {phase['tick_lag_ms']['p99']} ms, max {phase['tick_lag_ms']['max']} ms")
    print(args.out)


if __name__ == "__main__":
    main()
