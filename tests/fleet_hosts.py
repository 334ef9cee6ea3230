"""A synthetic fleet for the fleet tests: hosts of one job running in lock-step.

Every host follows the same activity pattern (piecewise-constant CPU load whose levels and
durations are drawn once per fleet, as training steps and evaluation phases would be) plus
its own AR(1) noise, with its own monotonic clock (a random boot time) put on the wall
clock by ``meta["wall_offset_ns"]``. Hosts may name their interfaces and disks
differently and have different numbers of GPUs; one host may be given a fault.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reveal.frame import Telemetry

WALL_START_S = 1_760_000_000.0
GIB = 1024.0**3


@dataclass(frozen=True)
class Fault:
    """What makes one host differ: a level shift of available memory (bytes, over
    ``span_s`` seconds from the start), a huge page pool, a recorded clock offset (s)."""

    host: int
    memory_drop: float = 0.0
    span_s: tuple[float, float] = (0.0, 0.0)
    hugepages: int = 0
    clock_s: float = 0.0


def activity(seconds: float, interval_s: float, seed: int) -> np.ndarray:
    """The fleet's shared CPU load (%) per sample: levels 20-80 held for 2-8 s each."""
    rng = np.random.default_rng(seed)
    n = round(seconds / interval_s)
    out = np.empty(n)
    i = 0
    while i < n:
        span = int(rng.uniform(2, 8) / interval_s)
        out[i:i + span] = rng.uniform(20, 80)
        i += span
    return out


def _ar1(rng: np.random.Generator, n: int, k: int, phi: float = 0.6) -> np.ndarray:
    noise = rng.normal(size=(n, k))
    out = np.empty_like(noise)
    out[0] = noise[0]
    for t in range(1, n):
        out[t] = phi * out[t - 1] + noise[t]
    return out


def fleet(n_hosts: int = 6, seconds: float = 120.0, seed: int = 0, interval_s: float = 0.1,
          faults: tuple[Fault, ...] = (), ifaces: tuple[str, ...] = ("eth0",),
          disks: tuple[str, ...] = ("vda",), gpus: tuple[int, ...] = (2,),
          names: tuple[str, ...] | None = None,
          start_s: tuple[float, ...] | None = None) -> list[Telemetry]:
    """``n_hosts`` hosts of one job; ``ifaces``/``disks``/``gpus`` cycle over the hosts
    (interface and disk names, GPU counts), ``start_s`` delays hosts' recordings (s)."""
    common = activity(seconds, interval_s, seed)
    n = common.size
    out = []
    for h in range(n_hosts):
        rng = np.random.default_rng(seed * 1000 + h + 1)
        fault = next((f for f in faults if f.host == h), Fault(h))
        iface, disk = ifaces[h % len(ifaces)], disks[h % len(disks)]
        n_gpu = gpus[h % len(gpus)]
        ar = _ar1(rng, n, 6 + n_gpu)
        job_cpu = int(rng.integers(0, 2))
        busy = np.empty((n, 2))
        busy[:, job_cpu] = np.clip(common + 3 * ar[:, 0], 0, 100)
        busy[:, 1 - job_cpu] = np.clip(5 + 1.5 * ar[:, 1], 0, 100)
        available = 48 * GIB + 2e7 * ar[:, 2]
        if fault.memory_drop:
            a, b = (int(x / interval_s) for x in fault.span_s)
            available[a:b] -= fault.memory_drop
        dirty = 5e6 + 2e5 * ar[:, 3]
        rx = np.cumsum(np.maximum(2e4 * common + 5e4 * ar[:, 4], 0) * interval_s)
        sectors = np.cumsum(np.maximum(200 + 20 * ar[:, 5], 0))
        lo_rx = np.cumsum(np.full(n, 300.0) * interval_s)
        gpu = [np.clip(common + 10 + 2 * ar[:, 6 + g], 0, 100) for g in range(n_gpu)]
        columns = [busy[:, 0], busy[:, 1], busy.mean(axis=1), available, dirty, rx, lo_rx,
                   sectors, *gpu, np.full(n, float(fault.hugepages)), np.full(n, 10000.0),
                   np.full(n, 64 * GIB)]
        channels = ["derived.cpu_busy_pct{cpu=0}", "derived.cpu_busy_pct{cpu=1}",
                    "derived.cpu_busy_pct", "mem.MemAvailable", "mem.Dirty",
                    f"net.rx_bytes{{iface={iface}}}", "net.rx_bytes{iface=lo}",
                    f"disk.sectors_written{{dev={disk}}}",
                    *[f"gpu.sm_util{{gpu={g}}}" for g in range(n_gpu)],
                    "mem.HugePages_Total", f"net.speed_mbps{{iface={iface}}}", "mem.MemTotal"]
        boot_ns = int(rng.integers(10**9, 10**12))
        delay = start_s[h % len(start_s)] if start_s else 0.0
        ts = boot_ns + np.arange(n, dtype=np.int64) * round(interval_s * 1e9)
        wall_offset = round((WALL_START_S + delay + fault.clock_s) * 1e9) - boot_ns
        if delay:  # a later recording: the job's activity at that later time
            shift = round(delay / interval_s)
            columns = [np.roll(c, -shift) for c in columns]
        name = names[h] if names else f"host-{h}"
        out.append(Telemetry(name, ts, np.column_stack(columns), channels,
                             {"interval_s": interval_s, "wall_offset_ns": wall_offset}))
    return out


def one_host(index: int, n_hosts: int, seconds: float, seed: int,
             faults: tuple[Fault, ...] = (), delay_s: float = 0.0) -> Telemetry:
    """Host ``index`` of :func:`fleet` (a loader a Dask worker calls), after ``delay_s``
    seconds (a host that takes a while to read)."""
    import time

    time.sleep(delay_s)
    return fleet(n_hosts, seconds, seed=seed, faults=faults)[index]
