"""Merge and judge the steps of ``scripts/gpu_proof.sh`` into ``OUTDIR/gpu_proof.json``.

Reads what the steps left in OUTDIR (``nvml/``: the NVML tests' output and exit status and
the recording; ``trace.json`` of scripts/gpu_trace_check.py; ``alarms/summary.json`` of
scripts/gpu_alarms.py), adds the code revision (commit and dirty paths), date, host, driver
and GPU and every setting, judges every figure against its target and writes one JSON. Exit
status 1 when any check fails, else 0.

Checks (each with its value, target and ``ok``):

* nvml: the NVML probes against ``nvidia-smi`` (tests/test_gpu_real.py) passed; the
  recording was made (with ``--cpu``: refused, "no GPU", and the kept H200 recording's
  coverage computed instead);
* trace: every check of scripts/gpu_trace_check.py (counts within ``--max-count-error``,
  NCCL exact, cost within ``--max-cost``);
* alarms: no live alert in the clean span (``--max-clean-alerts``) of at least
  ``--min-clean-s``, at most ``--max-clean-share`` of its batch windows flagged; every fault
  kind tried (ran, or refused with a reason; with ``--cpu`` the kinds without a stand-in
  refused "no GPU"); per kind that ran: alerted live, first alert within ``--max-alert-s``,
  naming the expected subsystem (GPU; the CPU for the data loader), and alerted in batch
  naming it (with ``--alarm-verdicts recorded``: only that each figure was measured, for a
  dry run on a host whose CPUs a busy loop cannot change much);
* the whole run within ``--max-total-s``.

Usage: python3 scripts/gpu_proof.py OUTDIR [--cpu] [--started EPOCH_S] [targets]
       python3 scripts/gpu_proof.py --judge OUTDIR/gpu_proof.json [targets]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "scripts"))
sys.path.insert(0, str(HERE / "bench"))
import gpu_trace_check  # noqa: E402

MAX_ALERT_S = 5.0
MAX_CLEAN_ALERTS = 0
MAX_CLEAN_SHARE = 0.005
MIN_CLEAN_S = 60.0
MAX_TOTAL_S = 480.0
NO_GPU = "refused: no GPU (dry run, --cpu)"
#: the hand-written NVML fixtures a recording may later replace, and the kept H200 one
HAND_WRITTEN = ("h100_sxm5_x2.json", "h100_mig_x1.json")
KEPT_H200 = "h200_x1.json"
FIXTURES = HERE / "tests" / "fixtures" / "nvml"


def coverage(recording: dict[str, Any]) -> dict[str, Any]:
    """Per hand-written fixture: the calls of its first device (name and arguments) that
    ``recording`` answers on its first device without an error, and those it does not."""
    def answered(fixture: dict[str, Any]) -> dict[str, bool]:
        calls = fixture["devices"][0]["calls"] if fixture.get("devices") else []
        return {f"{c['fn']}{json.dumps(c.get('args', []))}": "error" not in c for c in calls}

    got = answered(recording)
    out = {}
    for name in HAND_WRITTEN:
        want = answered(json.loads((FIXTURES / name).read_text()))
        covered = sorted(k for k in want if got.get(k))
        out[name] = {"calls": len(want), "covered": len(covered),
                     "not_covered": sorted(set(want) - set(covered))}
    return out


def nvml_step(out: Path, cpu: bool) -> dict[str, Any]:
    step: dict[str, Any] = {}
    rc = out / "nvml" / "pytest.rc"
    step["pytest_rc"] = int(rc.read_text()) if rc.is_file() else None
    text = out / "nvml" / "pytest.txt"
    step["pytest_tail"] = text.read_text(errors="replace").strip().splitlines()[-1:] \
        if text.is_file() else None
    step["tests"] = "replayed NVML (tests/test_probes_gpu.py)" if cpu else \
        "tests/test_gpu_real.py (the probes against nvidia-smi)"
    recording = out / "nvml" / "recorded.json"
    if cpu:
        step["recording"] = NO_GPU
        step["coverage_of"] = f"tests/fixtures/nvml/{KEPT_H200} (kept, as a recording's stand-in)"
        step["coverage"] = coverage(json.loads((FIXTURES / KEPT_H200).read_text()))
    elif recording.is_file():
        data = json.loads(recording.read_text())
        step["recording"] = "recorded"
        step["recording_devices"] = len(data.get("devices", []))
        step["coverage_of"] = "nvml/recorded.json"
        step["coverage"] = coverage(data)
    else:
        step["recording"] = "not recorded (see nvml/record.txt)"
    return step


def gpu_identity(cpu: bool) -> dict[str, Any]:
    if cpu:
        return {"driver": None, "gpus": [], "note": "dry run without a GPU (--cpu)"}
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.default_limit,"
             "clocks.max.sm,pci.bus_id", "--format=csv,noheader"], capture_output=True,
            text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return {"driver": None, "gpus": [], "error": str(exc)}
    rows = [[v.strip() for v in line.split(",")] for line in text.strip().splitlines()]
    keys = ("name", "driver", "memory_total", "power_default_limit", "clocks_max_sm", "bus_id")
    gpus = [dict(zip(keys, row, strict=False)) for row in rows]
    return {"driver": gpus[0]["driver"] if gpus else None, "gpus": gpus}


def _load(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    # the step's own options stay; its revision, date and host are the proof's own
    data["step_settings"] = (data.pop("provenance", None) or {}).get("settings")
    return data


def checks(proof: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    cpu = proof["cpu"]
    out: list[dict[str, Any]] = []

    def check(step: str, name: str, value: Any, target: str, ok: bool) -> None:
        out.append({"step": step, "name": name, "value": value, "target": target,
                    "ok": bool(ok)})

    nvml = proof["steps"]["nvml"]
    check("nvml", "NVML probe tests: pytest exit status", nvml["pytest_rc"], "0",
          nvml["pytest_rc"] == 0)
    want = NO_GPU if cpu else "recorded"
    check("nvml", "NVML fixtures re-recorded from the driver", nvml["recording"], want,
          nvml["recording"] == want)
    covered = nvml.get("coverage") or {}
    check("nvml", "recording's coverage of the hand-written fixtures computed",
          {k: f"{v['covered']}/{v['calls']}" for k, v in covered.items()},
          "every hand-written fixture", set(covered) == set(HAND_WRITTEN))

    trace = proof["steps"]["trace"]
    if trace is None or "figures" not in trace:
        check("trace", "eBPF capture against the job's own counts",
              None if trace is None else trace.get("error"), "run", False)
    else:
        for c in gpu_trace_check.checks(trace, args.max_count_error, args.max_cost):
            check("trace", c["name"], c["value"], c["target"], c["ok"])

    alarms = proof["steps"]["alarms"]
    if alarms is None or "live_faults" not in alarms or "batch_clean" not in alarms:
        check("alarms", "fault kinds against a live watch and in batch",
              None if alarms is None else "incomplete (see alarms/)", "run", False)
    else:
        recorded = args.alarm_verdicts == "recorded"
        clean = alarms["live_clean"]
        n = len({a["id"] for a in clean["firing"]})
        check("alarms", "live alert episodes in the clean span", n,
              f"<= {args.max_clean_alerts}", n <= args.max_clean_alerts)
        check("alarms", "clean span's length (s)", clean["seconds"], f">= {args.min_clean_s:g}",
              clean["seconds"] >= args.min_clean_s - 1)
        share = alarms["batch_clean"].get("flagged_share")
        check("alarms", "batch clean run: share of windows flagged", share,
              f"<= {args.max_clean_share:g}", share is not None and share <= args.max_clean_share)
        ran = {f["kind"]: f for f in alarms["live_faults"]}
        refused = {r["kind"]: r["reason"] for r in alarms.get("refused", [])}
        kinds = alarms.get("kinds", [])
        check("alarms", "every fault kind tried: ran, or refused with a reason",
              {"ran": sorted(ran), "refused": refused}, "ran + refused = " + ",".join(kinds),
              set(ran) | set(refused) == set(kinds) and not set(ran) & set(refused)
              and all(refused.values())
              and all(f.get("status", "ran") == "ran" for f in ran.values()))
        if cpu:
            from gpu_alarms import KINDS

            need = sorted(k for k in kinds if KINDS[k]["cpu"] is None)
            check("alarms", "kinds without a CPU stand-in refused 'no GPU'",
                  sorted(k for k, r in refused.items() if r == NO_GPU), str(need),
                  sorted(k for k, r in refused.items() if r == NO_GPU) == need)
        for kind, f in ran.items():
            firing = f.get("firing")
            first = min(firing, key=lambda a: a["after_s"]) if firing else None
            expect = f.get("expected_subsystem")
            batch = f.get("batch")
            live_value = None if first is None else {k: first[k] for k in (
                "after_s", "subsystem", "claim")}
            if recorded:
                check("alarms", f"{kind}: live and batch figures measured",
                      {"live": live_value, "batch": batch}, "measured (verdicts recorded)",
                      firing is not None and batch is not None)
                continue
            check("alarms", f"{kind}: live alert, time from the fault's start (s)", live_value,
                  f"alerted, <= {args.max_alert_s:g}",
                  first is not None and first["after_s"] <= args.max_alert_s)
            check("alarms", f"{kind}: live first alert names the subsystem",
                  None if first is None else first["subsystem"], str(expect),
                  first is not None and first["subsystem"] == expect)
            check("alarms", f"{kind}: batch episode names the subsystem", batch, str(expect),
                  bool(batch) and batch.get("alerted") and batch.get("subsystem") == expect)
    total = proof.get("seconds")
    check("proof", "whole run (s)", total, f"<= {args.max_total_s:g}",
          total is not None and total <= args.max_total_s)
    return out


def judged(proof: dict[str, Any], args: argparse.Namespace) -> int:
    proof["targets"] = {k: getattr(args, k) for k in (
        "max_count_error", "max_cost", "max_alert_s", "max_clean_alerts", "max_clean_share",
        "min_clean_s", "max_total_s", "alarm_verdicts")}
    proof["checks"] = checks(proof, args)
    proof["failed"] = [c["name"] for c in proof["checks"] if not c["ok"]]
    proof["ok"] = not proof["failed"]
    for c in proof["checks"]:
        print(f"{'ok    ' if c['ok'] else 'FAILED'} [{c['step']}] {c['name']}: "
              f"{json.dumps(c['value'])[:300]} (target {c['target']})", flush=True)
    print("every check met" if proof["ok"] else f"{len(proof['failed'])} check(s) failed",
          flush=True)
    return 0 if proof["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("outdir", type=Path, nargs="?")
    parser.add_argument("--cpu", action="store_true", help="the steps ran as a dry run")
    parser.add_argument("--started", type=float, help="the run's start (Unix seconds)")
    parser.add_argument("--settings", default="{}",
                        help="the settings the steps ran with (JSON), kept in full")
    parser.add_argument("--max-count-error", type=float, default=gpu_trace_check.MAX_COUNT_ERROR)
    parser.add_argument("--max-cost", type=float, default=gpu_trace_check.MAX_COST)
    parser.add_argument("--max-alert-s", type=float, default=MAX_ALERT_S)
    parser.add_argument("--max-clean-alerts", type=int, default=MAX_CLEAN_ALERTS)
    parser.add_argument("--max-clean-share", type=float, default=MAX_CLEAN_SHARE)
    parser.add_argument("--min-clean-s", type=float, default=MIN_CLEAN_S)
    parser.add_argument("--max-total-s", type=float, default=MAX_TOTAL_S)
    parser.add_argument("--alarm-verdicts", choices=("required", "recorded"), default="required",
                        help="recorded: the fault kinds' alerts are measured, not judged")
    parser.add_argument("--judge", type=Path, metavar="PROOF",
                        help="judge a kept gpu_proof.json against the targets; run nothing")
    args = parser.parse_args(argv)
    if args.judge is not None:
        return judged(json.loads(args.judge.read_text()), args)
    if args.outdir is None:
        parser.error("OUTDIR is needed (or --judge PROOF)")
    out = args.outdir
    proof: dict[str, Any] = {
        "cpu": args.cpu, **gpu_identity(args.cpu),
        "settings": json.loads(args.settings),
        "seconds": None if args.started is None else round(time.time() - args.started, 1),
        "steps": {"nvml": nvml_step(out, args.cpu), "trace": _load(out / "trace.json"),
                  "alarms": _load(out / "alarms" / "summary.json")}}
    status = judged(proof, args)
    from provenance import arguments, write_result

    write_result(out / "gpu_proof.json", proof, arguments(args), indent=1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
