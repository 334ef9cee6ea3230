"""Per-probe read cost: thread CPU time per read (µs) and channel counts.

Every registered probe available here is opened twice, once on the pure-Python readers
and once with the C reader (``reveal.collect._procread``) where it is built; the two are
read alternately, in short interleaved blocks, so both see the same load on a shared
machine. Thread CPU time (``time.thread_time``) counts user and kernel time of this thread
only: the kernel's cost of generating /proc text is included, other processes are not.

    python bench/bench_probes.py                 # 3000 reads per probe and path, then 60 s
    python bench/bench_probes.py --reads 500 --paced-seconds 20 --out /tmp/probes.json

Back-to-back reads keep caches warm; the paced part reads every probe once per interval
(100 ms), alternating the two paths tick by tick, as the sampler does: caches are then
cold at each tick, which is what the collector really pays.

Writes JSON to ``bench/results/probes.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from reveal.collect import _procfs
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.runner import registered_probes

ROOT = Path(__file__).resolve().parents[1]
SKIP = ("gpu", "gpu_procs", "ebpf")  # no GPU here; eBPF has its own bench


def open_probe(cls: type[Probe], native: bool) -> Probe | None:
    """An opened probe whose file groups use the C reader or not; None if unavailable."""
    _procfs.USE_NATIVE = native and _procfs._procread is not None
    probe = cls()
    try:
        probe.open()
    except (ProbeUnavailable, OSError, ValueError):
        return None
    finally:
        _procfs.USE_NATIVE = _procfs._procread is not None
    return probe


def native_groups(probe: Probe) -> tuple[int, int]:
    """(file groups on the C reader, file groups) of a file probe."""
    parts = getattr(probe, "_parts", {}).values()
    groups = [p for p in parts if isinstance(p, _procfs.FileGroup)]
    return sum(g.native for g in groups), len(groups)


def time_reads(probe: Probe, out: np.ndarray, reads: int) -> float:
    """Thread CPU seconds of ``reads`` reads."""
    read = probe.read
    t0 = time.thread_time()
    for _ in range(reads):
        read(out)
    return time.thread_time() - t0


def paced(classes: dict[str, type[Probe]], ticks: int, interval: float) -> dict[str, Any]:
    """Every probe read once per ``interval`` as the sampler does (caches go cold between
    ticks), alternating the Python and C paths tick by tick; thread CPU µs per read."""
    paths = {"python": False, "native": True} if _procfs._procread is not None else {
        "python": False}
    opened = {key: {n: open_probe(c, native) for n, c in classes.items()}
              for key, native in paths.items()}
    opened = {key: {n: p for n, p in probes.items() if p is not None}
              for key, probes in opened.items()}
    outs = {key: {n: np.empty(len(p.channels)) for n, p in probes.items()}
            for key, probes in opened.items()}
    spent = {key: dict.fromkeys(probes, 0.0) for key, probes in opened.items()}
    clock = time.thread_time
    next_tick = time.monotonic()
    for tick in range(ticks * len(paths)):
        key = list(paths)[tick % len(paths)]
        next_tick += interval / len(paths)
        time.sleep(max(0.0, next_tick - time.monotonic()))
        for name, probe in opened[key].items():
            t0 = clock()
            probe.read(outs[key][name])
            spent[key][name] += clock() - t0
    for probes in opened.values():
        for probe in probes.values():
            probe.close()
    per = {name: {key: round(1e6 * spent[key].get(name, 0.0) / ticks, 1) for key in paths}
           for name in opened["python"]}
    totals = {key: round(sum(v[key] for v in per.values()), 1) for key in paths}
    return {"ticks": ticks, "interval_s": interval, "us_per_read": per,
            "us_per_tick_all_probes": totals}


def measure(cls: type[Probe], reads: int, block: int) -> dict[str, Any] | None:
    paths = {"python": open_probe(cls, False)}
    if _procfs._procread is not None:
        paths["native"] = open_probe(cls, True)
    if paths["python"] is None:
        return None
    outs = {k: np.empty(len(p.channels)) for k, p in paths.items() if p is not None}
    spent = dict.fromkeys(outs, 0.0)
    done = 0
    while done < reads:
        n = min(block, reads - done)
        for key in outs:
            spent[key] += time_reads(paths[key], outs[key], n)  # type: ignore[arg-type]
        done += n
    python = paths["python"]
    result: dict[str, Any] = {
        "channels": len(python.channels), "status": python.status,
        "us_per_read": {k: round(1e6 * v / reads, 1) for k, v in spent.items()},
    }
    if "native" in spent and paths["native"] is not None:
        on, total = native_groups(paths["native"])
        result["native_groups"] = f"{on}/{total}"
        result["speedup"] = round(spent["python"] / max(spent["native"], 1e-12), 2)
        equal = len(paths["native"].channels) == len(python.channels)
        result["same_channels"] = equal
    for probe in paths.values():
        if probe is not None:
            probe.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=3000, help="reads per probe and path")
    parser.add_argument("--block", type=int, default=100, help="reads per interleaved block")
    parser.add_argument("--probes", default="", help="comma-separated names (default: all)")
    parser.add_argument("--paced-seconds", type=float, default=60.0,
                        help="seconds of reads at the sampling interval (0 to skip)")
    parser.add_argument("--interval", type=float, default=0.1, help="paced interval, s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/probes.json")
    args = parser.parse_args(argv)
    wanted = {p for p in args.probes.split(",") if p}
    classes = registered_probes()
    probes: dict[str, Any] = {}
    for name, cls in classes.items():
        if name in SKIP or (wanted and name not in wanted):
            continue
        result = measure(cls, args.reads, args.block)
        if result is None:
            continue
        probes[name] = result
        print(f"{name:12s} {result['channels']:5d} ch  {result['us_per_read']}", file=sys.stderr)
    totals = {k: round(sum(p["us_per_read"].get(k, 0.0) for p in probes.values()), 1)
              for k in ("python", "native") if any(k in p["us_per_read"]
                                                   for p in probes.values())}
    report = {
        "bench": "probes", "started_unix": time.time(),
        "command": "python bench/bench_probes.py " + " ".join(argv or sys.argv[1:]),
        "host": os.uname().nodename, "n_cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
        "note": "thread CPU time per read, the two paths interleaved in blocks of "
                f"{args.block} reads; shared machine, so absolute figures are noisy",
        "native_built": _procfs._procread is not None,
        "channels": sum(p["channels"] for p in probes.values()),
        "us_per_tick_all_probes": totals,
        "probes": probes,
    }
    if args.paced_seconds > 0:
        chosen = {n: c for n, c in classes.items() if n in probes}
        report["paced"] = paced(chosen, int(args.paced_seconds / args.interval / 2),
                                args.interval)
        print("paced:", json.dumps(report["paced"]["us_per_tick_all_probes"]),
              file=sys.stderr)
    write_result(args.out, report, arguments(args), script_argv(__file__, argv), indent=2)
    print(json.dumps({"channels": report["channels"], "us_per_tick": totals}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
