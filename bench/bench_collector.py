"""Collector cost, storage and timing against node_exporter, in one run.

Phase 1 (idle, ``--idle-duration``): ``reveal collect`` alone, with its own tick-lag channel,
on an otherwise idle host (as idle as a shared machine gets): tick jitter and CPU.
Phase 0 (``--floor-duration``): the host floor, a C thread waking on the same grid that
reads nothing: the wake-up lag no collector can go below on this host, and what waking
alone costs.
Phase 2 (``--breakdown-duration``): the collector in this process, with the CPU time of each
of its threads measured apart (schedstat): the C thread that takes the ticks, the main
thread that drains, journals and refreshes, the segment writer.
Phase 3 (loaded, ``--duration``): a bounded workload (stress-ng at a fixed CPU load plus a
Python loop churning memory, disk and loopback network), ``reveal collect`` at the interval,
and node_exporter (Debian ``prometheus-node-exporter``, default collectors, on a loopback
port) scraped at the same interval by a minimal keep-alive HTTP scraper. CPU is
utime+stime of each process tree from /proc/PID/stat (children included) per wall second,
over the steady state (after a warm-up); the scraper's cost is reported apart from
node_exporter's. Storage is the closed Parquet segments' bytes per stored value.

    python bench/bench_collector.py --duration 600            # the full figures
    python bench/bench_collector.py --duration 30 --idle-duration 15 --out /tmp/smoke.json

Writes JSON to ``bench/results/collector.json`` (``--out``).
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
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from provenance import arguments, script_argv, write_result
from reveal.store.run_reader import read_run

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGETS = {"channels_min": 900, "collector_cpu_pct_max": 0.4, "node_exporter_ratio_min": 15.0,
           "bytes_per_value_max": 0.5, "idle_jitter_p99_ms_max": 5.0}

SCRAPER = r"""
import http.client, json, signal, sys, time
port, interval, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
n, nbytes, lines, spent, errors = 0, 0, 0, 0.0, 0
start = time.monotonic()
k = 0
while not stop:
    k += 1
    deadline = start + k * interval
    delay = deadline - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    else:
        k = int((time.monotonic() - start) / interval)
    t0 = time.monotonic()
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
    except (OSError, http.client.HTTPException):
        errors += 1
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        continue
    spent += time.monotonic() - t0
    n += 1
    nbytes += len(body)
    if n == 1:
        lines = sum(1 for x in body.split(b"\n") if x and not x.startswith(b"#"))
with open(out, "w") as f:
    json.dump({"scrapes": n, "errors": errors, "bytes": nbytes, "series": lines,
               "scrape_ms_mean": 1e3 * spent / max(n, 1)}, f)
"""

CHURN = r"""
import os, signal, socket, sys, time
path, stop_at = sys.argv[1], time.monotonic() + float(sys.argv[2])
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
blob = os.urandom(1 << 16)
i = 0
while time.monotonic() < stop_at:
    i += 1
    if i % 20 == 0:                       # every ~2 s: 64 MiB touched, then freed
        buf = bytearray(64 << 20)
        for j in range(0, len(buf), 4096):
            buf[j] = 1
        del buf
    with open(path, "wb") as f:           # 1 MiB written and synced every ~100 ms
        for _ in range(16):
            f.write(blob)
        os.fsync(f.fileno())
    for _ in range(50):                   # loopback UDP packets
        sock.sendto(blob[:1200], ("127.0.0.1", 9))
    time.sleep(0.1)
"""


# -- process accounting ------------------------------------------------------------------

def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, utime+stime+cutime+cstime seconds) of ``pid``, None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / CLK_TCK


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants (dead ones are in cutime/cstime)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(int(entry))
            if got is not None:
                parents[int(entry)], cpu[int(entry)] = got
    total, todo, seen = 0.0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in cpu:
            continue
        seen.add(pid)
        total += cpu[pid]
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total


class Meter:
    """CPU share of one process tree between ``start()`` and ``stop()`` (% of one core)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.t0 = self.c0 = self.t1 = self.c1 = 0.0

    def start(self) -> None:
        self.t0, self.c0 = time.monotonic(), tree_cpu_s(self.pid)

    def stop(self) -> None:
        self.t1, self.c1 = time.monotonic(), tree_cpu_s(self.pid)

    @property
    def pct(self) -> float:
        return 100.0 * (self.c1 - self.c0) / max(self.t1 - self.t0, 1e-9)


# -- helpers ------------------------------------------------------------------------------

def _collector(run: Path, interval: float, extra: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "reveal.cli", "collect", "--out", str(run), "--quiet",
         "--interval", str(interval), "--self-channels", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _wait_started(run: Path, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"collector exited: {proc.communicate()[1][-2000:]}")
        try:
            if json.loads((run / "meta.json").read_text()).get("start_mono_ns"):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise RuntimeError("collector did not start")


def _stop(proc: subprocess.Popen, timeout_s: float = 120) -> str:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err or ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"node_exporter did not listen on {port}")


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else float("nan")


def storage(run: Path) -> dict[str, Any]:
    """Bytes per stored value of the closed segments (a value: one channel at one tick)."""
    files = sorted((run / "segments").glob("*.parquet"))
    size = sum(p.stat().st_size for p in files)
    values = 0
    for path in files:
        md = pq.ParquetFile(path).metadata
        values += md.num_rows * (md.num_columns - 1)
    return {"segments": len(files), "bytes": size, "values": values,
            "bytes_per_value": size / values if values else float("nan"),
            "journals_left": sum(len(list((run / "journal").glob(pattern)))
                                 for pattern in ("*.journal", "*.arrows"))}


def run_summary(run: Path, warmup_s: float) -> dict[str, Any]:
    tel = read_run(run)
    meta = tel.meta
    stats = meta.get("stats", {})
    t = (tel.timestamps_ns - tel.timestamps_ns[0]) / 1e9
    steady = t >= warmup_s
    lag = tel.column("reveal.tick_lag_s")[steady] * 1e3
    latency = tel.column("reveal.sample_latency_s")[steady] * 1e3
    return {
        "samples": tel.n_samples, "channels": tel.n_channels - 3,
        "channels_by_probe": {k: v.get("channels", 0) for k, v in meta["probes"].items()},
        "probe_status": {k: v.get("status") for k, v in meta["probes"].items()},
        "missed_ticks": stats.get("missed_ticks"),
        "dropped_samples": stats.get("dropped_samples"),
        "jitter_ms_p50": _pct(lag, 0.5), "jitter_ms_p99": _pct(lag, 0.99),
        "jitter_ms_max": float(lag.max()) if len(lag) else float("nan"),
        "latency_ms_p50": _pct(latency, 0.5), "latency_ms_p99": _pct(latency, 0.99),
        "collector_cpu_s_total": stats.get("cpu_s"),
        "max_rss_mb": round(stats.get("max_rss_bytes", 0) / 2**20, 1),
    }


# -- phases ---------------------------------------------------------------------------------

def idle_phase(work: Path, seconds: float, interval: float, warmup_s: float) -> dict[str, Any]:
    run = work / "idle"
    proc = _collector(run, interval, [])
    _wait_started(run, proc)
    meter = Meter(proc.pid)
    time.sleep(warmup_s)
    meter.start()
    time.sleep(max(seconds - warmup_s, 1.0))
    meter.stop()
    err = _stop(proc)
    if proc.returncode != 0:
        raise RuntimeError(f"collector failed: {err[-2000:]}")
    out = run_summary(run, warmup_s)
    out.update(duration_s=seconds, collector_cpu_pct_core=meter.pct,
               loadavg_end=os.getloadavg())
    return out


def loaded_phase(work: Path, seconds: float, interval: float, warmup_s: float,
                 cpu_load: int) -> dict[str, Any]:
    run = work / "loaded"
    procs: list[subprocess.Popen] = []
    port = _free_port()
    try:
        stress = subprocess.Popen(
            ["stress-ng", "--cpu", "1", "--cpu-load", str(cpu_load), "--timeout",
             f"{int(seconds + 120)}s", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(stress)
        churn = subprocess.Popen([sys.executable, "-c", CHURN, str(work / "churn.bin"),
                                  str(seconds + 120)])
        procs.append(churn)
        node = subprocess.Popen(
            ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(node)
        _wait_port(port)
        scrape_out = work / "scraper.json"
        scraper = subprocess.Popen([sys.executable, "-c", SCRAPER, str(port), str(interval),
                                    str(scrape_out)])
        procs.append(scraper)
        collector = _collector(run, interval, [])
        _wait_started(run, collector)
        meters = {name: Meter(p.pid) for name, p in
                  (("collector", collector), ("node_exporter", node), ("scraper", scraper))}
        time.sleep(warmup_s)
        for meter in meters.values():
            meter.start()
        time.sleep(max(seconds - warmup_s, 1.0))
        for meter in meters.values():
            meter.stop()
        err = _stop(collector)
        if collector.returncode != 0:
            raise RuntimeError(f"collector failed: {err[-2000:]}")
        scraper.send_signal(signal.SIGTERM)
        scraper.wait(timeout=30)
        scrape = json.loads(scrape_out.read_text()) if scrape_out.exists() else {}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    out = run_summary(run, warmup_s)
    ours, theirs = meters["collector"].pct, meters["node_exporter"].pct
    out.update(
        duration_s=seconds,
        workload=f"stress-ng --cpu 1 --cpu-load {cpu_load}; Python loop: 64 MiB touched every "
                 "~2 s, 1 MiB written+fsynced and 50 loopback UDP packets every ~100 ms",
        collector_cpu_pct_core=ours,
        node_exporter={"cpu_pct_core": theirs, "port": port, **scrape,
                       "scrapes_per_s": scrape.get("scrapes", 0) / max(seconds, 1)},
        scraper_cpu_pct_core=meters["scraper"].pct,
        node_exporter_over_collector=theirs / ours if ours > 0 else float("inf"),
        storage=storage(run), loadavg_end=os.getloadavg())
    return out


def _thread_cpu_ns(skip: int | None = None) -> dict[str, int]:
    """CPU ns of each live thread of this process (but ``skip``), summed by thread name
    (the main thread is "main"); also "NAME kernel": its system time (tick-sampled)."""
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        if skip is not None and int(tid) == skip:
            continue
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
            stat = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue
        name = "main" if int(tid) == os.getpid() else name
        out[name] = out.get(name, 0) + ns
        kernel = f"{name} kernel"
        out[kernel] = out.get(kernel, 0) + int(stat[12]) * 1_000_000_000 // CLK_TCK
    return out


class ThreadMeter(threading.Thread):
    """Snapshots this process's threads' CPU ``warmup_s`` after starting and again
    ``seconds`` later, from a thread of its own (left out of the figures)."""

    def __init__(self, warmup_s: float, seconds: float, ticks: Any) -> None:
        super().__init__(daemon=True)
        self.warmup_s, self.seconds, self.ticks = warmup_s, seconds, ticks
        self.snapshots: list[tuple[int, int, dict[str, int]]] = []

    def run(self) -> None:
        me = threading.get_native_id()
        time.sleep(self.warmup_s)
        self.snapshots.append((time.monotonic_ns(), self.ticks(), _thread_cpu_ns(me)))
        time.sleep(self.seconds)
        self.snapshots.append((time.monotonic_ns(), self.ticks(), _thread_cpu_ns(me)))

    def result(self) -> dict[str, Any]:
        if len(self.snapshots) < 2:
            return {"skipped": "the run ended before the second snapshot"}
        (t0, k0, a), (t1, k1, b) = self.snapshots
        wall_s, ticks = (t1 - t0) / 1e9, max(k1 - k0, 1)
        spent = {name: (b.get(name, 0) - a.get(name, 0)) / 1e9 for name in b}
        kernel = {name.removesuffix(" kernel"): spent.pop(name) for name in list(spent)
                  if name.endswith(" kernel")}
        return {
            "duration_s": round(wall_s, 2), "ticks": ticks,
            "process_pct_core": 100 * sum(spent.values()) / wall_s,
            "kernel_share": {k: round(kernel[k] / v, 3) for k, v in spent.items()
                             if v > 0 and k in kernel},
            "threads": {k: {"us_per_tick": round(1e6 * v / ticks, 1),
                            "pct_core": round(100 * v / wall_s, 4)}
                        for k, v in sorted(spent.items(), key=lambda kv: -kv[1])},
        }


def breakdown_phase(work: Path, seconds: float, interval: float,
                    warmup_s: float) -> dict[str, Any]:
    """In-process: CPU of each thread of the collector per tick (µs) and as % of one core
    (schedstat, exact): ``reveal-ticks`` is the C thread reading every probe; ``main``
    drains it, journals and refreshes (or, on the Python loop, reads every probe); the rest
    is the segment writer and allocators."""
    from reveal.collect.runner import CollectOptions, Collector

    collector = Collector(CollectOptions(out=work / "breakdown", interval_s=interval,
                                         duration_s=seconds))
    collector.open()
    assert collector.sampler is not None
    sampler = collector.sampler
    meter = ThreadMeter(warmup_s, max(seconds - warmup_s - 2.0, 1.0),
                        lambda: sampler.stats.samples)
    meter.start()
    collector.run()
    meter.join()
    return {"ticks_taken_by": sampler.mode, "channels": len(sampler.channels),
            **meter.result()}


def host_floor_phase(seconds: float, interval: float) -> dict[str, Any]:
    """A C thread that only wakes on the same grid and reads nothing: the host's own
    wake-up lag (what no collector can go below) and the CPU cost of waking alone."""
    from reveal.collect import _procfs

    native = _procfs._procread
    if native is None or not hasattr(native, "Ticker"):
        return {"skipped": "C extension not built"}
    interval_ns = round(interval * 1e9)
    capacity = int(seconds / interval) + 16
    me = threading.get_native_id()
    ticker = native.Ticker([], 0, time.monotonic_ns() + interval_ns, interval_ns, capacity)
    try:
        before = _thread_cpu_ns(me)
        time.sleep(seconds)
        after = _thread_cpu_ns(me)  # while the thread is alive
    finally:
        ticker.close()
    buffers = (np.zeros(capacity, np.int64), np.zeros((capacity, 0)), np.zeros(capacity),
               np.zeros(capacity), np.zeros(capacity, np.int64))
    got, _ = ticker.drain(*buffers)
    lag = buffers[3][:got] * 1e3
    woke = after.get("reveal-ticks", 0) - before.get("reveal-ticks", 0)  # schedstat ns
    return {"duration_s": seconds, "ticks": int(got), "lag_ms_p50": _pct(lag, 0.5),
            "lag_ms_p99": _pct(lag, 0.99), "lag_ms_max": float(lag.max()) if got else None,
            "wake_only_pct_core": 100 * woke / 1e9 / seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0,
                        help="seconds of the loaded phase (≥ 600 for the storage figure)")
    parser.add_argument("--idle-duration", type=float, default=60.0,
                        help="seconds of the idle phase (0 to skip)")
    parser.add_argument("--interval", type=float, default=0.1, help="sampling interval, s")
    parser.add_argument("--breakdown-duration", type=float, default=30.0,
                        help="seconds of the in-process per-part CPU breakdown (0 to skip)")
    parser.add_argument("--floor-duration", type=float, default=60.0,
                        help="seconds of the host floor: a C thread waking on the grid and "
                             "reading nothing (0 to skip)")
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds ignored at the start of each phase")
    parser.add_argument("--cpu-load", type=int, default=30,
                        help="stress-ng --cpu-load percent of the workload")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/collector.json")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    args = parser.parse_args(argv)
    for tool in ("prometheus-node-exporter", "stress-ng"):
        if shutil.which(tool) is None:
            print(f"bench_collector: {tool} not installed", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="reveal-bench-"))
    started = time.time()
    started_mono = time.monotonic()
    try:
        result: dict[str, Any] = {
            "bench": "collector", "started_unix": started, "interval_s": args.interval,
            "command": " ".join(["python", "bench/bench_collector.py",
                                 *(argv if argv is not None else sys.argv[1:])]),
            "host": socket.gethostname(), "n_cpus": os.cpu_count(),
            "loadavg_start": os.getloadavg(),
            "note": "CPU is % of one core from /proc/PID/stat (process trees) over the "
                    "steady state; breakdown and host floor from schedstat; on a shared VM "
                    "CPU and jitter figures vary about ±15 % from run to run",
        }
        if args.floor_duration > 0:
            print(f"bench_collector: host floor, {args.floor_duration:.0f} s", file=sys.stderr)
            result["host_floor"] = host_floor_phase(args.floor_duration, args.interval)
        if args.idle_duration > 0:
            print(f"bench_collector: idle phase, {args.idle_duration:.0f} s", file=sys.stderr)
            result["idle"] = idle_phase(work, args.idle_duration, args.interval, args.warmup)
        if args.breakdown_duration > 0:
            print(f"bench_collector: cost breakdown, {args.breakdown_duration:.0f} s",
                  file=sys.stderr)
            result["breakdown"] = breakdown_phase(work, args.breakdown_duration,
                                                  args.interval, min(args.warmup, 5.0))
        print(f"bench_collector: loaded phase, {args.duration:.0f} s", file=sys.stderr)
        loaded = loaded_phase(work, args.duration, args.interval, args.warmup, args.cpu_load)
        result["loaded"] = loaded
        idle = result.get("idle", {})
        measured = {
            "channels_min": loaded["channels"],
            "collector_cpu_pct_max": loaded["collector_cpu_pct_core"],
            "node_exporter_ratio_min": loaded["node_exporter_over_collector"],
            "bytes_per_value_max": loaded["storage"]["bytes_per_value"],
            "idle_jitter_p99_ms_max": idle.get("jitter_ms_p99", float("nan")),
        }
        result["targets"] = {
            key: {"target": TARGETS[key], "measured": value,
                  "met": bool(value >= TARGETS[key] if key.endswith("_min")
                              else value <= TARGETS[key])}
            for key, value in measured.items()}
        result["storage_over_10_min"] = args.duration >= 600
        result["wall_s"] = time.time() - started
    finally:
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for sub in ("idle", "loaded"):
                if (work / sub).exists():
                    shutil.copytree(work / sub, args.keep / sub, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    write_result(args.out, result, {**arguments(args), "targets": TARGETS},
                 script_argv(__file__, argv), started_mono, indent=2, default=float)
    print(json.dumps(result["targets"], indent=2), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
