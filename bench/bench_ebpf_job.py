"""End-to-end slowdown of the reference training job under the ``ebpf`` probe.

The reference workload of the validation suite (``torch_train``: a small CNN on sample files
read from disk through a DataLoader; ``numpy_train`` without PyTorch) runs for the whole
benchmark. The real ``EbpfProbe`` is switched on and off in alternating phases (U T, T U,
...), so both conditions see the same job, the same machine and the same page cache; while
on, a reader thread drains it every 100 ms as the collector does. For every phase we keep
the job's training steps per second (wall) and its **CPU seconds per step** (utime + stime
of the job's process from ``/proc/PID/stat``; robust to the other tenants of a shared
machine, and it contains the in-kernel tracing work done in the job's context). Those two
are noisy on a shared VM (a few per cent between phases), so the benchmark also measures the
tracing work itself, exactly: the kernel's run time of the probe's BPF programs
(``run_time_ns`` in ``/proc/PID/fdinfo`` of bpftrace, with ``kernel.bpf_stats_enabled`` on
for the run and restored after). That time, on all CPUs and for every process, divided by
the job's CPU time per second, bounds the share of the job's CPU the handlers can take. Slowdown
= traced / untraced − 1 of each adjacent pair; the median over pairs and its interquartile
range (the spread says how much of it is the machine's noise).

The probe runs with its default groups: CUDA and NCCL uprobes on every process mapping
those libraries, plus the tcp, block and sched tracepoints (host-wide). On this CPU-only job
no CUDA library is mapped, so the uprobes find no target and the cost measured is that of
the tracepoints and of bpftrace itself; the per-call uprobe cost for GPU jobs is measured by
``bench/bench_ebpf.py``. (The Python group attaches only to interpreters of processes that
map CUDA or NCCL, so it adds nothing here.)

    python bench/bench_ebpf_job.py                    # writes bench/results/ebpf_job.json
    python bench/bench_ebpf_job.py --phase-seconds 10 --pairs 2 --out /tmp/job.json

Needs root and bpftrace.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from reveal.collect.ebpf.probe import EbpfProbe
from reveal.inject.workloads import default_workload

RESULT = Path(__file__).resolve().parent / "results" / "ebpf_job.json"
CLK_TCK = os.sysconf("SC_CLK_TCK")
TARGET_SLOWDOWN_PCT = 2.0
CONFIGS: dict[str, dict[str, Any]] = {"default": {}}


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class ProgressReader(threading.Thread):
    """Follows the job's JSON progress lines: (monotonic time, cumulative steps)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(daemon=True)
        self.stream = stream
        self.points: list[tuple[float, int]] = []

    def run(self) -> None:
        for line in self.stream:
            if line.startswith(b"{"):
                try:
                    self.points.append((time.monotonic(), int(json.loads(line)["steps"])))
                except (ValueError, KeyError):
                    continue

    def steps_at(self, t: float) -> int:
        """Steps reported at or before time ``t``."""
        done = [s for when, s in self.points if when <= t]
        return done[-1] if done else 0


class Drain(threading.Thread):
    """Reads and refreshes the probe every 100 ms, like the collector's sampler."""

    def __init__(self, probe: EbpfProbe) -> None:
        super().__init__(daemon=True)
        self.probe = probe
        self.stop = threading.Event()

    def run(self) -> None:
        import numpy as np

        next_refresh = time.monotonic() + 5.0
        while not self.stop.wait(0.1):
            self.probe.read(np.zeros(len(self.probe.channels)))
            if time.monotonic() >= next_refresh:
                next_refresh += 5.0
                self.probe.refresh()


def bpf_run_ns(pid: int | None) -> int:
    """Kernel time spent in the BPF programs a process holds (ns, all CPUs): the sum of
    ``run_time_ns`` over its program fds (``/proc/PID/fdinfo``; needs
    ``kernel.bpf_stats_enabled``)."""
    if pid is None:
        return 0
    total = 0
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("run_time_ns:"):
                total += int(line.split()[1])
    return total


def phase(pid: int, progress: ProgressReader, seconds: float,
          probe_options: dict[str, Any] | None) -> dict[str, float]:
    """One phase: steps/s and CPU s/step of the job, traced when ``probe_options`` is set;
    when traced, also the kernel time of the probe's BPF programs (ms per wall second)."""
    probe = drain = None
    tracer: int | None = None
    if probe_options is not None:
        probe = EbpfProbe(**probe_options)
        probe.open()
        tracer = probe.tracer_pid
        drain = Drain(probe)
        drain.start()
    time.sleep(1.0)  # let the condition settle (attach, first prints)
    t0, c0, b0 = time.monotonic(), cpu_seconds(pid), bpf_run_ns(tracer)
    s0 = progress.steps_at(t0)
    time.sleep(seconds)
    t1, c1, b1 = time.monotonic(), cpu_seconds(pid), bpf_run_ns(tracer)
    s1 = progress.steps_at(t1)
    if probe is not None and drain is not None:
        drain.stop.set()
        drain.join()
        probe.close()
    steps = max(s1 - s0, 1)
    row = {"steps": steps, "steps_per_s": steps / (t1 - t0),
           "cpu_ms_per_step": 1e3 * (c1 - c0) / steps,
           "job_cpu_ms_per_s": 1e3 * (c1 - c0) / (t1 - t0)}
    if probe_options is not None:
        row["bpf_ms_per_s"] = (b1 - b0) / 1e6 / (t1 - t0)
    return row


def measure(pid: int, progress: ProgressReader, config: dict[str, Any], pairs: int,
            seconds: float) -> dict[str, Any]:
    """``pairs`` adjacent traced/untraced phase pairs; slowdowns from per-pair ratios."""
    traced, untraced, cpu_ratio, wall_ratio = [], [], [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        rows: dict[bool, dict[str, float]] = {}
        for on in order:
            rows[on] = phase(pid, progress, seconds, config if on else None)
            print(f"  {'traced  ' if on else 'untraced'} {rows[on]['steps_per_s']:.2f} steps/s, "
                  f"{rows[on]['cpu_ms_per_step']:.2f} ms CPU/step", file=sys.stderr, flush=True)
        traced.append(rows[True])
        untraced.append(rows[False])
        cpu_ratio.append(rows[True]["cpu_ms_per_step"] / rows[False]["cpu_ms_per_step"])
        wall_ratio.append(rows[False]["steps_per_s"] / rows[True]["steps_per_s"])

    def pct(values: list[float]) -> dict[str, float]:
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        return {"median": round(100 * (med - 1), 2), "q1": round(100 * (q1 - 1), 2),
                "q3": round(100 * (q3 - 1), 2)}

    cpu, wall = pct(cpu_ratio), pct(wall_ratio)
    bpf_ms = statistics.median(r["bpf_ms_per_s"] for r in traced)
    job_ms = statistics.median(r["job_cpu_ms_per_s"] for r in untraced)
    return {"pairs": pairs, "phase_s": seconds,
            "bpf_ms_per_s": round(bpf_ms, 3),
            "bpf_pct_of_job_cpu_bound": round(100 * bpf_ms / job_ms, 3),
            "untraced_steps_per_s": round(statistics.median(r["steps_per_s"] for r in untraced),
                                          3),
            "traced_steps_per_s": round(statistics.median(r["steps_per_s"] for r in traced), 3),
            "slowdown_cpu_pct": cpu["median"], "slowdown_cpu_iqr_pct": [cpu["q1"], cpu["q3"]],
            "slowdown_wall_pct": wall["median"],
            "slowdown_wall_iqr_pct": [wall["q1"], wall["q3"]],
            "met": bool(cpu["median"] <= TARGET_SLOWDOWN_PCT),
            "phases": {"traced": traced, "untraced": untraced}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase-seconds", type=float, default=15.0)
    parser.add_argument("--pairs", type=int, default=8, help="traced/untraced phase pairs")
    parser.add_argument("--configs", default="default",
                        help=f"comma-separated, from {', '.join(CONFIGS)}")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    command = script_argv(__file__, argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    workload = default_workload()
    per_config = args.pairs * 2 * (args.phase_seconds + 4)
    duration = 30 + per_config * len(configs) + 30
    result: dict[str, Any] = {
        "benchmark": "ebpf probe: end-to-end slowdown of the reference training job",
        "command": "python bench/bench_ebpf_job.py",
        "workload": workload, "target_slowdown_pct": TARGET_SLOWDOWN_PCT,
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                 "load_avg_start": list(os.getloadavg())},
        "method": "job CPU seconds per training step (utime+stime of its process) and steps/s, "
                  "probe on/off in alternating adjacent phases; median and IQR of the "
                  "per-pair ratios",
        "configs": {}}
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    stats_before = stats.read_text().strip() if stats.exists() else None
    if stats_before is not None:
        stats.write_text("1")
    with tempfile.TemporaryDirectory(prefix="reveal-bench-job-") as tmp:
        argv = [sys.executable, "-m", f"reveal.inject.workloads.{workload}", "--duration",
                f"{duration:.0f}", "--data-dir", str(Path(tmp) / "data"),
                "--progress-every", "0.25"]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        job = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env)
        try:
            assert job.stdout is not None
            progress = ProgressReader(job.stdout)
            progress.start()
            deadline = time.monotonic() + 120
            while len(progress.points) < 8 and time.monotonic() < deadline:
                if job.poll() is not None:
                    raise SystemExit(f"the workload exited with code {job.returncode}")
                time.sleep(0.5)
            time.sleep(10)  # past the first epoch's page-cache fill
            for name in configs:
                print(f"configuration {name}", file=sys.stderr, flush=True)
                result["configs"][name] = measure(job.pid, progress, dict(CONFIGS[name]),
                                                  args.pairs, args.phase_seconds)
        finally:
            job.terminate()
            job.wait(30)
            if stats_before is not None:
                stats.write_text(stats_before)
    result["host"]["load_avg_end"] = list(os.getloadavg())
    write_result(args.out, result,
                 {**arguments(args), "configs_run": {name: CONFIGS[name] for name in configs},
                  "workload": workload, "target_slowdown_pct": TARGET_SLOWDOWN_PCT},
                 command)
    for name, r in result["configs"].items():
        print(f"{name}: BPF programs {r['bpf_ms_per_s']:.3f} ms per second = at most "
              f"{r['bpf_pct_of_job_cpu_bound']:.3f} % of the job's CPU")
        print(f"{name}: slowdown {r['slowdown_cpu_pct']:+.2f} % CPU/step (IQR "
              f"{r['slowdown_cpu_iqr_pct'][0]:+.2f} to {r['slowdown_cpu_iqr_pct'][1]:+.2f}), "
              f"{r['slowdown_wall_pct']:+.2f} % wall (target ≤ {TARGET_SLOWDOWN_PCT} %)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
