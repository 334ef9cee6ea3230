"""Synthetic host telemetry shared by the analysis tests: AR(1) gauges and growing counters."""

from __future__ import annotations

import numpy as np

from reveal.frame import Telemetry

CHANNELS = ["derived.cpu_busy_pct", "mem.Dirty", "disk.sectors_written{dev=vda}",
            "net.rx_bytes{iface=eth0}"]


def ar1_host(seconds: float, seed: int, fault: tuple[float, float] | None = None,
             interval_s: float = 0.1, start_s: float = 0.0) -> Telemetry:
    """Stationary AR(1) gauges (CPU busy %, dirty bytes) and steadily growing counters
    (sectors written, bytes received) every ``interval_s`` seconds; with ``fault`` (seconds
    from the start), CPU busy is 45 points higher over that span (contention)."""
    rng = np.random.default_rng(seed)
    n = int(seconds / interval_s)
    ts = (np.int64(round(start_s * 1e9))
          + np.arange(n, dtype=np.int64) * np.int64(round(interval_s * 1e9)))
    noise = rng.normal(size=(n, 4))
    ar = np.empty_like(noise)
    ar[0] = noise[0]
    for t in range(1, n):
        ar[t] = 0.6 * ar[t - 1] + noise[t]
    cpu = 40 + 3 * ar[:, 0]
    dirty = 5e6 + 2e5 * ar[:, 1]
    sectors = np.cumsum(np.maximum(200 + 20 * ar[:, 2], 0))
    rx = np.cumsum(np.maximum(1e5 + 1e4 * ar[:, 3], 0))
    if fault is not None:
        a, b = int(fault[0] / interval_s), int(fault[1] / interval_s)
        cpu[a:b] += 45
    return Telemetry("synthetic-host", ts, np.column_stack([cpu, dirty, sectors, rx]),
                     list(CHANNELS), {"interval_s": interval_s})
