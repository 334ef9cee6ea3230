"""The fleet comparison at scale on a local Dask cluster: hosts × 10 min × 400 channels.

The hosts are **synthetic**: each is made inside its own Dask task from its seed (no data
travels), as a job's hosts would look: a shared activity pattern (piecewise-constant load
levels held 2-8 s, drawn once for the fleet) seen by every host with its own random time
shift of up to half a second, plus per-host AR(1) noise (phi 0.6) on every channel, for
400 channels at 100 ms: 64 per-CPU busy %, memory gauges, paging counters, 4 disks, 4
interfaces, 8 GPUs and configuration channels. One host in a hundred has available memory
1 GiB lower for two minutes; the figures say how many of those the comparison flagged and
how many other hosts it flagged.

Measured: wall time of the whole comparison (features, plan, blocks, report data) on a
LocalCluster of 1 and of 2 single-threaded worker processes (memory limit 4 GiB each;
Dask spills to disk above 60 %), the peak resident memory of each worker (its
``ru_maxrss``), and the load average of the machine beside each timing (the speed-up only
means something on a quiet machine).

    python bench/bench_fleet_scale.py                          # 1,000 hosts on 2 workers
    python bench/bench_fleet_scale.py --speedup-hosts 100      # also 100 hosts on 1 and 2
    python bench/bench_fleet_scale.py --hosts 1000 --workers 1 2   # the speed-up at full size

Writes JSON to ``bench/results/fleet_scale.json`` (``--out``): one entry per (hosts,
workers) run, and the 1→2 speed-up for every size measured with both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.signal import lfilter

from provenance import arguments, fleet_settings, script_argv, write_result

ROOT = Path(__file__).resolve().parents[1]
INTERVAL_S = 0.1
WALL_START_S = 1_760_000_000.0
GIB = 1024.0**3
#: memory limit of each Dask worker
WORKER_MEMORY = "4GiB"


def channel_layout() -> tuple[list[str], list[str]]:
    """400 channel names and their role in the generator (gauge, counter, cpu, static)."""
    names: list[str] = []
    roles: list[str] = []

    def add(items: list[str], role: str) -> None:
        names.extend(items)
        roles.extend([role] * len(items))

    add([f"derived.cpu_busy_pct{{cpu={i}}}" for i in range(64)], "cpu")
    add(["derived.cpu_busy_pct"], "cpu_total")
    add(["mem.MemAvailable"], "available")
    add([f"mem.{n}" for n in ("MemFree", "Cached", "Dirty", "Writeback", "AnonPages",
                              "Mapped", "Shmem", "Slab", "SReclaimable", "SUnreclaim",
                              "KernelStack", "PageTables", "Active", "Inactive",
                              "Active(anon)", "Inactive(anon)", "Active(file)",
                              "Inactive(file)", "Unevictable", "Mlocked", "Buffers",
                              "Committed_AS", "AnonHugePages", "Percpu")], "gauge")
    add([f"vmstat.{n}" for n in ("pgfault", "pgalloc_normal", "pgfree", "pgactivate",
                                 "pgdeactivate", "pgrefill", "pgsteal_kswapd",
                                 "pgscan_kswapd", "pgpgin", "pgpgout", "numa_hit",
                                 "numa_local", "pgmajfault", "workingset_refault_file",
                                 "pgreuse", "thp_fault_alloc")], "counter")
    for d in ("nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1"):
        add([f"disk.{n}{{dev={d}}}" for n in ("reads_completed", "reads_merged",
                                              "sectors_read", "read_time_ms",
                                              "writes_completed", "writes_merged",
                                              "sectors_written", "write_time_ms",
                                              "io_time_ms", "weighted_io_time_ms")],
            "counter")
    for i in ("ens5", "ens6", "ib0", "ib1"):
        add([f"net.{n}{{iface={i}}}" for n in ("rx_bytes", "tx_bytes", "rx_packets",
                                              "tx_packets", "rx_errs", "tx_errs",
                                              "rx_drop", "tx_drop", "multicast",
                                              "rx_fifo", "tx_fifo", "tx_colls")],
            "counter")
    for g in range(8):
        add([f"gpu.{n}{{gpu={g}}}" for n in ("sm_util", "mem_util", "kernel_active_pct",
                                             "sm_active_pct", "sm_occupancy_pct",
                                             "tensor_active_pct", "dram_bw_util_pct",
                                             "temperature_c", "power_mw", "mem_used_bytes",
                                             "sm_clock_mhz", "pcie_rx_bytes")], "gauge")
    add([f"softirq.count{{cpu={i},type=NET_RX}}" for i in range(64)], "counter")
    add(["mem.HugePages_Total", "mem.MemTotal", "net.speed_mbps{iface=ens5}",
         "net.speed_mbps{iface=ens6}", "gpu.power_limit_mw{gpu=0}"], "static")
    fill = 400 - len(names)
    add([f"pressure.some_total_us{{resource=r{i}}}" for i in range(fill)], "counter")
    return names, roles


def activity(seconds: float, seed: int = 0) -> np.ndarray:
    """The job's shared CPU load (%) per sample, levels 20-80 held 2-8 s each."""
    rng = np.random.default_rng(seed)
    n = round(seconds / INTERVAL_S)
    out = np.empty(n)
    i = 0
    while i < n:
        span = int(rng.uniform(2, 8) / INTERVAL_S)
        out[i:i + span] = rng.uniform(20, 80)
        i += span
    return out


def make_host(index: int, seconds: float, fault_every: int = 100) -> Any:
    """Host ``index`` of the synthetic fleet (see the module doc), made from its seed."""
    from reveal.frame import Telemetry

    names, roles = channel_layout()
    role = np.array(roles)
    rng = np.random.default_rng(10_000 + index)
    n = round(seconds / INTERVAL_S)
    shift = int(rng.integers(0, 6))  # up to half a second behind the others
    common = np.roll(activity(seconds), shift)[:, None] / 50.0  # about 0.4-1.6
    noise = lfilter([1.0], [1.0, -0.6], rng.normal(size=(n, len(names))), axis=0)
    level = np.where(role == "gauge", 1e6, 10.0)
    values = level * (1.0 + 0.05 * noise) * np.where(role == "gauge", 1.0, common)
    cpu = role == "cpu"
    busy = np.zeros((n, 64))
    busy[:, :8] = np.clip(50 * common + 3 * noise[:, :8], 0, 100)  # the job's 8 threads
    busy[:, 8:] = np.clip(2 + 0.5 * noise[:, 8:64], 0, 100)
    values[:, cpu] = busy
    values[:, role == "cpu_total"] = busy.mean(axis=1, keepdims=True)
    available = 200 * GIB + 5e7 * noise[:, np.flatnonzero(role == "available")[0]]
    if fault_every and index % fault_every == fault_every // 2:
        a = int(rng.integers(60, 400) / INTERVAL_S)
        available[a:a + int(120 / INTERVAL_S)] -= GIB
    values[:, role == "available"] = available[:, None]
    counters = role == "counter"
    values[:, counters] = np.cumsum(np.abs(values[:, counters]) * INTERVAL_S, axis=0)
    static = np.flatnonzero(role == "static")
    values[:, static] = np.array([0.0, 256 * GIB, 100_000.0, 100_000.0, 700_000.0])
    boot_ns = int(rng.integers(10**9, 10**13))
    ts = boot_ns + np.arange(n, dtype=np.int64) * round(INTERVAL_S * 1e9)
    meta = {"interval_s": INTERVAL_S, "wall_offset_ns": round(WALL_START_S * 1e9) - boot_ns,
            "simulated": "synthetic AR(1) around a shared activity pattern"}
    return Telemetry(f"node-{index:05d}", ts, values, names, meta)


def _maxrss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_once(hosts: int, workers: int, seconds: float, say) -> dict[str, Any]:
    """One comparison of ``hosts`` synthetic hosts on ``workers`` local worker processes."""
    import functools

    from reveal.fleet.config import FleetConfig
    from reveal.fleet.distributed import compare_fleet_dask, fleet_client

    config = FleetConfig()
    sources = [functools.partial(make_host, i, seconds) for i in range(hosts)]
    with fleet_client(workers=workers, memory_limit=WORKER_MEMORY) as client:
        client.run(lambda: None)  # workers up before the clock starts
        load_before = os.getloadavg()
        t0 = time.perf_counter()
        result = compare_fleet_dask(sources, config, client=client, progress=say)
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()
        peaks = client.run(_maxrss_bytes)
    faulty = {f"node-{i:05d}" for i in range(hosts) if i % 100 == 50}
    flagged = {e.host for e in result.episodes}
    return {"hosts": hosts, "workers": workers, "seconds_per_host": seconds,
            "channels": 400, "interval_s": INTERVAL_S,
            "windows": len(result.grid_start_ns), "columns_compared": len(result.columns),
            "wall_s": round(wall, 1),
            "peak_rss_per_worker_gib": sorted(round(v / GIB, 2) for v in peaks.values()),
            "loadavg_before": [round(x, 2) for x in load_before],
            "loadavg_after": [round(x, 2) for x in load_after],
            "injected_hosts": len(faulty), "injected_flagged": len(faulty & flagged),
            "other_hosts_flagged": len(flagged - faulty)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1000])
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--speedup-hosts", type=int, nargs="*", default=[],
                        help="smaller sizes also run on 1 and 2 workers (the speed-up)")
    parser.add_argument("--seconds", type=float, default=600.0, help="per host (default 600)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fleet_scale.json"))
    parser.add_argument("--append", action="store_true",
                        help="add these runs to those already in --out (another moment, "
                             "another load)")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def say(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    runs = []
    plan = [(h, w) for h in args.hosts for w in args.workers]
    plan += [(h, w) for h in args.speedup_hosts for w in (1, 2) if (h, w) not in plan]
    for hosts, workers in plan:
        print(f"{hosts} hosts on {workers} workers", file=sys.stderr, flush=True)
        entry = run_once(hosts, workers, args.seconds, say)
        print(json.dumps(entry), file=sys.stderr, flush=True)
        runs.append(entry)
    speedups = []
    for hosts in dict.fromkeys(h for h, _w in plan):
        by = {r["workers"]: r["wall_s"] for r in runs if r["hosts"] == hosts}
        if 1 in by and 2 in by:
            speedups.append({"hosts": hosts, "speedup_1_to_2": round(by[1] / by[2], 2)})
    earlier_provenance = []
    if args.append and Path(args.out).exists():
        earlier = json.loads(Path(args.out).read_text())
        runs = earlier.get("runs", []) + runs
        speedups = earlier.get("speedups", []) + speedups
        # where the runs kept from before came from
        earlier_provenance = [*earlier.get("earlier_provenance", []),
                              *([earlier["provenance"]] if "provenance" in earlier else [])]
    payload = {"benchmark": "fleet_scale", "data": "synthetic (see bench_fleet_scale.py)",
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "platform": platform.platform()},
               "runs": runs, "speedups": speedups}
    if earlier_provenance:
        payload["earlier_provenance"] = earlier_provenance
    settings = {**arguments(args), "fleet": fleet_settings(), "interval_s": INTERVAL_S,
                "channels": len(channel_layout()[0]), "worker_memory_limit": WORKER_MEMORY}
    write_result(args.out, payload, settings, script_argv(__file__, argv), started)
    print(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
