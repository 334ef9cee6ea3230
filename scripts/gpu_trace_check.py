"""Reveal's eBPF capture against a training job's own counts, and its cost on the job.

A training job runs in phases of the same number of steps, on a handshake (files in a
state directory): untraced, traced, untraced, traced (the ``ebpf`` probe at its defaults,
``pids`` = the job), then a counted phase traced with the Python group too. The job keeps
its own counts of what it did in each phase: on a GPU (``torch``, ``--device cuda``, one
NCCL rank) the runtime calls ``torch.profiler`` saw by name, the copies' bytes by
direction from the profiler's trace, its own ``all_reduce`` and ``synchronize`` calls and
their wall times, and the calls of its own Python functions; in ``--cpu`` (no GPU) a NumPy
job that calls the stand-in ``libcudart.so.12`` and ``libnccl.so.2`` of tests/fixtures/ebpf
through ctypes and counts every call it makes.

The probe's counters are read before and after the counted phase; their difference is
compared with the job's counts:

* kernel launches within ``--max-count-error`` (2 %): on a GPU those the driver saw
  (``cuLaunchKernel*``) against the kernels ``torch.profiler`` saw run on the device, since
  cuBLAS and cuDNN carry runtimes of their own, linked statically, whose launches no uprobe
  on ``libcudart.so`` sees (the shared runtime's own launches are kept beside them,
  ``runtime_launches``); in ``--cpu`` the runtime calls against the job's own count;
* copies (``cudaMemcpy*`` calls) within 2 %, and their bytes per direction within 2 %;
* synchronisations (``cuda*Synchronize``) within 2 %;
* NCCL collectives (``ncclAllReduce``): the count exactly, the bytes exactly, every call
  timed, and the traced mean latency no longer than the job's own mean wall time of the
  call that encloses it;
* Python function entries: at least the job's own count of its Python functions' calls (a
  lower bound: the interpreter also enters the libraries' functions);

and the cost: median step time of the traced phases over that of the untraced phases,
minus one, within ``--max-cost`` (3 %). ``--cost-rounds R`` adds R rounds of the probe's
settings side by side (untraced; the defaults; launches at entry only; the runtime's
launches and copies left to the driver, which sees them again; both), each round's order
turned by one, and reports each setting's cost against the untraced phase of its own round
(``figures.cost_variants``, recorded, not judged). Writes ``OUTDIR/trace.json`` (the figures, each
check with its target); exit status 1 when a check fails or the run could not be made.
``--judge TRACE`` judges a kept trace.json again against the targets given, running
nothing.

Usage: python3 scripts/gpu_trace_check.py OUTDIR [--cpu] [--steps 300]
       python3 scripts/gpu_trace_check.py --judge OUTDIR/trace.json [--refigure] [targets]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
MAX_COUNT_ERROR = 0.02
MAX_COST = 0.03
#: the phases: (name, probe groups or None for untraced)
DEFAULT_GROUPS = "cuda,nccl,tcp,block,sched"
PHASES = (("untraced", None), ("traced", DEFAULT_GROUPS), ("untraced", None),
          ("traced", DEFAULT_GROUPS), ("counted", "cuda,nccl,python"))
#: microseconds each stand-in function takes in --cpu (a launch is immediate, as on a GPU)
CPU_DELAYS_US = {"LAUNCH_US": 0, "MEMCPY_US": 20, "MALLOC_US": 0, "SYNC_US": 100,
                 "DRIVER_US": 0, "COLL_US": 50}
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC",
            "cudaLaunchKernelExC_ptsz")
#: the driver's launches: every runtime launch ends here, also from a runtime that another
#: library links statically (cuBLAS, cuDNN), which no uprobe on libcudart.so sees
DRIVER_LAUNCHES = ("cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx",
                   "cuLaunchKernelEx_ptsz")
COPIES = ("cudaMemcpy", "cudaMemcpy_ptds", "cudaMemcpyAsync", "cudaMemcpyAsync_ptsz")
SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz",
         "cudaEventSynchronize")
#: the runtime's launches and copies, each of which the driver's functions see again
RUNTIME_DUPLICATES = "cudaLaunchKernel*,cudaMemcpy*"
#: the cost rounds' probe settings: name → the probe's options (None: untraced)
COST_VARIANTS: dict[str, dict[str, Any] | None] = {
    "untraced": None,
    "default": {"groups": DEFAULT_GROUPS},
    "entry": {"groups": DEFAULT_GROUPS, "launch_latency": False},
    "driver": {"groups": DEFAULT_GROUPS, "skip": RUNTIME_DUPLICATES},
    "driver_entry": {"groups": DEFAULT_GROUPS, "skip": RUNTIME_DUPLICATES,
                     "launch_latency": False},
}


def cost_phases(rounds: int) -> list[tuple[str, dict[str, Any] | None]]:
    """``rounds`` rounds of every cost variant, each round's order turned by one so that a
    drift of the job's speed falls on every variant alike: ``("cost:NAME", options)``."""
    names = list(COST_VARIANTS)
    out = []
    for r in range(rounds):
        turned = names[r % len(names):] + names[:r % len(names)]
        out += [(f"cost:{name}", COST_VARIANTS[name]) for name in turned]
    return out


def all_phases(rounds: int) -> list[tuple[str, dict[str, Any] | None]]:
    """The counting phases, then the cost rounds."""
    return [(name, None if groups is None else {"groups": groups})
            for name, groups in PHASES] + cost_phases(rounds)


def say(text: str) -> None:
    print(f"== {time.strftime('%T')} {text}", flush=True)


# -- the jobs (run as a child: ``--job STATE``) ------------------------------------------------
def _wait_file(path: Path, timeout_s: float = 600.0) -> None:
    """Wait for ``path`` entering no Python function (builtins only), so that the traced
    Python entries settle while the job waits."""
    deadline, name = time.monotonic() + timeout_s, str(path)
    while True:
        try:
            os.stat(name)
            return
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise SystemExit(f"job: gave up waiting for {path}") from None
            time.sleep(0.005)


def _phases(state: Path, step: Any, steps: int, profiled: Any = None) -> None:
    """Run the phases named in ``state/phases.json`` on the handshake, ``steps`` steps each
    (``[name, steps]`` pairs there); ``step()`` returns nothing and updates the counts the
    job keeps (``step.counts``)."""
    plan = json.loads((state / "phases.json").read_text())
    (state / "ready").touch()
    for i, (name, steps) in enumerate(plan):
        _wait_file(state / f"go.{i}")
        step.counts.clear()
        times = []
        ctx = profiled() if (name == "counted" and profiled) else contextlib.nullcontext()
        with ctx as prof:
            for _ in range(steps):
                t = time.perf_counter()
                step()
                times.append(time.perf_counter() - t)
        out = {"phase": name, "step_s": times, "counts": dict(step.counts)}
        if prof is not None:
            out["profiler"] = profiled.summary(prof, state)
        (state / f"phase.{i}.json").write_text(json.dumps(out))
        (state / f"done.{i}").touch()
    _wait_file(state / "exit")


class _Counts(dict):
    def add(self, key: str, n: float = 1) -> None:
        self[key] = self.get(key, 0) + n


def cpu_job(state: Path, libdir: Path, steps: int) -> None:
    """NumPy training on the CPUs that calls the stand-in CUDA runtime and NCCL as a GPU
    job calls the real ones: per step a batch copied HtoD, ``LAYERS`` launches forward and
    backward, an all-reduce of the gradients (float32), the loss copied DtoH, a stream
    synchronisation."""
    import ctypes

    import numpy as np

    rt = ctypes.CDLL(str(libdir / "libcudart.so.12"))
    nccl = ctypes.CDLL(str(libdir / "libnccl.so.2"))
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_void_p]

    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]

    rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p]
    nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    rng = np.random.default_rng(0)
    layers = [rng.standard_normal((64, 64)).astype(np.float32) * 0.1 for _ in range(4)]
    batch = rng.standard_normal((32, 64)).astype(np.float32)
    grads = np.zeros(sum(w.size for w in layers), dtype=np.float32)
    loss = np.zeros(1, dtype=np.float32)
    grid, block = Dim3(4, 1, 1), Dim3(128, 1, 1)
    counts = _Counts()

    def launch() -> None:
        rt.cudaLaunchKernel(None, grid, block, None, 0, None)
        counts.add("cudaLaunchKernel")

    def copy(array: Any, kind: int, label: str) -> None:
        rt.cudaMemcpyAsync(array.ctypes.data, array.ctypes.data, array.nbytes, kind, None)
        counts.add("cudaMemcpyAsync")
        counts.add(f"bytes.{label}", array.nbytes)

    def layer(x: Any, w: Any) -> Any:
        counts.add("python")
        launch()
        return np.tanh(x @ w)

    def step() -> None:
        counts.add("python")
        copy(batch, 1, "HtoD")
        x = batch
        for w in layers:
            x = layer(x, w)
        for _ in layers:  # backward
            launch()
        t = time.perf_counter()
        nccl.ncclAllReduce(grads.ctypes.data, grads.ctypes.data, grads.size, 7, 0, None, None)
        counts.add("nccl_wall_s", time.perf_counter() - t)
        counts.add("ncclAllReduce")
        counts.add("nccl_bytes", grads.nbytes)
        loss[0] = float(np.mean(x * x))
        copy(loss, 2, "DtoH")
        rt.cudaStreamSynchronize(None)
        counts.add("cudaStreamSynchronize")

    step.counts = counts  # type: ignore[attr-defined]
    _phases(state, step, steps)


class _Profiled:
    """``torch.profiler`` over the counted phase, summarised: runtime calls by name, copies'
    bytes by direction (its trace's ``gpu_memcpy`` events), device kernels."""

    def __call__(self) -> Any:
        import torch

        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])

    @staticmethod
    def summary(prof: Any, state: Path) -> dict[str, Any]:
        calls = {e.key: e.count for e in prof.key_averages()
                 if e.key.startswith(("cuda", "cu", "nccl"))}
        path = state / "profile.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
        copied: dict[str, float] = {}
        kernels = 0
        for e in events:
            if e.get("cat") == "gpu_memcpy":
                m = re.match(r"Memcpy (\w+)", e.get("name", ""))
                kind = m.group(1) if m else "other"
                copied[kind] = copied.get(kind, 0) + float(e.get("args", {}).get("bytes", 0))
            elif e.get("cat") == "kernel":
                kernels += 1
        path.unlink()
        return {"calls": calls, "memcpy_bytes": copied, "device_kernels": kernels}


def torch_job(state: Path, steps: int) -> None:
    """A small CNN trained on the GPU with one NCCL rank: per step a batch copied HtoD from
    pageable memory, forward, backward, an all-reduce of a gradient-sized buffer, an
    optimiser step, the loss read back (``item``) and a device synchronisation."""
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("nccl", init_method=f"file://{state}/pg", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    counts = _Counts()

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
            self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
            self.head = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            counts.add("python")
            x = torch.relu(self.conv1(x))
            x = torch.relu(self.conv2(x))
            return self.head(x.mean((2, 3)))

    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    buf = torch.zeros(sum(p.numel() for p in model.parameters()), device=dev)
    host_x = torch.randn(64, 3, 32, 32)
    host_y = torch.randint(0, 10, (64,))
    dist.all_reduce(buf)  # the communicator made before the phases
    torch.cuda.synchronize()

    def step() -> None:
        counts.add("python")
        x, y = host_x.to(dev), host_y.to(dev)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t = time.perf_counter()
        dist.all_reduce(buf)
        counts.add("nccl_wall_s", time.perf_counter() - t)
        counts.add("ncclAllReduce")
        counts.add("nccl_bytes", buf.numel() * buf.element_size())
        opt.step()
        loss.item()
        torch.cuda.synchronize()
        counts.add("cudaDeviceSynchronize")

    for _ in range(20):  # warm: cuDNN's choices, the allocator
        step()
    step.counts = counts  # type: ignore[attr-defined]
    try:
        _phases(state, step, steps, _Profiled())
    finally:
        dist.destroy_process_group()


# -- the driver --------------------------------------------------------------------------------
def _workload_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "ebpf_workload", HERE / "tests" / "fixtures" / "ebpf" / "workload.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(probe: Any) -> dict[str, float]:
    import numpy as np

    probe.refresh()
    probe.read(np.empty(len(probe.channels)))
    return probe.snapshot()


def _settled(probe: Any, pid: int, timeout_s: float = 30.0) -> dict[str, float]:
    """The job's counters (:func:`_sums`) once two reads 0.3 s apart agree (every call
    printed)."""
    deadline = time.monotonic() + timeout_s
    last = _sums(_read(probe), pid)
    while True:
        time.sleep(0.3)
        now = _sums(_read(probe), pid)
        if now == last or time.monotonic() > deadline:
            return now
        last = now


def _sums(snap: dict[str, float], pid: int) -> dict[str, float]:
    """The job's counters by key: ``calls.FN``, ``bytes.KIND`` (copies), ``nccl_bytes``,
    ``nccl_latency_ns``, ``nccl_timed`` (calls in the latency histogram), ``python``."""
    from reveal.frame import parse_channel

    out: dict[str, float] = {}

    def add(key: str, value: float) -> None:
        out[key] = out.get(key, 0.0) + value

    for name, value in snap.items():
        metric, labels = parse_channel(name)
        if labels.get("pid") != str(pid) or value != value:  # NaN: no value
            continue
        if metric in ("ebpf.cuda.calls", "ebpf.nccl.calls"):
            add(f"calls.{labels['fn']}", value)
        elif metric == "ebpf.cuda.memcpy_bytes" and labels["fn"] in COPIES:
            add(f"bytes.{labels['kind']}", value)
        elif metric == "ebpf.nccl.bytes" and labels["fn"] == "ncclAllReduce":
            add("nccl_bytes", value)
        elif metric == "ebpf.nccl.latency_ns_total" and labels["fn"] == "ncclAllReduce":
            add("nccl_latency_ns", value)
        elif metric == "ebpf.nccl.lat_hist" and labels["fn"] == "ncclAllReduce":
            add("nccl_timed", value)
        elif metric == "ebpf.python.calls":
            add("python", value)
    return out


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run the job through its phases under the probe; the figures (no judging)."""
    from reveal.collect.ebpf.probe import EbpfProbe

    work = Path(tempfile.mkdtemp(prefix="reveal-trace-check-"))
    state = work / "state"
    state.mkdir()
    plan = all_phases(args.cost_rounds)
    result: dict[str, Any] = {"cpu": args.cpu, "steps_per_phase": args.steps,
                              "phases": [p for p, _ in PHASES], "groups": dict(PHASES)}
    if args.cost_rounds:
        result["cost_rounds"] = {"rounds": args.cost_rounds, "steps": args.cost_steps,
                                 "variants": COST_VARIANTS}
    steps_of = [args.cost_steps if name.startswith("cost:") else args.steps
                for name, _ in plan]
    (state / "phases.json").write_text(json.dumps(
        [[name, n] for (name, _), n in zip(plan, steps_of, strict=True)]))
    job_cmd = [sys.executable, str(Path(__file__).resolve()), "--job", str(state),
               "--steps", str(args.steps)]
    if args.cpu:
        libdir = _workload_module().build(work / "lib", CPU_DELAYS_US)
        job_cmd += ["--cpu", "--libdir", str(libdir)]
        result["libraries"] = "stand-ins (tests/fixtures/ebpf), delays " + json.dumps(
            CPU_DELAYS_US)
    log = open(out / "trace_job.log", "wb")  # noqa: SIM115 (kept by the child)
    job = subprocess.Popen(job_cmd, stdout=log, stderr=subprocess.STDOUT)
    result["job_pid"] = job.pid
    phases: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 300
        while not (state / "ready").exists():
            if job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the job did not start (see trace_job.log)")
            time.sleep(0.05)
        say("the job is ready")
        for i, (name, options) in enumerate(plan):
            say(f"phase {i}: {name}" + (f" (probe {json.dumps(options)})" if options else ""))
            groups = None if options is None else options["groups"]
            probe = None
            if options is not None:
                probe = EbpfProbe(pids=[job.pid], interval_ms=100, **options)
                probe.open()
                if probe.status != "ok":
                    raise RuntimeError(f"ebpf probe {probe.status}: {probe.reason}")
                if name == "counted":
                    result["probe_libraries"] = probe.info.get("libraries")
                    result["probe_interpreters"] = probe.info.get("interpreters")
            try:
                before = _settled(probe, job.pid) if probe is not None else {}
                (state / f"go.{i}").touch()
                deadline = time.monotonic() + 300
                while not (state / f"done.{i}").exists():
                    if job.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the job did not finish phase {i} ({name}); "
                                           "see trace_job.log")
                    time.sleep(0.02)
                after = _settled(probe, job.pid) if probe is not None else {}
            finally:
                if probe is not None:
                    probe.close()
            own = json.loads((state / f"phase.{i}.json").read_text())
            traced = {k: after[k] - before.get(k, 0.0) for k in after}
            phases.append({"phase": name, "groups": groups, "options": options,
                           "median_step_s": statistics.median(own["step_s"]),
                           "own": own["counts"], "profiler": own.get("profiler"),
                           "traced": traced if probe is not None else None})
    finally:
        (state / "exit").touch()
        try:
            job.wait(timeout=30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    result["phase_results"] = phases
    result["figures"] = figures(phases)
    return result


def variant_costs(phases: list[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
    """Each cost variant's cost per round (its median step time over the untraced one's of
    the same round, minus one), and the median of the rounds; None without cost rounds."""
    cost = [p for p in phases if p["phase"].startswith("cost:")]
    if not cost:
        return None
    per_round = len(COST_VARIANTS)
    rounds = [cost[i:i + per_round] for i in range(0, len(cost), per_round)]
    out: dict[str, dict[str, Any]] = {}
    for name in COST_VARIANTS:
        if name == "untraced":
            continue
        costs = []
        for round_ in rounds:
            step = {p["phase"][5:]: p["median_step_s"] for p in round_}
            if name in step and step.get("untraced"):
                costs.append(round(step[name] / step["untraced"] - 1, 4))
        traced = [p for p in cost if p["phase"] == f"cost:{name}" and p["traced"]]
        calls = None
        if traced:  # the traced calls of a phase (median over the rounds)
            calls = statistics.median(sum(v for k, v in p["traced"].items()
                                          if k.startswith("calls.")) for p in traced)
        out[name] = {"per_round": costs,
                     "median": round(statistics.median(costs), 4) if costs else None,
                     "calls_per_phase": calls}
    return out


def _ratio_error(traced: float | None, own: float | None) -> float | None:
    if traced is None or own is None or own <= 0:
        return None
    return round(abs(traced - own) / own, 5)


def figures(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """The counted phase's traced figures beside the job's own, and the cost."""
    counted = next(p for p in phases if p["phase"] == "counted")
    traced, own, prof = counted["traced"], counted["own"], counted["profiler"]

    def tsum(names: tuple[str, ...]) -> float:
        return sum(traced.get(f"calls.{n}", 0.0) for n in names)

    if prof is not None:  # the profiler's runtime calls by name; bytes from its trace
        calls = prof["calls"]
        osum = lambda names: sum(calls.get(n, 0) for n in names)  # noqa: E731
        own_bytes = prof["memcpy_bytes"]
    else:  # the job counted every call it made
        osum = lambda names: sum(own.get(n, 0) for n in names)  # noqa: E731
        own_bytes = {k.split(".", 1)[1]: v for k, v in own.items() if k.startswith("bytes.")}
    kinds = sorted(set(own_bytes) | {k.split(".", 1)[1] for k in traced
                                     if k.startswith("bytes.")})
    nccl_calls = traced.get("calls.ncclAllReduce", 0.0)
    own_nccl = own.get("ncclAllReduce", 0)
    untraced = [p["median_step_s"] for p in phases if p["phase"] == "untraced"]
    timed = [p["median_step_s"] for p in phases if p["phase"] == "traced"]
    runtime_launches = {"traced": tsum(LAUNCHES), "own": osum(LAUNCHES)}
    if prof is not None and tsum(DRIVER_LAUNCHES) > 0:
        # the driver's launches against the kernels the profiler saw run on the device
        launches = {"traced": tsum(DRIVER_LAUNCHES), "own": prof["device_kernels"],
                    "at": "driver"}
    else:  # the stand-in libraries: the job counted its own runtime calls
        launches = {**runtime_launches, "at": "runtime"}
    return {
        "launches": launches,
        "runtime_launches": runtime_launches,
        "copies": {"traced": tsum(COPIES), "own": osum(COPIES)},
        "copy_bytes": {k: {"traced": traced.get(f"bytes.{k}", 0.0), "own": own_bytes.get(k, 0.0)}
                       for k in kinds},
        "synchronisations": {"traced": tsum(SYNCS), "own": osum(SYNCS)},
        "nccl_collectives": {"traced": nccl_calls, "own": own_nccl},
        "nccl_bytes": {"traced": traced.get("nccl_bytes", 0.0), "own": own.get("nccl_bytes", 0)},
        "nccl_latency": {
            "timed_calls": traced.get("nccl_timed", 0.0),
            "traced_mean_us": (round(traced.get("nccl_latency_ns", 0.0) / nccl_calls / 1e3, 2)
                               if nccl_calls else None),
            "job_mean_wall_us": (round(own.get("nccl_wall_s", 0.0) / own_nccl * 1e6, 2)
                                 if own_nccl else None)},
        "python_entries": {"traced": traced.get("python", 0.0), "own": own.get("python", 0)},
        "device_kernels_profiler": None if prof is None else prof["device_kernels"],
        "step_s": {"untraced_medians": untraced, "traced_medians": timed},
        "cost": (round(statistics.median(timed) / statistics.median(untraced) - 1, 4)
                 if untraced and timed else None),
        "cost_variants": variant_costs(phases),
    }


def checks(result: dict[str, Any], max_count_error: float = MAX_COUNT_ERROR,
           max_cost: float = MAX_COST) -> list[dict[str, Any]]:
    """Each check of a run's figures against its target: name, value, target, ``ok``; a
    figure the run did not reach fails its check."""
    f = result.get("figures") or {}
    out: list[dict[str, Any]] = []

    def check(name: str, value: Any, target: str, ok: bool) -> None:
        out.append({"name": name, "value": value, "target": target, "ok": bool(ok)})

    def within(name: str, pair: dict[str, float] | None) -> None:
        err = _ratio_error(*(None, None) if not pair else (pair["traced"], pair["own"]))
        check(f"{name}: traced vs the job's own, relative error", err,
              f"<= {max_count_error:g}", err is not None and err <= max_count_error)

    launches = f.get("launches")
    where = ("at the driver, against the kernels the profiler saw run"
             if (launches or {}).get("at") == "driver" else "runtime API")
    within(f"kernel launches ({where})", launches)
    within("copies (calls)", f.get("copies"))
    for kind, pair in (f.get("copy_bytes") or {}).items():
        if pair["own"] or pair["traced"]:
            within(f"copy bytes {kind}", pair)
    if not any(p["own"] for p in (f.get("copy_bytes") or {}).values()):
        check("copy bytes: any direction counted by the job", None, "> 0", False)
    within("synchronisations", f.get("synchronisations"))
    nccl = f.get("nccl_collectives")
    check("NCCL collectives: traced vs the job's own", nccl, "equal, > 0",
          bool(nccl) and nccl["own"] > 0 and nccl["traced"] == nccl["own"])
    nbytes = f.get("nccl_bytes")
    check("NCCL bytes: traced vs the job's own", nbytes, "equal, > 0",
          bool(nbytes) and nbytes["own"] > 0 and nbytes["traced"] == nbytes["own"])
    lat = f.get("nccl_latency") or {}
    ok = (nccl is not None and lat.get("timed_calls") == nccl["traced"]
          and lat.get("traced_mean_us") is not None and lat.get("job_mean_wall_us") is not None
          and 0 < lat["traced_mean_us"] <= lat["job_mean_wall_us"])
    check("NCCL latency: every call timed, 0 < traced mean <= the job's mean wall time (us)",
          lat, "timed = calls; traced <= job", ok)
    py = f.get("python_entries")
    check("Python function entries: traced vs the job's own calls", py, ">= own, own > 0",
          bool(py) and py["own"] > 0 and py["traced"] >= py["own"])
    cost = f.get("cost")
    check("cost on the job's step time (traced / untraced median - 1)", cost,
          f"<= {max_cost:g}", cost is not None and cost <= max_cost)
    return out


def judged(result: dict[str, Any], args: argparse.Namespace) -> int:
    result["checks"] = checks(result, args.max_count_error, args.max_cost)
    result["ok"] = bool(result["checks"]) and all(c["ok"] for c in result["checks"])
    for c in result["checks"]:
        print(f"{'ok    ' if c['ok'] else 'FAILED'} {c['name']}: {json.dumps(c['value'])} "
              f"(target {c['target']})", flush=True)
    return 0 if result["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--cpu", action="store_true",
                        help="no GPU: a NumPy job calling the stand-in libraries")
    parser.add_argument("--steps", type=int, default=300, help="steps per phase")
    parser.add_argument("--cost-rounds", type=int, default=0, metavar="R",
                        help="after the counting phases, R rounds of the probe's settings "
                             f"side by side ({', '.join(COST_VARIANTS)}), each round's "
                             "cost against its own untraced phase (default: 0, none)")
    parser.add_argument("--cost-steps", type=int, default=1000, metavar="N",
                        help="steps per cost phase (default: 1000)")
    parser.add_argument("--max-count-error", type=float, default=MAX_COUNT_ERROR)
    parser.add_argument("--max-cost", type=float, default=MAX_COST)
    parser.add_argument("--judge", type=Path, metavar="TRACE",
                        help="judge a kept trace.json against the targets; run nothing")
    parser.add_argument("--refigure", action="store_true",
                        help="with --judge: make the figures again from the kept counts of "
                             "each phase (a trace kept before the figures changed)")
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--libdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job is not None:
        if args.cpu:
            cpu_job(args.job, args.libdir, args.steps)
        else:
            torch_job(args.job, args.steps)
        return 0
    if args.judge is not None:
        result = json.loads(args.judge.read_text())
        if args.refigure and result.get("phase_results"):
            result["figures"] = figures(result["phase_results"])
        status = judged(result, args)
        return status
    if args.outdir is None:
        parser.error("OUTDIR is needed (or --judge TRACE)")
    if args.steps < 1 or args.cost_steps < 1 or args.cost_rounds < 0:
        parser.error("--steps and --cost-steps must be at least 1, --cost-rounds at least 0")
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE / "src"))
    os.environ["PYTHONPATH"] = f"{HERE / 'src'}:{os.environ.get('PYTHONPATH', '')}"
    started = time.monotonic()
    job = "NumPy, stand-in libraries" if args.cpu else "PyTorch on the GPU"
    say(f"eBPF capture against the job's own counts ({job}; {len(PHASES)} phases of "
        f"{args.steps} steps" + (f", then {args.cost_rounds} cost rounds of "
                                 f"{len(COST_VARIANTS)} phases of {args.cost_steps} steps"
                                 if args.cost_rounds else "") + ")")
    try:
        result = measure(args, out)
        for name, cost in (result["figures"]["cost_variants"] or {}).items():
            say(f"cost {name}: median {cost['median']} of rounds {cost['per_round']}, "
                f"{cost['calls_per_phase']} calls traced per phase")
        status = judged(result, args)
    except Exception as exc:  # the run could not be made: said and kept
        result = {"cpu": args.cpu, "error": f"{type(exc).__name__}: {exc}", "ok": False}
        print(f"FAILED the run could not be made: {result['error']}", flush=True)
        status = 1
    result["seconds"] = round(time.monotonic() - started, 1)
    sys.path.insert(0, str(HERE / "bench"))
    from provenance import arguments, write_result

    write_result(out / "trace.json", result, arguments(args), indent=1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
