"""Alarms on a real GPU host: a watch and batch analysis beside a PyTorch training job.

On a host with an NVIDIA GPU, its driver and a CUDA build of PyTorch, this keeps a training
job running on the GPU the whole time (ordinary activity) and, in one go:

* starts ``reveal watch`` (``--learn LEARN_S``, alerts to a JSON-lines file whose lines are
  stamped on arrival) and, beside it, records a batch baseline of the same length;
* once the watch scores: a clean span (no fault; batch run ``clean``), then a fault span
  (batch run ``fault``) in which a second process contends for the GPU twice: bf16 matrix
  products (the SMs) and a 32 GiB copy loop (memory and DRAM), each ``FAULT_S`` long;
* analyses ``clean`` and ``fault`` against the baseline.

It writes ``OUTDIR/summary.json`` (alert episodes in the clean span, time from each fault's
start to its first alert and the alert's subsystem and claim, flagged share of the clean
batch windows, the fault run's episodes, and each check against its target),
``watch.log``, ``alerts.jsonl`` and the analyses.

The checks: no live alert in the clean span (``--max-clean-alerts``); both contentions
alerted (``--min-alerted``), each first alert within ``--max-alert-s`` of its start (the
live suite's p95 target); at most ``--max-clean-share`` of the clean batch windows flagged
(the validation's clean-window target); an episode in the batch fault run
(``--min-fault-episodes``). The exit status is 1 when any check fails (or the run could
not be made), else 0. ``--judge SUMMARY`` judges a kept
summary again against the targets given, running nothing.

``--kinds`` chooses the fault kinds (default ``matmul,copy``, the two above), in order, from:
``matmul``, ``copy``; ``throttle`` (GPU 0's clocks locked low with ``nvidia-smi -lgc`` and
its power limit lowered to the least with ``-pl``, both restored after, each attempt kept);
``tenant`` (a second tenant's training job on the GPU); ``memfull`` (all but 1 GiB of the
free GPU memory held); ``h2d`` (pinned buffers copied to the GPU on two streams: PCIe and
host memory contention); ``loader`` (busy loops on every CPU starve the job's data
loader); ``nccl_stall`` (two NCCL ranks, one entering an all-reduce late; needs two GPUs).
A kind the driver or host refuses (a VM may refuse clock and power settings; one GPU
cannot hold two NCCL ranks) is kept under ``refused`` with the reason; each kind that ran
is also scored in batch (``batch``: the first episode of the fault run overlapping the
fault or the gap after it: alerted, its start after the fault's, subsystem, claim).
With ``--cpu``, ``tenant`` is a NumPy job, ``h2d`` a host-memory copy loop, ``loader`` the
same busy loops, and the others are refused ("no GPU").

``--cpu`` is a dry run without a GPU (a NumPy training job, busy-loop contention), so that
the script cannot rot; with ``--warmup-s``, ``--gap-s`` and ``--resolve-after-s`` short it
takes a minute or two. On a host whose CPUs are already saturated a busy loop changes
little, so a dry run there is held to targets of its own (tests/test_gpu_scripts.py).

Usage: python3 scripts/gpu_alarms.py OUTDIR [--learn-s 120] [--clean-s 60] [--fault-s 20]
       python3 scripts/gpu_alarms.py --judge OUTDIR/summary.json [targets]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
#: The targets the checks hold a run to (the live suite's p95 time to alert; the
#: validation's share of clean windows flagged).
MAX_CLEAN_ALERTS = 0
MAX_ALERT_S = 8.0
MAX_CLEAN_SHARE = 0.005
#: The watch's shortest learn without --allow-short-learn (reveal.live.keeper).
RECOMMENDED_LEARN_S = 63.0
CONTEND = r"""
import sys, time, torch
deadline = time.monotonic() + float(sys.argv[1])
if sys.argv[2] == "copy":
    a = torch.empty(16 * 2**30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    while time.monotonic() < deadline:
        b.copy_(a); a.copy_(b); torch.cuda.synchronize()
else:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.monotonic() < deadline:
        a = (a @ a).clamp_(-1, 1); torch.cuda.synchronize()
"""
BUSY = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\n" \
       "while time.monotonic() < end: pass\n"
#: A second tenant on the GPU: its own training job. With ``--cpu``, a NumPy one.
TENANT = "reveal.inject.workloads.torch_train"
#: GPU memory nearly full: all but 1 GiB of what is free, held.
MEMFULL = r"""
import sys, time, torch
deadline = time.monotonic() + float(sys.argv[1])
free, _ = torch.cuda.mem_get_info()
held = torch.empty(max(free - 2**30, 0), dtype=torch.uint8, device="cuda")
held.fill_(1)
torch.cuda.synchronize()
while time.monotonic() < deadline:
    time.sleep(0.1)
"""
#: Host-to-device copies starved: pinned buffers copied to the GPU on two streams at once
#: (the PCIe link and the host's memory). With ``--cpu``, a memory-bandwidth loop.
H2D = r"""
import sys, time, torch
deadline = time.monotonic() + float(sys.argv[1])
src = torch.empty(2**30, dtype=torch.uint8).pin_memory()
dst = [torch.empty(2**30, dtype=torch.uint8, device="cuda") for _ in range(2)]
streams = [torch.cuda.Stream() for _ in range(2)]
while time.monotonic() < deadline:
    for stream, d in zip(streams, dst):
        with torch.cuda.stream(stream):
            d.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
"""
MEMBW = r"""
import sys, time
import numpy as np
deadline = time.monotonic() + float(sys.argv[1])
a = np.ones(2**26, dtype=np.uint8)
b = np.empty_like(a)
while time.monotonic() < deadline:
    np.copyto(b, a); np.copyto(a, b)
"""
#: A collective that stalls: two NCCL ranks (GPUs 0 and 1), the second entering its
#: all-reduce FAULT_S late while the first waits in it.
NCCL_STALL = r"""
import os, sys, tempfile, time
import torch, torch.distributed as dist, torch.multiprocessing as mp
def rank(r, late, path):
    torch.cuda.set_device(r)
    dist.init_process_group("nccl", init_method="file://" + path, rank=r, world_size=2)
    t = torch.ones(2**20, device="cuda")
    dist.all_reduce(t); torch.cuda.synchronize()
    if r == 1:
        time.sleep(late)
    dist.all_reduce(t); torch.cuda.synchronize()
    dist.destroy_process_group()
if __name__ == "__main__":
    mp.spawn(rank, args=(float(sys.argv[1]), tempfile.mktemp()), nprocs=2)
"""
#: Every fault kind: what the contender is on a GPU and with --cpu (None: refused there),
#: and the subsystem an alert must name (GPU, CPU mode). "loader": busy loops on every CPU
#: starve the training job's data loader, hence the GPU; the CPU is what starved it.
KINDS: dict[str, dict[str, Any]] = {
    "matmul": {"gpu": ("code", CONTEND), "cpu": ("code", BUSY), "expect": ("gpu", "cpu")},
    "copy": {"gpu": ("code", CONTEND), "cpu": ("code", BUSY), "expect": ("gpu", "cpu")},
    "throttle": {"gpu": ("throttle", None), "cpu": None, "expect": ("gpu", None)},
    "tenant": {"gpu": ("module", TENANT), "cpu": ("module", "reveal.inject.workloads.numpy_train"),
               "expect": ("gpu", "cpu")},
    "memfull": {"gpu": ("code", MEMFULL), "cpu": None, "expect": ("gpu", None)},
    "h2d": {"gpu": ("code", H2D), "cpu": ("code", MEMBW), "expect": ("gpu", "memory")},
    "loader": {"gpu": ("busy_all", BUSY), "cpu": ("busy_all", BUSY), "expect": ("cpu", "cpu")},
    "nccl_stall": {"gpu": ("code", NCCL_STALL), "cpu": None, "expect": ("gpu", None)},
}
PROOF_KINDS = ("throttle", "tenant", "memfull", "h2d", "loader", "nccl_stall")


def smi(*argv: str) -> dict[str, Any]:
    """``nvidia-smi ARGV``: its command, exit status and output (never raises)."""
    cmd = ["nvidia-smi", *argv]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        return {"cmd": " ".join(cmd), "rc": done.returncode,
                "output": (done.stdout + done.stderr).strip()[-500:]}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"cmd": " ".join(cmd), "rc": None, "output": str(exc)}


def gpu_count() -> int:
    listed = smi("-L")
    return sum(line.startswith("GPU ") for line in listed["output"].splitlines()) \
        if listed["rc"] == 0 else 0


def refused_up_front(kind: str, cpu: bool, gpus: int) -> str | None:
    """Why ``kind`` cannot be tried here (None: try it)."""
    if cpu and KINDS[kind]["cpu"] is None:
        return "refused: no GPU (dry run, --cpu)"
    if not cpu and kind == "nccl_stall" and gpus < 2:
        return f"refused: {gpus} GPU(s); a stalled collective needs two NCCL ranks on two " \
               "GPUs (NCCL refuses two ranks on one GPU)"
    return None


def throttle(fault_s: float) -> dict[str, Any]:
    """Lock GPU 0's clocks low (``nvidia-smi -lgc``) and lower its power limit to the least
    (``-pl``) for ``fault_s``; always restore both. Each attempt is kept; refused when the
    driver refused both."""
    query = smi("-i", "0", "--query-gpu=power.limit,power.min_limit,clocks.max.sm",
                "--format=csv,noheader,nounits")
    try:
        limit, least, max_sm = (float(v) for v in query["output"].split(","))
    except ValueError:
        return {"status": "refused", "reason": f"nvidia-smi answered {query}",
                "attempts": [query]}
    low = max(int(max_sm) // 4, 100)
    attempts = [smi("-i", "0", "-lgc", f"{low},{low}"), smi("-i", "0", "-pl", f"{least:g}")]
    applied = [a for a in attempts if a["rc"] == 0]
    try:
        if applied:
            time.sleep(fault_s)
    finally:
        restored = [smi("-i", "0", "-rgc"), smi("-i", "0", "-pl", f"{limit:g}")]
    out: dict[str, Any] = {"attempts": attempts, "restored": restored}
    if not applied:
        return {**out, "status": "refused", "reason": "the driver refused both: " + "; ".join(
            f"{a['cmd']}: {a['output']}" for a in attempts)}
    return {**out, "status": "ran"}


def contend(kind: str, fault_s: float, cpu: bool, work: Path) -> dict[str, Any]:
    """Run fault ``kind`` for ``fault_s``: ``status`` ran (or refused, with the reason)."""
    how, what = KINDS[kind]["cpu" if cpu else "gpu"]
    if how == "throttle":
        return throttle(fault_s)
    if how == "module":
        argv = [[sys.executable, "-m", what, "--duration", f"{fault_s:g}", "--data-dir",
                 str(work / f"{kind}-data"), *([] if cpu else ["--device", "cuda"])]]
    elif how == "busy_all":
        argv = [[sys.executable, "-c", what, str(fault_s)]] * (os.cpu_count() or 1)
    else:  # from a file: a spawned child (nccl_stall's ranks) imports its parent's code
        script = work / f"contend_{kind}.py"
        script.write_text(what)
        argv = [[sys.executable, str(script), str(fault_s), kind]]
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for a in argv]
    codes, errors = [], []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=fault_s + 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        codes.append(proc.returncode)
        if proc.returncode:
            errors.append(err.decode(errors="replace").strip()[-300:])
    if any(codes):
        return {"status": "refused" if not cpu else "failed", "reason": f"exit {codes}: "
                + " | ".join(errors)}
    return {"status": "ran"}


def say(text: str) -> None:
    print(f"== {time.strftime('%T')} {text}", flush=True)


def reveal(*argv: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m reveal.cli ARGV`` in the background, output to ``log``."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 (kept by the child)
    return subprocess.Popen([sys.executable, "-m", "reveal.cli", *argv], stdout=out,
                            stderr=subprocess.STDOUT)


class AlertTail:
    """Follows the watch's alerts file; keeps each line with its arrival (monotonic s)."""

    def __init__(self, path: Path) -> None:
        self.path, self.lines, self.done = path, [], False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        offset = 0
        while not self.done:
            if self.path.is_file():
                with open(self.path, "rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                whole = chunk[:chunk.rfind(b"\n") + 1]
                offset += len(whole)
                for line in whole.splitlines():
                    with contextlib.suppress(ValueError):
                        self.lines.append((time.monotonic(), json.loads(line)))
            time.sleep(0.2)

    def firing(self, since: float, until: float) -> list[dict[str, Any]]:
        return [{"after_s": round(t - since, 2), "subsystem": e.get("subsystem"),
                 "claim": e.get("claim"), "id": e.get("id")}
                for t, e in self.lines if e.get("event") == "firing" and since <= t <= until]


def analyse(run: Path, baseline: Path, out: Path, name: str) -> dict[str, Any]:
    report = out / f"{name}.json"
    with open(out / f"{name}.txt", "wb") as text:
        subprocess.run([sys.executable, "-m", "reveal.cli", "analyze", str(run), "--baseline",
                        str(baseline), "--json", str(report), "--quiet"], stdout=text,
                       stderr=subprocess.STDOUT, timeout=400, check=False)
    if not report.is_file():
        return {"error": f"no report (see {name}.txt)"}
    data = json.loads(report.read_text())
    report.unlink()  # large (every window's scores); the summary keeps what matters
    summary = data["summary"]
    return {"windows": summary["windows"], "anomalous_windows": summary["anomalous_windows"],
            "flagged_share": round(summary["anomalous_windows"] / max(1, summary["windows"]), 4),
            "episodes": [{"start_ns": e.get("start_ns"), "end_ns": e.get("end_ns"),
                          "subsystem": e.get("subsystem"), "claim": e.get("claim")}
                         for e in data["episodes"]][:40]}


#: An episode may open up to one window (3 s) before the fault it shows: its first window
#: starts before the fault and ends in it.
WINDOW_S = 3.0


def batch_per_fault(episodes: list[dict[str, Any]], start_s: float, end_s: float,
                    gap_s: float) -> dict[str, Any]:
    """A fault scored in batch as the CPU suites are: the first episode of the fault run
    opening in ``[start - one window, end + gap)`` (monotonic seconds, the collector's
    clock; an episode open since before that belongs to what came before): alerted, its
    first window's start after the fault's start, subsystem and claim."""
    lo, hi = start_s * 1e9, (end_s + gap_s) * 1e9
    hits = [e for e in episodes if e.get("start_ns") is not None
            and lo - WINDOW_S * 1e9 <= e["start_ns"] < hi]
    if not hits:
        return {"alerted": False}
    first = min(hits, key=lambda e: e["start_ns"])
    return {"alerted": True, "after_s": round((first["start_ns"] - lo) / 1e9, 2),
            "subsystem": first["subsystem"], "claim": first["claim"]}


def checks(result: dict[str, Any], max_clean_alerts: int = MAX_CLEAN_ALERTS,
           max_alert_s: float = MAX_ALERT_S, max_clean_share: float = MAX_CLEAN_SHARE,
           min_alerted: int | None = None, min_fault_episodes: int = 1) -> list[dict[str, Any]]:
    """Each check of a run's ``result`` (summary.json) against its target: name, value,
    target and ``ok``. ``min_alerted``: contentions that must alert (None: every one); a
    figure the run did not reach fails its check."""
    out: list[dict[str, Any]] = []

    def check(name: str, value: Any, target: str, ok: bool) -> None:
        out.append({"name": name, "value": value, "target": target, "ok": bool(ok)})

    clean = result.get("live_clean")
    n = None if clean is None else len({a["id"] for a in clean["firing"]})
    check("live alert episodes in the clean span", n, f"<= {max_clean_alerts}",
          n is not None and n <= max_clean_alerts)
    faults = result.get("live_faults")
    firsts = {f["kind"]: min((a["after_s"] for a in f["firing"]), default=None)
              for f in faults or []}
    alerted = sorted(k for k, t in firsts.items() if t is not None)
    need = len(firsts) if min_alerted is None else min_alerted
    check("contentions alerted", alerted, f">= {need} of {len(firsts)}",
          faults is not None and len(firsts) >= 1 and len(alerted) >= need)
    slowest = max((t for t in firsts.values() if t is not None), default=None)
    check("time from a contention's start to its first alert, slowest (s)", slowest,
          f"<= {max_alert_s:g}", (slowest is None and need == 0)
          or (slowest is not None and slowest <= max_alert_s))
    share = (result.get("batch_clean") or {}).get("flagged_share")
    check("batch clean run: share of windows flagged", share, f"<= {max_clean_share:g}",
          share is not None and share <= max_clean_share)
    episodes = (result.get("batch_fault") or {}).get("episodes")
    count = None if episodes is None else len(episodes)
    check("batch fault run: episodes", count, f">= {min_fault_episodes}",
          count is not None and count >= min_fault_episodes)
    return out


def judged(result: dict[str, Any], args: argparse.Namespace) -> int:
    """Put the checks into ``result``, say each, and return the exit status."""
    result["checks"] = checks(result, args.max_clean_alerts, args.max_alert_s,
                              args.max_clean_share, args.min_alerted,
                              args.min_fault_episodes)
    result["ok"] = all(c["ok"] for c in result["checks"])
    for c in result["checks"]:
        print(f"{'ok    ' if c['ok'] else 'FAILED'} {c['name']}: {c['value']} "
              f"(target {c['target']})", flush=True)
    return 0 if result["ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--learn-s", type=float, default=120.0)
    parser.add_argument("--clean-s", type=float, default=60.0)
    parser.add_argument("--fault-s", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=15.0,
                        help="the training job runs this long before the watch starts")
    parser.add_argument("--gap-s", type=float, default=30.0,
                        help="clean time after each contention")
    parser.add_argument("--resolve-after-s", type=float, default=20.0,
                        help="the watch's --resolve-after (shorter than --gap-s)")
    parser.add_argument("--cpu", action="store_true",
                        help="a dry run without a GPU: numpy training, busy-loop contention")
    parser.add_argument("--kinds", default="matmul,copy",
                        help="fault kinds, in order, of: " + ", ".join(KINDS) + " (each "
                        "tried; one the driver or host refuses is kept with the reason)")
    parser.add_argument("--max-clean-alerts", type=int, default=MAX_CLEAN_ALERTS)
    parser.add_argument("--max-alert-s", type=float, default=MAX_ALERT_S)
    parser.add_argument("--max-clean-share", type=float, default=MAX_CLEAN_SHARE)
    parser.add_argument("--min-alerted", type=int, default=None,
                        help="contentions that must alert (default: both)")
    parser.add_argument("--min-fault-episodes", type=int, default=1)
    parser.add_argument("--judge", type=Path, metavar="SUMMARY",
                        help="judge a kept summary.json against the targets; run nothing")
    args = parser.parse_args()
    if args.judge is not None:
        return judged(json.loads(args.judge.read_text()), args)
    if args.outdir is None:
        parser.error("OUTDIR is needed (or --judge SUMMARY)")
    if not 0 < args.resolve_after_s < args.gap_s:
        parser.error("--resolve-after-s must be positive and shorter than --gap-s, so that "
                     "each contention opens an alert of its own")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        parser.error(f"--kinds: unknown {unknown}; choose from {', '.join(KINDS)}")
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="reveal-gpu-alarms-"))
    os.environ["PYTHONPATH"] = f"{HERE / 'src'}:{os.environ.get('PYTHONPATH', '')}"
    children: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {"learn_s": args.learn_s, "clean_s": args.clean_s,
                              "fault_s": args.fault_s, "gap_s": args.gap_s, "cpu": args.cpu,
                              "kinds": kinds}
    status = 1
    try:
        say("training job (NumPy, on the CPUs)" if args.cpu else "training job on the GPU")
        job = (["reveal.inject.workloads.numpy_train"] if args.cpu else
               ["reveal.inject.workloads.torch_train", "--device", "cuda"])
        # the CPU stand-in keeps BLAS on one core, as the workloads' launcher runs it
        one_core = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                     "OPENBLAS_NUM_THREADS")} if args.cpu else {}
        train = subprocess.Popen([sys.executable, "-m", *job, "--duration", "1200",
                                  "--data-dir", str(work / "data")],
                                 stdout=open(out / "train.log", "wb"),  # noqa: SIM115
                                 stderr=subprocess.STDOUT, env={**os.environ, **one_core})
        children.append(train)
        time.sleep(args.warmup_s)
        alerts_file = work / "alerts.jsonl"
        tail = AlertTail(alerts_file)
        say(f"watch (learn {args.learn_s:g} s) and a batch baseline beside it")
        short = ["--allow-short-learn"] if args.learn_s < RECOMMENDED_LEARN_S else []
        watch = reveal("watch", "--state", str(work / "state"), "--learn",
                       f"{args.learn_s:g}s", *short, "--alerts-file", str(alerts_file),
                       "--listen", "none", "--score-every", "5", "--resolve-after",
                       f"{args.resolve_after_s:g}s", log=out / "watch.log")
        children.append(watch)
        base = reveal("collect", "--duration", f"{args.learn_s:g}", "--out",
                      str(work / "baseline"), "--quiet")
        children.append(base)
        if base.wait() != 0:
            raise SystemExit("the batch baseline was not recorded")
        deadline = time.monotonic() + 240
        while "; scoring" not in (out / "watch.log").read_text(errors="replace"):
            if watch.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("watch did not start scoring (see watch.log)")
            time.sleep(1)
        say(f"clean span ({args.clean_s:g} s)")
        t0 = time.monotonic()
        clean = reveal("collect", "--duration", f"{args.clean_s:g}", "--out",
                       str(work / "clean"), "--quiet")
        children.append(clean)
        clean.wait()
        t1 = time.monotonic()
        result["live_clean"] = {"seconds": round(t1 - t0, 1), "firing": tail.firing(t0, t1)}
        # the first fault as far from the fault run's collector starting beside the watch
        # as from the fault before it: an episode that start opened (a Python process
        # importing the collector) has resolved by then, instead of taking the fault in
        gap = lead = args.gap_s
        gpus = 0 if args.cpu else gpu_count()
        refused = {k: r for k in kinds if (r := refused_up_front(k, args.cpu, gpus))}
        tried = [k for k in kinds if k not in refused]
        span = lead + len(tried) * (args.fault_s + gap) - 5
        say(f"fault span ({span:g} s): {', '.join(tried) or 'none'}"
            + (f"; refused: {', '.join(refused)}" if refused else ""))
        fault = reveal("collect", "--duration", f"{max(span, 5):g}", "--out",
                       str(work / "fault"), "--quiet")
        children.append(fault)
        faults, ran = [], {}
        time.sleep(lead)
        for kind in tried:
            start = time.monotonic()
            ran[kind] = contend(kind, args.fault_s, args.cpu, work)
            end = time.monotonic()
            if ran[kind]["status"] == "refused":
                refused[kind] = ran[kind]["reason"]
                say(f"{kind}: {ran[kind]['reason']}")
                continue
            faults.append((kind, start, end))
            time.sleep(gap)
        fault.wait()
        time.sleep(min(5.0, gap))
        expect = 1 if args.cpu else 0
        result["live_faults"] = [
            {"kind": kind, "seconds": round(end - start, 1), "status": ran[kind]["status"],
             **({"reason": ran[kind]["reason"]} if "reason" in ran[kind] else {}),
             **({"attempts": ran[kind]["attempts"], "restored": ran[kind]["restored"]}
                if "attempts" in ran[kind] else {}),
             "expected_subsystem": KINDS[kind]["expect"][expect],
             "start_s": start, "end_s": end,
             "firing": tail.firing(start, end + gap)} for kind, start, end in faults]
        result["refused"] = [
            {"kind": kind, "reason": reason, **({"attempts": ran[kind]["attempts"]}
                                                 if "attempts" in ran.get(kind, {}) else {})}
            for kind, reason in refused.items()]
        result["fault_offsets_s"] = {kind: round(start - t1, 1) for kind, start, _ in faults}
        tail.done = True
        watch.terminate()
        watch.wait(timeout=30)
        (out / "alerts.jsonl").write_bytes(alerts_file.read_bytes() if alerts_file.is_file()
                                           else b"")
        say("analyses")
        with ThreadPoolExecutor(2) as pool:  # each a child process: both at once
            done = {name: pool.submit(analyse, work / name, work / "baseline", out, name)
                    for name in ("clean", "fault")}
        result["batch_clean"] = done["clean"].result()
        result["batch_fault"] = done["fault"].result()
        for f in result["live_faults"]:
            f["batch"] = batch_per_fault(result["batch_fault"].get("episodes") or [],
                                         f.pop("start_s"), f.pop("end_s"), gap)
        status = judged(result, args)
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
        # its provenance (revision, host, command, every option) travels with it into
        # bench/results when the summary of a GPU run is kept there
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
        from provenance import arguments, write_result

        write_result(out / "summary.json", result, arguments(args), indent=1)
        say(f"done: {'every check met' if status == 0 else 'a check failed (exit 1)'}")
    print(json.dumps(result, indent=1))
    return status


if __name__ == "__main__":
    raise SystemExit(main())
