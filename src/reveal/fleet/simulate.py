"""A simulated fleet: runs of the reference job recorded on this machine one after another,
each relabelled as one host, with faults injected into some hosts at different times.

Recording (:func:`record_fleet`, root) starts the distributed reference job once (two ranks
in the suite's network namespaces, in the job's own cgroup) and records one run per host
with the collector in the host's namespace (it reads the job's veth through its ``netns``
probe and the job's cgroup through its ``cgroup`` probe, as on a host running containers),
in the planned order, injecting that host's fault (if any) at its planned offset. The
manifest ``fleet.json`` names every host, its run, its split and the load average around its
recording; each run's ``events.jsonl`` is the ground truth.

Loading (:func:`load_fleet`) reads the runs back as one :class:`~reveal.frame.Telemetry` per
host. **The hosts were recorded sequentially and are aligned on their start**: every host's
``wall_offset_ns`` is shifted so that its first sample falls at the first host's start, so
all hosts overlap in (simulated) wall time. Fault episodes are moved by the same shift and
returned as :class:`FaultEpisode` on that common wall clock.

For scale, :func:`bootstrap_host` (and :func:`synthetic_hosts`, many at once) makes
**synthetic** hosts from a recorded clean host by a
circular block bootstrap of its rows (blocks of ``block_s`` seconds, a random time shift);
counters are rebuilt from the resampled increments so they stay monotonic.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reveal.catalog import default_catalog
from reveal.errors import RevealError
from reveal.frame import Telemetry, channel_metric
from reveal.inject.groundtruth import load_episodes
from reveal.inject.naming import PREFIX

Say = Callable[[str], None]
MANIFEST = "fleet.json"
SCHEMA = "reveal-fleet-sim"
VERSION = 1
TRAINING_TIMEOUT_S = 180.0  # beyond the warm-up, for the job's first training step


@dataclass
class HostPlan:
    """One simulated host: its name, its split, and the fault injected ``offset_s`` seconds
    after its recording starts for ``duration_s`` seconds (``kind`` None: a clean host)."""

    host: str
    kind: str | None = None
    intensity: str = "high"
    offset_s: float = 0.0
    duration_s: float = 0.0
    split: str = "report"


@dataclass
class FaultEpisode:
    """One injected fault on the fleet's common wall clock (Unix nanoseconds)."""

    host: str
    start_ns: int
    end_ns: int
    kind: str
    subsystem: str = ""
    intensity: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SimulatedFleet:
    """Hosts aligned on their start, and the ground truth of every fault episode."""

    hosts: list[Telemetry]
    truth: list[FaultEpisode]
    plans: list[HostPlan] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def faulty_hosts(self) -> set[str]:
        return {e.host for e in self.truth}

    @property
    def clean_hosts(self) -> list[str]:
        return [t.host for t in self.hosts if t.host not in self.faulty_hosts]


def plan_fleet(kinds: list[str], n_clean: int, run_s: float, episode_s: float,
               lead_s: float = 10.0, intensity: str = "high", split: str = "report",
               prefix: str = "host", seed: int = 0) -> list[HostPlan]:
    """One faulty host per kind plus ``n_clean`` clean ones, in a shuffled recording order.

    Fault offsets are spread between ``lead_s`` and ``run_s - episode_s - 5`` seconds, so
    the faults start at different times on the common clock.
    """
    rng = np.random.default_rng(seed)
    latest = max(lead_s, run_s - episode_s - 5.0)
    offsets = np.linspace(lead_s, latest, num=max(len(kinds), 1))
    rng.shuffle(offsets)
    plans = [HostPlan("", kind, intensity, float(round(off, 1)), episode_s, split)
             for kind, off in zip(kinds, offsets, strict=False)]
    plans += [HostPlan("", None, "", 0.0, 0.0, split) for _ in range(n_clean)]
    order = rng.permutation(len(plans))
    plans = [plans[i] for i in order]
    for i, plan in enumerate(plans):
        plan.host = f"{prefix}{i:02d}"
    return plans


def record_fleet(out_dir: Path, plans: list[HostPlan], run_s: float, say: Say,
                 interval_s: float = 0.1, workload: str | None = None,
                 resume: bool = False) -> Path:
    """Record one run per planned host under ``out_dir/runs/<host>``; returns the manifest.

    Needs root (namespaces, the job cgroup, some faults). The recording takes about
    ``len(plans) × (run_s + 10)`` seconds. ``resume`` keeps the hosts the manifest in
    ``out_dir`` already holds and records only the planned hosts it lacks.
    """
    from reveal.inject.cleanup import make_temp_dir
    from reveal.inject.faults import FaultContext
    from reveal.inject.jobcgroup import JobCgroup
    from reveal.inject.scenario import WARMUP_S, EpisodePlan, record
    from reveal.inject.veth_pair import NetnsPair
    from reveal.inject.workloads import WorkloadRun, default_workload, unavailable_reason

    if os.geteuid() != 0:
        raise RevealError("recording a simulated fleet needs root (namespaces, cgroups, "
                          "faults); run it as root")
    names = [p.host for p in plans]
    if len(set(names)) != len(names):
        raise RevealError("simulated host names must be unique")
    name = workload or default_workload(distributed=True)
    reason = unavailable_reason(name)
    if reason:
        raise RevealError(f"fleet simulation: {reason}")
    out_dir = Path(out_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    hosts: list[dict[str, Any]] = []
    if resume and (out_dir / MANIFEST).is_file():
        hosts = list(read_manifest(out_dir)["hosts"])
        done = {h["host"] for h in hosts}
        plans = [p for p in plans if p.host not in done]
        if not plans:
            return out_dir / MANIFEST
    total = WARMUP_S + TRAINING_TIMEOUT_S + len(plans) * (run_s + 30.0) + 60.0
    workdir = make_temp_dir("fleet")
    netns = NetnsPair(tag="fleet").create() if name == "torch_ddp" else None
    cgroup = JobCgroup().create()
    job = WorkloadRun(name, workdir, total, netns=netns, cgroup=cgroup)
    manifest = {"schema": SCHEMA, "version": VERSION, "workload": name, "run_s": run_s,
                "interval_s": interval_s, "hosts": hosts,
                "note": "hosts recorded sequentially on one machine, aligned on their start"}
    try:
        say(f"fleet: starting workload {name}")
        job.start()
        time.sleep(WARMUP_S)
        _wait_training(job, TRAINING_TIMEOUT_S)
        context = FaultContext(workdir, netns)
        for i, plan in enumerate(plans, 1):
            if not job.alive():
                raise RevealError(f"workload {name} stopped (see {job.log_path(0)})")
            what = f"{plan.kind} ({plan.intensity}) at +{plan.offset_s:g} s" if plan.kind \
                else "clean"
            say(f"fleet: host {i}/{len(plans)} {plan.host}: {what}")
            load_before = os.getloadavg()
            episodes = ([EpisodePlan(plan.kind, plan.intensity, plan.offset_s,
                                     plan.duration_s)] if plan.kind else [])
            run_dir = out_dir / "runs" / plan.host
            recorded = record(run_dir, run_s, interval_s, episodes, context, say)
            hosts.append({**asdict(plan), "run": f"runs/{plan.host}",
                          "skipped": recorded.skipped, "owner_pid": os.getpid(),
                          "loadavg_before": list(load_before),
                          "loadavg_after": list(os.getloadavg())})
            _write_manifest(out_dir, manifest)
    finally:
        job.stop()
        cgroup.close()
        if netns is not None:
            netns.close()
        shutil.rmtree(workdir, ignore_errors=True)
    manifest["workload_progress"] = job.progress()[-3:]
    return _write_manifest(out_dir, manifest)


def _wait_training(job: Any, timeout_s: float) -> None:
    """Wait until every rank of the job reported a training step (its start-up, imports
    and sample files done), at most ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    ranks = len(job.procs)
    while time.monotonic() < deadline:
        if not job.alive():
            raise RevealError(f"workload {job.name} stopped during start-up "
                              f"(see {job.log_path(0)})")
        if len({line.get("rank", 0) for line in job.progress()}) >= ranks:
            return
        time.sleep(0.5)
    raise RevealError(f"workload {job.name} reported no training step within "
                      f"{timeout_s:g} s after its warm-up (see {job.log_path(0)})")


def _write_manifest(out_dir: Path, manifest: dict[str, Any]) -> Path:
    from reveal.store.layout import write_json_atomic

    path = out_dir / MANIFEST
    write_json_atomic(path, manifest)
    return path


def read_manifest(fleet_dir: Path) -> dict[str, Any]:
    path = Path(fleet_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise RevealError(f"{path}: no simulated fleet here (record one first)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise RevealError(f"{path}: unreadable fleet manifest ({exc})") from None
    if manifest.get("schema") != SCHEMA or manifest.get("version") != VERSION:
        raise RevealError(f"{path}: not a version-{VERSION} {SCHEMA} manifest")
    return manifest


def load_fleet(fleet_dir: Path, split: str | None = None, clean_only: bool = False,
               channels: list[str] | None = None) -> SimulatedFleet:
    """Read a recorded fleet back, every host aligned on the first host's start.

    ``split`` keeps the hosts of one split; ``clean_only`` keeps the hosts without a fault;
    ``channels`` (metric prefixes) limits what is read.
    """
    from reveal.store.run_reader import read_run

    fleet_dir = Path(fleet_dir)
    manifest = read_manifest(fleet_dir)
    entries = [h for h in manifest["hosts"] if split is None or h["split"] == split]
    if clean_only:
        entries = [h for h in entries if not h.get("kind")]
    if not entries:
        raise RevealError(f"{fleet_dir}: no hosts in split {split!r}")
    runs = [read_run(fleet_dir / h["run"], metrics=channels) for h in entries]
    starts = [int(t.timestamps_ns[0]) + t.wall_offset_ns for t in runs]
    reference = min(starts)
    hosts: list[Telemetry] = []
    truth: list[FaultEpisode] = []
    plans: list[HostPlan] = []
    for entry, tel, start in zip(entries, runs, starts, strict=True):
        shift = reference - start
        offset = tel.wall_offset_ns + shift
        meta = {**tel.meta, "host": entry["host"], "wall_offset_ns": offset,
                "recorded_wall_offset_ns": tel.wall_offset_ns, "simulated": "recorded",
                "aligned_shift_ns": shift, "source": f"simulated fleet {fleet_dir.name}"}
        hosts.append(Telemetry(entry["host"], tel.timestamps_ns, tel.values,
                               _own_names(tel.channels, entry.get("owner_pid")), meta))
        for ep in load_episodes(fleet_dir / entry["run"]):
            truth.append(FaultEpisode(entry["host"], ep.start_ns + offset, ep.end_ns + offset,
                                      ep.kind, ep.subsystem, ep.intensity))
        plans.append(HostPlan(**{k: entry[k] for k in ("host", "kind", "intensity",
                                                        "offset_s", "duration_s", "split")}))
    meta = {k: v for k, v in manifest.items() if k != "hosts"}
    meta["reference_start_ns"] = reference
    return SimulatedFleet(hosts, truth, plans, meta)


def _own_names(channels: list[str], pid: int | None) -> list[str]:
    """Channel names with the recording process's id taken out of the names it gave the
    job's cgroup, namespaces and interfaces (``rvinj-<pid>-job`` → ``rvinj-job``), so that
    hosts recorded by different processes name the same job's channels alike."""
    if not pid:
        return list(channels)
    return [c.replace(f"{PREFIX}-{pid}-", f"{PREFIX}-").replace(f"rvi{pid}", "rvi")
            for c in channels]


def bootstrap_host(source: Telemetry, host: str, block_s: float = 5.0,
                   seed: int = 0, length: int | None = None) -> Telemetry:
    """A **synthetic** host resampled from ``source`` (a clean host) by circular block
    bootstrap: blocks of ``block_s`` seconds drawn at random start rows, the first at a
    random time shift. Gauges are the resampled values; counters (catalog kind
    ``counter``/``event``) restart from the source's first value and add the resampled
    per-sample increments, so they stay counters. Timestamps and wall offset are the
    source's; ``meta["simulated"]`` says ``"bootstrap"``.
    """
    n = source.n_samples if length is None else int(length)
    if source.n_samples < 2 or n < 1:
        raise RevealError(f"host {source.host}: too few samples to bootstrap")
    rng = np.random.default_rng(seed)
    block = max(1, round(block_s / source.interval_s))
    starts = rng.integers(0, source.n_samples, size=-(-n // block))
    idx = (starts[:, None] + np.arange(block)[None, :]).ravel()[:n] % source.n_samples
    values = source.values[idx]
    catalog = default_catalog()
    counter = np.array([catalog.lookup(channel_metric(c)).kind in ("counter", "event")
                        for c in source.channels])
    if counter.any():
        raw = source.values[:, counter]
        inc = np.diff(raw, axis=0, prepend=raw[:1])
        inc = np.where(np.isfinite(inc) & (inc >= 0), inc, 0.0)
        step = inc[idx]
        step[0] = 0.0
        first = np.nan_to_num(raw[0])
        rebuilt = first + np.cumsum(step, axis=0)
        values = values.copy()
        values[:, counter] = np.where(np.isnan(source.values[idx][:, counter]), np.nan,
                                      rebuilt)
    step_ns = round(source.interval_s * 1e9)
    ts = source.timestamps_ns[0] + np.arange(n, dtype=np.int64) * step_ns
    meta = {**source.meta, "host": host, "simulated": "bootstrap",
            "bootstrap": {"source": source.host, "block_s": block_s, "seed": seed}}
    return Telemetry(host, ts, values, list(source.channels), meta)


def synthetic_hosts(sources: list[Telemetry], n_hosts: int, block_s: float = 5.0,
                    seed: int = 0, prefix: str = "syn") -> list[Telemetry]:
    """``n_hosts`` **synthetic** clean hosts for scale: each a block bootstrap
    (:func:`bootstrap_host`) of one of ``sources`` in turn, with its own seed; every host
    keeps its source's time base (so hosts made from aligned sources stay aligned)."""
    if not sources:
        raise RevealError("no recorded hosts to resample synthetic hosts from")
    width = max(3, len(str(n_hosts - 1)))
    return [bootstrap_host(sources[i % len(sources)], f"{prefix}{i:0{width}d}", block_s,
                           seed=seed * 1_000_003 + i) for i in range(n_hosts)]
