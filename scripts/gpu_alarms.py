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
batch windows, the fault run's episodes), ``watch.log``, ``alerts.jsonl`` and the analyses.

Usage: python3 scripts/gpu_alarms.py OUTDIR [--learn-s 120] [--clean-s 60] [--fault-s 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
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
                         for e in data["episodes"]][:10]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--learn-s", type=float, default=120.0)
    parser.add_argument("--clean-s", type=float, default=60.0)
    parser.add_argument("--fault-s", type=float, default=20.0)
    parser.add_argument("--cpu", action="store_true",
                        help="a dry run without a GPU: numpy training, busy-loop contention")
    args = parser.parse_args()
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="reveal-gpu-alarms-"))
    os.environ["PYTHONPATH"] = f"{HERE / 'src'}:{os.environ.get('PYTHONPATH', '')}"
    children: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {"learn_s": args.learn_s, "clean_s": args.clean_s,
                              "fault_s": args.fault_s}
    try:
        say("training job on the GPU")
        job = (["reveal.inject.workloads.numpy_train"] if args.cpu else
               ["reveal.inject.workloads.torch_train", "--device", "cuda"])
        train = subprocess.Popen([sys.executable, "-m", *job, "--duration", "1200",
                                  "--data-dir", str(work / "data")],
                                 stdout=open(out / "train.log", "wb"),  # noqa: SIM115
                                 stderr=subprocess.STDOUT)
        children.append(train)
        time.sleep(15)
        alerts_file = work / "alerts.jsonl"
        tail = AlertTail(alerts_file)
        say(f"watch (learn {args.learn_s:g} s) and a batch baseline beside it")
        watch = reveal("watch", "--state", str(work / "state"), "--learn",
                       f"{args.learn_s:g}s", "--alerts-file", str(alerts_file),
                       "--listen", "none", "--score-every", "5", "--resolve-after", "20s",
                       log=out / "watch.log")
        children.append(watch)
        base = reveal("collect", "--duration", f"{args.learn_s:g}", "--out",
                      str(work / "baseline"), "--quiet")
        base.wait()
        deadline = time.monotonic() + 240
        while "; scoring" not in (out / "watch.log").read_text(errors="replace"):
            if watch.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("watch did not start scoring (see watch.log)")
            time.sleep(1)
        say(f"clean span ({args.clean_s:g} s)")
        t0 = time.monotonic()
        reveal("collect", "--duration", f"{args.clean_s:g}", "--out", str(work / "clean"),
               "--quiet").wait()
        t1 = time.monotonic()
        result["live_clean"] = {"seconds": round(t1 - t0, 1), "firing": tail.firing(t0, t1)}
        gap = 30.0
        span = 10 + 2 * args.fault_s + gap + 25
        say(f"fault span ({span:g} s): matmul, then copy")
        fault = reveal("collect", "--duration", f"{span:g}", "--out", str(work / "fault"),
                       "--quiet")
        faults = []
        time.sleep(10)
        for kind in ("matmul", "copy"):
            start = time.monotonic()
            code = BUSY if args.cpu else CONTEND
            subprocess.run([sys.executable, "-c", code, str(args.fault_s), kind], check=False,
                           timeout=args.fault_s + 60)
            end = time.monotonic()
            faults.append((kind, start, end))
            time.sleep(gap)
        fault.wait()
        time.sleep(5)
        result["live_faults"] = [
            {"kind": kind, "seconds": round(end - start, 1),
             "firing": tail.firing(start, end + gap)} for kind, start, end in faults]
        result["fault_offsets_s"] = {kind: round(start - t1, 1) for kind, start, _ in faults}
        tail.done = True
        watch.terminate()
        watch.wait(timeout=30)
        (out / "alerts.jsonl").write_bytes(alerts_file.read_bytes() if alerts_file.is_file()
                                           else b"")
        say("analyses")
        result["batch_clean"] = analyse(work / "clean", work / "baseline", out, "clean")
        result["batch_fault"] = analyse(work / "fault", work / "baseline", out, "fault")
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()
        (out / "summary.json").write_text(json.dumps(result, indent=1))
        say("done")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
