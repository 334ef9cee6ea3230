"""The whole collector's CPU on a host with containers, beside the same host without them.

Condition ``containers``: 20 network namespaces, each joined to the host by a veth pair
(host end ``rvb<pid>h<i>``, 10.79.<i>.1/30; namespace end 10.79.<i>.2/30) with a process
inside (as a container has), traffic to every namespace (a host process sending a UDP
datagram of 1 KB to each, 50 times a second), and 50 cgroups (``rvinj-<pid>-bench-<i>`` in
every v1 controller hierarchy and the v2 root), 20 of them holding a namespace's process.
Condition ``bare``: none of that. Both run ``reveal collect`` with the default probes at
100 ms (the default refresh period); more conditions with the containers present tell the parts
apart: the collector without the ``netns`` and ``qdisc`` probes, without the ``cgroup``
probe, and with the namespaces' links or the cgroups' every-tick counters read every 0.5 s
(``--conditions`` picks). The
conditions take turns (the order rotated each repetition), each
with a fresh collector, so all see the same host in the same minutes. CPU is utime+stime
of the collector process (every thread, ended ones included) per wall second over
``--seconds`` after ``--warmup``; each thread's share (schedstat) too.

    python bench/bench_containers.py                       # 3 × 5 windows of 60 s
    python bench/bench_containers.py --reps 1 --seconds 20 --out /tmp/smoke.json

Everything made is named ``rvinj-<pid>-…`` / ``rvb<pid>…``, removed at the end, on SIGTERM,
and by ``reveal validate --cleanup`` after a SIGKILL. Needs root. Writes
``bench/results/containers.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from reveal.collect.cgroup import cgroup_mounts
from reveal.collect.runner import CollectOptions
from reveal.inject.cleanup import install_signal_handlers
from reveal.inject.naming import owned_name
from reveal.inject.undo import UNDO

ROOT = Path(__file__).resolve().parents[1]
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_PCT = 1.5
N_NAMESPACES, N_CGROUPS = 20, 50

TRAFFIC = r"""
import socket, sys, time
n, rate = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = b"x" * 1000
next_at = time.monotonic()
while True:
    for i in range(n):
        s.sendto(payload, (f"10.79.{i}.2", 9))
    next_at += 1 / rate
    time.sleep(max(0.0, next_at - time.monotonic()))
"""


def sh(*argv: str, check: bool = True) -> None:
    subprocess.run(argv, check=check, capture_output=True)


class Containers:
    """The namespaces, veth pairs, processes, cgroups and traffic of the loaded condition."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.namespaces = [owned_name(f"bench-ns{i}") for i in range(N_NAMESPACES)]
        self.host_ends = [f"rvb{pid}h{i}"[:15] for i in range(N_NAMESPACES)]
        mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
        self.roots = sorted({Path(p) for k, p in mounts.items()
                             if k in ("v2", "cpu", "cpuacct", "memory", "blkio", "pids")})
        self.cgroups = [owned_name(f"bench-{i}") for i in range(N_CGROUPS)]
        self.holders: list[subprocess.Popen] = []
        self.traffic: subprocess.Popen | None = None
        self._undo: int | None = None

    def create(self) -> None:
        self._undo = UNDO.push("bench containers", self.remove)
        for root in self.roots:
            for name in self.cgroups:
                with contextlib.suppress(OSError):
                    (root / name).mkdir()
        for i, (ns, host) in enumerate(zip(self.namespaces, self.host_ends, strict=True)):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "addr", "add", f"10.79.{i}.1/30", "dev", host)
            sh("ip", "link", "set", host, "up")
            sh("ip", "-n", ns, "addr", "add", f"10.79.{i}.2/30", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            holder = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec",
                                       ns, "sleep", "100000"])
            self.holders.append(holder)
        time.sleep(0.5)
        for holder, name in zip(self.holders, self.cgroups, strict=False):
            for root in self.roots:
                with contextlib.suppress(OSError):
                    (root / name / "cgroup.procs").write_text(str(holder.pid))
        self.traffic = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", sys.executable,
                                         "-c", TRAFFIC, str(N_NAMESPACES), "50"])

    def remove(self) -> None:
        for proc in [*self.holders, *([self.traffic] if self.traffic else [])]:
            with contextlib.suppress(OSError):
                proc.kill()
            proc.wait()
        self.holders, self.traffic = [], None
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)
        for host in self.host_ends:
            sh("ip", "link", "del", host, check=False)
        for root in self.roots:
            for name in self.cgroups:
                for _ in range(50):
                    try:
                        (root / name).rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.02)

    def close(self) -> None:
        if self._undo is not None:
            UNDO.pop(self._undo, run=True)
            self._undo = None


def process_cpu_s(pid: int) -> float:
    """utime + stime of every thread of ``pid``, ended ones included, seconds."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def threads_ns(pid: int) -> dict[str, int]:
    """CPU ns of each live thread of ``pid`` by name (schedstat)."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue
        name = "main" if int(tid) == pid else name
        out[name] = out.get(name, 0) + ns
    return out


#: name → (containers present, extra ``reveal collect`` arguments)
CONDITIONS: dict[str, tuple[bool, list[str]]] = {
    "bare": (False, []),
    "containers": (True, []),
    "containers, without netns and qdisc": (True, ["--exclude", "netns,qdisc"]),
    "containers, without cgroup": (True, ["--exclude", "cgroup"]),
    "containers, namespace links every 0.5 s": (
        True, ["--probe-option", "netns.link_interval_s=0.5"]),
    "containers, cgroup counters every 0.5 s": (
        True, ["--probe-option", "cgroup.tick_period_s=0.5"]),
    "containers, cgroup counters and namespace links every 0.5 s": (
        True, ["--probe-option", "cgroup.tick_period_s=0.5",
               "--probe-option", "netns.link_interval_s=0.5"]),
}


def window(condition: str, warmup: float, seconds: float, work: Path, k: int
           ) -> dict[str, Any]:
    run = work / f"{condition.replace(' ', '_').replace(',', '')}-{k}"
    proc = subprocess.Popen([sys.executable, "-m", "reveal.cli", "collect", "--out", str(run),
                             "--quiet", "--interval", "0.1", *CONDITIONS[condition][1]],
                            cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(warmup)
        if proc.poll() is not None:
            raise RuntimeError(proc.communicate()[1][-2000:])
        c0, t0, th0 = process_cpu_s(proc.pid), time.monotonic(), threads_ns(proc.pid)
        time.sleep(seconds)
        c1, t1, th1 = process_cpu_s(proc.pid), time.monotonic(), threads_ns(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    wall = t1 - t0
    meta = json.loads((run / "meta.json").read_text())
    probes = meta.get("probes", {})
    stats = meta.get("stats", {})
    return {
        "condition": condition,
        "pct_core": round(100 * (c1 - c0) / wall, 3),
        "seconds": round(wall, 1),
        "threads_pct_core": {name: round(100 * (th1[name] - th0.get(name, 0)) / 1e9 / wall, 4)
                             for name in sorted(th1, key=lambda n: th0.get(n, 0) - th1[n])},
        "channels": meta.get("channel_count") or sum(
            int(p.get("channels", 0)) for p in probes.values() if isinstance(p, dict)),
        "channels_by_probe": {n: p.get("channels") for n, p in probes.items()
                              if isinstance(p, dict)},
        "netns": {k: probes.get("netns", {}).get("info", {}).get(k)
                  for k in ("namespaces_dropped", "released_early")}
        | {"namespaces": len(probes.get("netns", {}).get("info", {}).get("namespaces", {}))},
        "qdisc_status": probes.get("qdisc", {}).get("status"),
        "ticks_taken_by": stats.get("ticks_taken_by"),
        "missed_ticks": stats.get("missed_ticks"),
        "samples": stats.get("samples"),
        "load_avg_after": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "containers.json"))
    parser.add_argument("--conditions", default=";".join(CONDITIONS),
                        help="which conditions, separated by ';' (their names hold commas; "
                             "default: all; 'bare' and 'containers' are always run)")
    args = parser.parse_args(argv)
    chosen = [c.strip() for c in args.conditions.split(";") if c.strip()]
    unknown = [c for c in chosen if c not in CONDITIONS]
    if unknown:
        parser.error(f"unknown conditions {unknown}; known: {list(CONDITIONS)}")
    chosen = list(dict.fromkeys(["bare", "containers", *chosen]))
    if os.geteuid() != 0:
        print("needs root (namespaces, veth pairs, cgroups)", file=sys.stderr)
        return 2
    install_signal_handlers()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix=owned_name("bench-runs-"),
                                     dir=tempfile.gettempdir()) as tmp:
        work = Path(tmp)
        names = chosen
        for k in range(args.reps):
            order = names[k % len(names):] + names[: k % len(names)]  # rotated each rep
            for condition in order:
                box = Containers() if CONDITIONS[condition][0] else None
                try:
                    if box is not None:
                        box.create()
                    res = window(condition, args.warmup, args.seconds, work, k)
                finally:
                    if box is not None:
                        box.close()
                results.append(res)
                print(f"{condition:36s} rep {k}: {res['pct_core']:.3f} % of a core, "
                      f"{res['channels']} channels, {res['ticks_taken_by']}", flush=True)
    by = {name: np.array([r["pct_core"] for r in results if r["condition"] == name])
          for name in chosen}
    median = {name: float(np.median(v)) for name, v in by.items()}
    bare, loaded = by["bare"], by["containers"]
    pairs = [loaded[i] / bare[i] for i in range(min(len(bare), len(loaded)))]
    summary = {
        "pct_core_median": {name: round(v, 3) for name, v in median.items()},
        "pct_core_all": {name: [round(float(x), 3) for x in v] for name, v in by.items()},
        "added_by_containers_pct_core": round(median["containers"] - median["bare"], 3),
        "ratio_containers_to_bare_per_rep": [round(float(r), 3) for r in pairs],
        "ratio_containers_to_bare_median": round(float(np.median(pairs)), 3),
        "target_pct_core_max": TARGET_PCT,
        "meets_target": {name: bool(v <= TARGET_PCT) for name, v in median.items()
                         if name != "bare"},
    }
    if "containers, without netns and qdisc" in median:
        summary["added_by_netns_and_qdisc_pct_core"] = round(
            median["containers"] - median["containers, without netns and qdisc"], 3)
    out = {
        "benchmark": "bench_containers",
        "host": os.uname().nodename, "cpus": os.cpu_count(),
        "setup": {"namespaces": N_NAMESPACES, "cgroups": N_CGROUPS, "interval_s": 0.1,
                  "refresh_s": CollectOptions.refresh_s,
                  "traffic": "1 KB UDP datagram to each namespace 50 times a second",
                  "warmup_s": args.warmup, "window_s": args.seconds,
                  "reps": args.reps, "order": "alternating, a fresh collector per window"},
        "summary": summary,
        "windows": results,
    }
    settings = {**arguments(args), "conditions_run": chosen, "namespaces": N_NAMESPACES,
                "cgroups": N_CGROUPS, "interval_s": 0.1, "refresh_s": CollectOptions.refresh_s,
                "target_pct_core_max": TARGET_PCT}
    write_result(args.out, out, settings, script_argv(__file__, argv), indent=2)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
