"""End-to-end slowdown of the reference training job under the ``ebpf`` probe.

The reference workload of the validation suite (``torch_train``: a small CNN on sample files
read from disk through a DataLoader; ``numpy_train`` without PyTorch) runs for the whole
benchmark. The real ``EbpfProbe`` is switched on and off in alternating phases (U T, T U,
...), so both conditions see the same job, the same machine and the same page cache; while
on, a reader thread drains it every 100 ms as the collector does. For every phase we keep
the job's training steps per second (wall) and its **CPU seconds per step** (utime + stime
of the job's process from ``/proc/PID/stat``; robust to the other tenants of a shared
machine, and it contains the in-kernel tracing work done in the job's context). Slowdown
= traced / untraced − 1, medians over the phase pairs.

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


def phase(pid: int, progress: ProgressReader, seconds: float,
          probe_options: dict[str, Any] | None) -> dict[str, float]:
    """One phase: steps/s and CPU s/step of the job, traced when ``probe_options`` is set."""
    probe = drain = None
    if probe_options is not None:
        probe = EbpfProbe(**probe_options)
        probe.open()
        drain = Drain(probe)
        drain.start()
    time.sleep(1.0)  # let the condition settle (attach, first prints)
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    s0 = progress.steps_at(t0)
    time.sleep(seconds)
    t1, c1 = time.monotonic(), cpu_seconds(pid)
    s1 = progress.steps_at(t1)
    if probe is not None and drain is not None:
        drain.stop.set()
        drain.join()
        probe.close()
    steps = max(s1 - s0, 1)
    return {"steps": steps, "steps_per_s": steps / (t1 - t0),
            "cpu_ms_per_step": 1e3 * (c1 - c0) / steps}


def measure(pid: int, progress: ProgressReader, config: dict[str, Any], pairs: int,
            seconds: float) -> dict[str, Any]:
    traced, untraced = [], []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        for on in order:
            row = phase(pid, progress, seconds, config if on else None)
            (traced if on else untraced).append(row)
            print(f"  {'traced  ' if on else 'untraced'} {row['steps_per_s']:.2f} steps/s, "
                  f"{row['cpu_ms_per_step']:.2f} ms CPU/step", file=sys.stderr, flush=True)

    def med(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    cpu_slow = 100 * (med(traced, "cpu_ms_per_step") / med(untraced, "cpu_ms_per_step") - 1)
    wall_slow = 100 * (med(untraced, "steps_per_s") / med(traced, "steps_per_s") - 1)
    return {"pairs": pairs, "phase_s": seconds,
            "untraced_steps_per_s": round(med(untraced, "steps_per_s"), 3),
            "traced_steps_per_s": round(med(traced, "steps_per_s"), 3),
            "untraced_cpu_ms_per_step": round(med(untraced, "cpu_ms_per_step"), 3),
            "traced_cpu_ms_per_step": round(med(traced, "cpu_ms_per_step"), 3),
            "slowdown_cpu_pct": round(cpu_slow, 2), "slowdown_wall_pct": round(wall_slow, 2),
            "met": bool(cpu_slow <= TARGET_SLOWDOWN_PCT),
            "phases": {"traced": traced, "untraced": untraced}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--pairs", type=int, default=4, help="traced/untraced phase pairs")
    parser.add_argument("--configs", default="default",
                        help=f"comma-separated, from {', '.join(CONFIGS)}")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
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
                  "probe on/off in alternating phases, medians over pairs",
        "configs": {}}
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
    result["host"]["load_avg_end"] = list(os.getloadavg())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, r in result["configs"].items():
        print(f"{name}: slowdown {r['slowdown_cpu_pct']:+.2f} % CPU/step, "
              f"{r['slowdown_wall_pct']:+.2f} % wall (target ≤ {TARGET_SLOWDOWN_PCT} %)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
