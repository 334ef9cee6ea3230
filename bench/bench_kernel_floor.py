"""The kernel's floor under any collector of this host's sources, at the collector's rate.

Opens the collector's default probes (as ``reveal collect`` would), lists the files they
read every tick, and runs ``bench/kernel_floor.c`` (built here with the system C compiler):
a loop that preads every one of those files to end of file on the same 100 ms grid, and
reads the perf probe's counter groups (one group read per CPU and group, on descriptors
this benchmark opens as the probe does and the loop inherits), and does nothing else.
Its CPU (user and system, getrusage) is what the kernel spends producing the text plus
the cost of waking up: no collector that reads these sources every tick can cost less on
this host. Per file, the thread CPU time of one read (µs) and its size (bytes).

By default (``--no-collector`` turns it off), ``reveal collect`` with the same probes at the
same interval runs at the same time as the loop, so that both see the same host: the CPU
of each process (every thread, from /proc/PID/task/*/schedstat, nanoseconds on CPU) over the
same steady window, and their ratio: what the collector costs above the kernel's own work.

    python bench/bench_kernel_floor.py --seconds 180    # → bench/results/kernel_floor.json
    python bench/bench_kernel_floor.py --seconds 20 --out /tmp/floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import arguments, script_argv, write_result

ROOT = Path(__file__).resolve().parent.parent


def collector_files(interval_s: float = 0.1) -> tuple[list[str], int]:
    """The files the default probes read (``"PATH"`` every tick, ``"PATH\tN"`` one tick in
    N, as the collector reads a part with a period), and their channel count."""
    from reveal.collect.runner import CollectOptions, Collector

    work = Path(tempfile.mkdtemp(prefix="reveal-floor-"))
    collector = Collector(CollectOptions(out=work / "run", duration_s=0.1))
    collector.open()
    try:
        assert collector.sampler is not None
        paths: list[str] = []
        for probe in collector.sampler.probes:
            for key, part in getattr(probe, "_parts", {}).items():
                every = max(1, round(probe._period(key) / interval_s))
                suffix = f"\t{every}" if every > 1 else ""
                part = getattr(part, "group", part)  # a part may wrap its file group
                for handle, _ in getattr(part, "_live", []):
                    paths.append(handle.path + suffix)
                single = getattr(part, "_file", None)
                reader = getattr(part, "native_reader", lambda: None)()
                # a file read each tick by a C plan (a values array is copied, not read)
                if single is not None and reader is not None and not hasattr(reader, "dtype"):
                    paths.append(single.path + suffix)
        return paths, len(collector.sampler.channels)
    finally:
        collector.close()
        shutil.rmtree(work, ignore_errors=True)


def perf_group_fds() -> tuple[Any, list[int]]:
    """The perf probe opened here as the collector opens it, and its group leaders' fds:
    the loop reads them too (a group read per CPU and group each tick), so that the floor
    holds the kernel's cost of the perf counters as well. ``(None, [])`` without perf."""
    from reveal.collect.perf import PerfProbe
    from reveal.collect.probe import ProbeUnavailable

    probe = PerfProbe()
    try:
        probe.open()
    except (ProbeUnavailable, OSError):
        return None, []
    return probe, [group.fd for group in probe._groups]


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """Nanoseconds on CPU of every live thread of ``pid`` (schedstat), by ``name:tid``."""
    found: dict[str, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                ns = int(handle.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/comm", "rb") as handle:
                name = handle.read().decode("ascii", "replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        found[f"{name}:{tid}"] = ns
    return found


def process_cpu_ns(pid: int) -> int:
    """Nanoseconds on CPU of every live thread of ``pid`` (schedstat), 0 once it is gone."""
    return sum(thread_cpu_ns(pid).values())


def side_by_side(binary: Path, paths: list[str], seconds: float, interval: float,
                 warmup_s: float, work: Path, extra: list[str],
                 pass_fds: tuple[int, ...] = ()) -> dict[str, Any]:
    """The floor loop and ``reveal collect`` at once; CPU of each over one steady window."""
    run = work / "run"
    collector = subprocess.Popen(
        [sys.executable, "-m", "reveal.cli", "collect", "--interval", str(interval),
         "--duration", str(seconds + warmup_s + 5), "--out", str(run), "--quiet", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loop = subprocess.Popen([str(binary), str(seconds + warmup_s + 5),
                             str(round(interval * 1e3))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, pass_fds=pass_fds)
    assert loop.stdin is not None
    loop.stdin.write("\n".join(paths) + "\n")
    loop.stdin.close()
    time.sleep(warmup_s)  # the collector's imports and probe opening are not the steady cost
    threads_before = thread_cpu_ns(collector.pid)
    before = (process_cpu_ns(collector.pid), process_cpu_ns(loop.pid), time.monotonic())
    time.sleep(seconds)
    after = (process_cpu_ns(collector.pid), process_cpu_ns(loop.pid), time.monotonic())
    threads_after = thread_cpu_ns(collector.pid)
    loop.wait()
    _, err = collector.communicate(timeout=120)
    if collector.returncode != 0 or before[0] == 0 or after[0] == 0:
        raise RuntimeError(f"the collector failed (exit {collector.returncode}): {err[-500:]}")
    wall = after[2] - before[2]
    collector_pct = 100 * (after[0] - before[0]) / 1e9 / wall
    floor_pct = 100 * (after[1] - before[1]) / 1e9 / wall
    meta = json.loads((run / "meta.json").read_text())
    by_thread: dict[str, float] = {}
    for key, ns in threads_after.items():
        name = key.split(":")[0]
        spent = 100 * (ns - threads_before.get(key, 0)) / 1e9 / wall
        by_thread[name] = round(by_thread.get(name, 0.0) + spent, 4)
    return {"window_s": round(wall, 2), "collector_pct_core": round(collector_pct, 4),
            "collector_pct_core_by_thread": by_thread,
            "floor_pct_core": round(floor_pct, 4),
            "ratio": round(collector_pct / floor_pct, 3) if floor_pct > 0 else None,
            "collector_channels": meta.get("n_channels"),
            "collector_missed_ticks": meta.get("stats", {}).get("missed_ticks"),
            "collector_ticks_taken_by": meta.get("stats", {}).get("ticks_taken_by")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the loop")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between reads")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/kernel_floor.json")
    parser.add_argument("--no-collector", dest="beside", action="store_false",
                        help="the loop alone (default: beside `reveal collect`, same window)")
    parser.add_argument("--warmup", type=float, default=30.0,
                        help="seconds before the side-by-side window opens")
    parser.add_argument("--repeat", type=int, default=3,
                        help="side-by-side windows, each with a fresh collector and loop; "
                             "the median ratio is the figure (this VM's noise is large)")
    parser.add_argument("--collect-arg", action="append", default=[], metavar="ARG",
                        help="an argument for the collector beside the loop (repeat), e.g. "
                             "--collect-arg=--refresh --collect-arg=30")
    args = parser.parse_args(argv)
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        print("bench_kernel_floor: no C compiler (cc or gcc) found", file=sys.stderr)
        return 2
    paths, channels = collector_files(args.interval)
    with tempfile.TemporaryDirectory(prefix="reveal-floor-") as tmp:
        binary = Path(tmp) / "kernel_floor"
        subprocess.run([compiler, "-O2", "-o", str(binary), str(ROOT / "bench/kernel_floor.c")],
                       check=True)
        print(f"bench_kernel_floor: {len(paths)} files, {args.seconds:.0f} s",
              file=sys.stderr)
        perf, perf_fds = perf_group_fds()
        paths = paths + [f"fd:{fd}" for fd in perf_fds]
        done = subprocess.run([str(binary), str(args.seconds), str(round(args.interval * 1e3))],
                              input="\n".join(paths) + "\n", capture_output=True, text=True,
                              check=True, pass_fds=tuple(perf_fds))
        beside = None
        if args.beside:
            print(f"bench_kernel_floor: beside reveal collect, {args.seconds:.0f} s",
                  file=sys.stderr)
            windows = []
            for i in range(max(1, args.repeat)):
                work = Path(tmp) / f"window-{i}"
                work.mkdir()
                windows.append(side_by_side(binary, paths, args.seconds, args.interval,
                                            args.warmup, work, args.collect_arg,
                                            tuple(perf_fds)))
                print(json.dumps(windows[-1]), file=sys.stderr)
            ratios = sorted(w["ratio"] for w in windows if w["ratio"] is not None)
            beside = {"median_ratio": ratios[len(ratios) // 2] if ratios else None,
                      "ratios": [w["ratio"] for w in windows], "windows": windows,
                      "warmup_s": args.warmup, "collect_args": args.collect_arg}
        if perf is not None:
            perf.close()
    loop: dict[str, Any] = json.loads(done.stdout)
    loop["perf_group_reads_per_tick"] = len(perf_fds)
    per_file = loop.pop("per_file_us")
    result = {
        "bench": "kernel_floor", "started_unix": time.time(), "host": socket.gethostname(),
        "n_cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
        "interval_s": args.interval, "collector_channels": channels, **loop,
        "per_tick_us": round(sum(v[0] / v[2] for v in per_file.values()), 1),
        "per_file": {k: {"us_per_read": v[0], "bytes": v[1], "read_every_ticks": v[2]}
                     for k, v in sorted(per_file.items(), key=lambda kv: -kv[1][0])},
        "note": "pct_core is user+system of a loop that only preads the files every "
                "interval: the floor under any collector of these sources on this host",
    }
    if beside is not None:
        result["beside_collector"] = beside
    write_result(args.out, result, arguments(args), script_argv(__file__, argv), indent=2)
    print(json.dumps({k: result[k] for k in ("files", "pct_core", "user_s", "system_s",
                                             "per_tick_us")}), file=sys.stderr)
    if beside is not None:
        print(json.dumps({k: beside[k] for k in ("median_ratio", "ratios")}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
