"""Scenarios: a reference workload recorded by the real collector, first clean (the
baseline), then with faults injected at planned times (ground truth in ``events.jsonl``).

One workload process runs through a scenario's baseline and all its faulted runs, so every
run sees the same job in the same steady state. For the distributed scenario the workload's
ranks run inside the suite's namespaces; the collector runs in the host's, as an operator
runs it, and sees the ranks' veth, TCP and qdisc counters through the ``netns`` and
``qdisc`` probes, labelled with the namespace (which a claim then names).
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reveal.errors import RevealError
from reveal.inject import processes
from reveal.inject.cleanup import make_temp_dir
from reveal.inject.faults import FAULTS, FaultContext, make_fault, run_episode
from reveal.inject.groundtruth import Episode, EventLog
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.veth_pair import NetnsPair
from reveal.inject.workloads import WorkloadRun, default_workload, unavailable_reason

Say = Callable[[str], None]

WARMUP_S = 12.0  # workload start (imports, sample files) before recording begins


@dataclass
class EpisodePlan:
    """Inject ``kind`` at ``intensity`` ``offset_s`` seconds after recording starts."""

    kind: str
    intensity: str
    offset_s: float
    duration_s: float


@dataclass
class Scenario:
    """A workload, a baseline length and the faulted runs' episode plans."""

    name: str
    distributed: bool
    baseline_s: float
    run_s: float
    plans: list[list[EpisodePlan]]  # one list of episodes per faulted run
    interval_s: float = 0.1
    #: record a fresh baseline right before every faulted run (else one for all): memory
    #: gauges (page cache, fragmentation) drift over minutes, and a baseline recorded
    #: long before a run makes that drift look like an anomaly.
    baseline_each_run: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RecordedRun:
    path: Path
    episodes: list[Episode] = field(default_factory=list)
    baseline: Path | None = None  # the clean run its detectors are fitted on
    skipped: list[str] = field(default_factory=list)  # faults that could not run, and why


@dataclass
class RecordedScenario:
    scenario: Scenario
    workload: str
    baseline: Path
    runs: list[RecordedRun]
    workload_progress: list[dict[str, Any]]


def plan_runs(kinds: list[str], intensities: list[str], repetitions: int,
              episode_s: float, gap_s: float, lead_s: float, seed: int = 0,
              per_run: int | None = None) -> tuple[list[list[EpisodePlan]], float]:
    """Episode plans: every (kind, intensity) once per repetition, in a shuffled order,
    ``episode_s`` long, ``gap_s`` of clean time between, the first after ``lead_s``.

    ``per_run`` caps the episodes in one run (more runs then). Returns the plans and the
    length every run must have (seconds). Self-ending faults get ``3 × episode_s``.
    """
    rng = random.Random(seed)
    runs: list[list[EpisodePlan]] = []
    length = 0.0
    for _ in range(repetitions):
        pairs = [(k, i) for k in kinds for i in intensities if i in FAULTS[k].INTENSITIES]
        rng.shuffle(pairs)
        size = per_run or len(pairs) or 1
        for first in range(0, len(pairs), size):
            t = lead_s
            plans = []
            for kind, intensity in pairs[first:first + size]:
                plans.append(EpisodePlan(kind, intensity, t, episode_s))
                span = episode_s * (2.0 if FAULTS[kind].self_ending else 1.0)
                t += span + gap_s
            runs.append(plans)
            length = max(length, t)
    return runs, length


def _wait_for_start(run_dir: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    def started() -> bool:
        return (run_dir / "meta.json").is_file() or proc.poll() is not None

    processes.wait_until(started, timeout_s)
    log = run_dir.parent / f"{run_dir.name}.collect.log"
    if proc.poll() is not None and proc.returncode != 0:
        raise RevealError(f"the collector exited with code {proc.returncode} (see {log})")
    if not (run_dir / "meta.json").is_file():
        raise RevealError(f"the collector did not start within {timeout_s:g} s (see {log})")


def record(run_dir: Path, duration_s: float, interval_s: float,
           plans: list[EpisodePlan], context: FaultContext, say: Say) -> RecordedRun:
    """Record ``duration_s`` seconds with the real collector, injecting ``plans``."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "reveal.cli", "collect", "--interval", f"{interval_s:g}",
            "--duration", f"{duration_s:g}", "--out", str(run_dir), "--quiet"]
    log = run_dir.parent / f"{run_dir.name}.collect.log"
    proc = processes.start(argv, stdout=log)
    recorded = RecordedRun(run_dir)
    try:
        _wait_for_start(run_dir, proc, 30.0)
        t0 = time.monotonic()
        events = EventLog(run_dir)
        for plan in plans:
            delay = t0 + plan.offset_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            fault = make_fault(plan.kind, plan.intensity, context)
            reason = fault.check()
            if reason:
                recorded.skipped.append(f"{plan.kind}: {reason}")
                say(f"  {plan.kind}: skipped: {reason}")
                continue
            left = duration_s - (time.monotonic() - t0) - 1.0
            if left < 1.0:
                recorded.skipped.append(f"{plan.kind}: no time left in the run")
                say(f"  {plan.kind}: skipped: no time left in the run")
                continue
            say(f"  {plan.kind} ({plan.intensity}) for {plan.duration_s:g} s")
            recorded.episodes.append(run_episode(fault, min(plan.duration_s, left), events,
                                                 max_s=min(3 * plan.duration_s, left)))
        if proc.wait(timeout=duration_s + 60) != 0:
            raise RevealError(f"the collector exited with code {proc.returncode} (see {log})")
    finally:
        processes.stop(proc, grace_s=10.0)
    return recorded


def run_scenario(scenario: Scenario, out_dir: Path, say: Say,
                 workload: str | None = None) -> RecordedScenario:
    """Record a scenario's baseline and faulted runs under ``out_dir/<name>/``."""
    name = workload or default_workload(scenario.distributed)
    reason = unavailable_reason(name)
    if reason:
        raise RevealError(f"scenario {scenario.name}: {reason}")
    if scenario.distributed != (name == "torch_ddp"):
        raise RevealError(f"scenario {scenario.name} needs "
                          f"{'a distributed' if scenario.distributed else 'a single-process'} "
                          f"workload, not {name}")
    base_dir = out_dir / scenario.name
    per_run = scenario.run_s + 15 + (scenario.baseline_s + 5 if scenario.baseline_each_run
                                      else 0)
    total = WARMUP_S + scenario.baseline_s + len(scenario.plans) * per_run + 60.0
    workdir = make_temp_dir(scenario.name)
    netns = NetnsPair(tag=scenario.name[:6]).create() if scenario.distributed else None
    cgroup = JobCgroup().create()
    job = WorkloadRun(name, workdir, total, netns=netns, cgroup=cgroup)
    try:
        say(f"scenario {scenario.name}: starting workload {name}")
        job.start()
        time.sleep(WARMUP_S)
        if not job.alive():
            raise RevealError(f"workload {name} stopped during warm-up "
                              f"(see {job.log_path(0)})")
        context = FaultContext(workdir, netns)
        baseline: Path | None = None
        runs = []
        for i, plans in enumerate(scenario.plans, 1):
            if baseline is None or scenario.baseline_each_run:
                name_i = f"baseline{i}" if scenario.baseline_each_run else "baseline"
                say(f"scenario {scenario.name}: clean baseline {name_i}, "
                    f"{scenario.baseline_s:g} s")
                baseline = record(base_dir / name_i, scenario.baseline_s, scenario.interval_s,
                                  [], context, say).path
            say(f"scenario {scenario.name}: faulted run {i}/{len(scenario.plans)}, "
                f"{scenario.run_s:g} s")
            recorded = record(base_dir / f"run{i}", scenario.run_s, scenario.interval_s,
                              plans, context, say)
            recorded.baseline = baseline
            runs.append(recorded)
            if not job.alive():
                raise RevealError(f"workload {name} stopped during run {i} "
                                  f"(see {job.log_path(0)})")
        assert baseline is not None
        return RecordedScenario(scenario, name, baseline, runs, job.progress())
    finally:
        job.stop()
        cgroup.close()
        if netns is not None:
            netns.close()
        _remove_tree(workdir)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
