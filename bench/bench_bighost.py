"""The collector on a simulated big host: 256 CPUs, 64 NICs, 64 NVMe disks.

A side process writes the tree of tests/fixtures/bighost/make_tree.py into tmpfs and
advances its counters every ``--tick-every`` seconds (rewriting the files in place); the
real collector (``reveal collect``: probes, Sampler, SegmentWriter) records it at
``--interval`` with every file probe pointed at the tree (``proc_root``/``sys_root``).
Two runs: the interrupts probe's default (``detail=auto``: per-IRQ and per-CPU totals on
this size) and full per-CPU × per-IRQ detail (``detail=full``).

Per run: channels (total and by probe), the collector's CPU (% of one core, utime+stime
from /proc/PID/stat over the steady state), ticks taken by the C thread or Python, missed
ticks, read latency p50/p99 (all probes, one tick), tick lag, memory, and bytes per stored
value of the Parquet segment written at the end. The files are regular tmpfs files: the
kernel's cost of producing procfs text (on a real 256-CPU host, /proc/interrupts alone is
1.2 MB of text per read) is not in these figures.

    python bench/bench_bighost.py                   # 2 × 60 s, about 3 minutes
    python bench/bench_bighost.py --duration 30 --out /tmp/bighost.json

Writes JSON to ``bench/results/bighost.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_collector import Meter, _wait_started, storage  # noqa: E402
from provenance import arguments, script_argv, write_result  # noqa: E402

MAKE_TREE = ROOT / "tests" / "fixtures" / "bighost" / "make_tree.py"
PROBES = ("cpu", "memory", "storage", "network", "interrupts", "pressure", "power")

SIDE = r"""
import importlib.util, json, signal, sys, time
path, root, seed, every, out = sys.argv[1:6]
spec = importlib.util.spec_from_file_location("make_tree", path)
mod = importlib.util.module_from_spec(spec)
sys.modules["make_tree"] = mod
spec.loader.exec_module(mod)
host = mod.make_tree(root, seed=int(seed))
open(root + "/ready", "w").close()
stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
every, spent, start, k = float(every), 0.0, time.monotonic(), 0
while not stop:
    k += 1
    delay = start + k * every - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    if stop:
        break
    t0 = time.monotonic()
    host.tick()
    spent += time.monotonic() - t0
with open(out, "w") as f:
    json.dump({"ticks": host.ticks, "tick_s_mean": spent / max(host.ticks, 1)}, f)
"""


def _wait_file(path: Path, proc: subprocess.Popen, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"{path.name}: process exited ({proc.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.05)


def one_run(work: Path, detail: str, args: argparse.Namespace) -> dict[str, Any]:
    """Record the simulated host for ``args.duration`` s with interrupts ``detail``."""
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    tree = Path(tempfile.mkdtemp(prefix="reveal-bighost-", dir=shm))
    side_out = work / f"side-{detail}.json"
    side = subprocess.Popen([sys.executable, "-c", SIDE, str(MAKE_TREE), str(tree),
                             str(args.seed), str(args.tick_every), str(side_out)])
    run = work / f"run-{detail}"
    try:
        _wait_file(tree / "ready", side)
        options = [f"--probe-option={p}.{k}={tree / k[:-5]}" for p in PROBES
                   for k in ("proc_root", "sys_root")]
        options.append(f"--probe-option=interrupts.detail={detail}")
        started = time.monotonic()
        collector = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "collect", "--out", str(run), "--quiet",
             "--interval", str(args.interval), "--duration", str(args.duration),
             "--probes", ",".join(PROBES), *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        _wait_started(run, collector, timeout_s=120)
        opened_s = time.monotonic() - started
        meter = Meter(collector.pid)
        time.sleep(args.warmup)
        meter.start()
        time.sleep(max(args.duration - args.warmup - 3.0, 1.0))
        meter.stop()
        _, err = collector.communicate(timeout=args.duration + 300)
    finally:
        side.send_signal(signal.SIGTERM)
        side.wait(timeout=60)
        shutil.rmtree(tree, ignore_errors=True)
    meta = json.loads((run / "meta.json").read_text())
    stats = meta.get("stats", {})
    probes = meta.get("probes", {})
    result = {
        "interrupts_detail": detail,
        "interrupts_info": {k: probes.get("interrupts", {}).get("info", {}).get(k)
                            for k in ("irq_detail", "irq_table")},
        "channels": meta.get("n_channels"),
        "channels_by_probe": {k: v.get("channels", 0) for k, v in probes.items()},
        "probe_status": {k: v.get("status") for k, v in probes.items()},
        "open_s": round(opened_s, 2),
        "collector_cpu_pct_core": round(meter.pct, 3),
        "cpu_window_s": round(meter.t1 - meter.t0, 1),
        "collector_cpu_s_total": stats.get("cpu_s"),
        "ticks_taken_by": stats.get("ticks_taken_by"),
        "samples": stats.get("samples"),
        "missed_ticks": stats.get("missed_ticks"),
        "read_latency_ms_p50": stats.get("latency_ms_p50"),
        "read_latency_ms_p99": stats.get("latency_ms_p99"),
        "tick_lag_ms_p50": stats.get("jitter_ms_p50"),
        "tick_lag_ms_p99": stats.get("jitter_ms_p99"),
        "schema_changes": stats.get("schema_changes"),
        "max_rss_mib": round(stats.get("max_rss_bytes", 0) / 2**20, 1),
        "storage": storage(run),
        "tree_side_process": json.loads(side_out.read_text()) if side_out.exists() else None,
        "stderr_tail": err[-800:] if err else "",
    }
    if not args.keep:
        shutil.rmtree(run, ignore_errors=True)
    return result


def read_costs(seed: int, reads: int = 30) -> dict[str, Any]:
    """Per probe, in this process: channels, and ms per read (mean of ``reads`` reads
    10 ms apart) on a fresh tree, with the C reader where built (``USE_NATIVE``)."""
    import importlib.util

    import numpy as np

    from reveal.collect import _procfs
    from reveal.collect.probe import REGISTRY
    from reveal.collect.runner import registered_probes

    spec = importlib.util.spec_from_file_location("bighost_make_tree", MAKE_TREE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    registered_probes()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    tree = Path(tempfile.mkdtemp(prefix="reveal-bighost-", dir=shm))
    out: dict[str, Any] = {"native": _procfs.native_available()}
    try:
        module.make_tree(tree, seed=seed)
        for name in PROBES:
            for extra in ([{"detail": "totals"}, {"detail": "full"}]
                          if name == "interrupts" else [{}]):
                probe = REGISTRY[name](proc_root=str(tree / "proc"),
                                       sys_root=str(tree / "sys"), **extra)
                probe.open()
                row = np.full(len(probe.channels), np.nan)
                spent = 0.0
                for _ in range(reads):
                    time.sleep(0.01)
                    t0 = time.perf_counter()
                    probe.read(row)
                    spent += time.perf_counter() - t0
                key = name + (f" detail={extra['detail']}" if extra else "")
                out[key] = {"channels": len(probe.channels),
                            "read_ms": round(1e3 * spent / reads, 3),
                            "c_ticks": probe.native_parts() is not None}
                probe.close()
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per run")
    parser.add_argument("--interval", type=float, default=0.1, help="sampling interval, s")
    parser.add_argument("--tick-every", type=float, default=1.0,
                        help="seconds between two advances of the tree's counters")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds left out of the CPU figure at the start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--details", default="auto,full",
                        help="interrupts detail of each run, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/bighost.json")
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="reveal-bench-bighost-"))
    result: dict[str, Any] = {
        "bench": "bighost", "started_unix": time.time(),
        "command": " ".join(["python", "bench/bench_bighost.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "host": socket.gethostname(), "n_cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(), "interval_s": args.interval,
        "duration_s": args.duration, "tree_tick_every_s": args.tick_every,
        "simulated": {"cpus": 256, "nics": 64, "disks": 64, "numa_nodes": 8,
                      "irq_rows_per_cpu": 409},
        "runs": [],
    }
    try:
        result["read_ms_by_probe"] = read_costs(args.seed)
        for detail in args.details.split(","):
            print(f"bench_bighost: interrupts detail={detail}, {args.duration:g} s",
                  file=sys.stderr)
            result["runs"].append(one_run(work, detail.strip(), args))
    finally:
        if args.keep:
            result["work_dir"] = str(work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["loadavg_end"] = os.getloadavg()
    write_result(args.out, result, arguments(args), script_argv(__file__, argv), indent=2)
    for run in result["runs"]:
        print(f"detail={run['interrupts_detail']}: {run['channels']} channels, "
              f"{run['collector_cpu_pct_core']} % of a core ({run['ticks_taken_by']}), "
              f"{run['missed_ticks']} missed, read p50/p99 {run['read_latency_ms_p50']}/"
              f"{run['read_latency_ms_p99']} ms, "
              f"{run['storage']['bytes_per_value']:.3f} B/value", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
