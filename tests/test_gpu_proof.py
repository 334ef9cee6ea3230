"""``scripts/gpu_proof.sh --cpu`` runs here for real, without a GPU, so that the GPU proof
cannot rot between GPU runs: the replayed-NVML tests and the recording refused "no GPU";
the eBPF capture (real uprobes through bpftrace) of a NumPy job calling the stand-in CUDA
runtime and NCCL of tests/fixtures/ebpf, against the job's own counts and with its cost
measured; the fault kinds with a CPU stand-in against a live watch and in batch, and the
others refused "no GPU"; all of it judged into one gpu_proof.json.

The dry run's counts are held to the GPU run's targets (the stand-ins are exact); its
alarms and cost to targets a busy 2-CPU host meets (figures measured, not judged). The
judging itself is checked by judging the kept JSON again against the GPU run's targets and
stricter ones: each must fail, and only in its own checks."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROOF = ROOT / "scripts" / "gpu_proof.sh"
JUDGE = ROOT / "scripts" / "gpu_proof.py"
TRACE = ROOT / "scripts" / "gpu_trace_check.py"
ALARMS = ROOT / "scripts" / "gpu_alarms.py"


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (uprobes through bpftrace)"
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.root,
              pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]
#: the dry run's targets, as gpu_proof.sh --cpu sets them
DRY = ["--alarm-verdicts", "recorded", "--max-cost", "100", "--max-alert-s", "1000",
       "--max-clean-alerts", "100", "--max-clean-share", "1", "--min-clean-s", "5",
       "--max-total-s", "600"]
#: what a busy loop meets anywhere: every figure there, none judged by its size
ANY_HOST = ["--min-alerted", "0", "--max-alert-s", "1000", "--max-clean-alerts", "100",
            "--max-clean-share", "1", "--min-fault-episodes", "0"]


def _run(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=ROOT, text=True, capture_output=True, **kw)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("proof") / "out"
    proc = _run("bash", str(PROOF), "--cpu", str(out), timeout=420,
                env={**os.environ, "PYTHON": sys.executable})
    return proc, out


def _judge(proof: Path, *targets: str) -> tuple[int, list[str]]:
    proc = _run(sys.executable, str(JUDGE), "--judge", str(proof), *targets, timeout=60)
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    return proc.returncode, failed


def test_dry_run_makes_every_step_and_keeps_one_judged_json(dry_run):
    proc, out = dry_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "every check met" in proc.stdout
    proof = json.loads((out / "gpu_proof.json").read_text())
    assert proof["cpu"] is True and proof["ok"] is True and proof["failed"] == []
    prov = proof["provenance"]
    assert len(prov["revision"]["commit"]) == 40 and "dirty" in prov["revision"]
    assert prov["date"] and prov["host"]
    assert proof["settings"]["mode"] == "cpu" and proof["settings"]["STEPS"] == 200
    assert proof["targets"]["max_count_error"] == 0.02  # the counts held to the GPU's target
    assert proof["seconds"] <= 300  # CI's budget for the dry run
    steps = {c["step"] for c in proof["checks"]}
    assert steps == {"nvml", "trace", "alarms", "proof"}

    nvml = proof["steps"]["nvml"]
    assert nvml["pytest_rc"] == 0 and "2 passed" in nvml["pytest_tail"][0]
    assert nvml["recording"] == "refused: no GPU (dry run, --cpu)"
    for fixture in ("h100_sxm5_x2.json", "h100_mig_x1.json"):
        cov = nvml["coverage"][fixture]
        assert 0 < cov["covered"] < cov["calls"]  # the H200 lacks some of the H100's calls
        assert cov["covered"] + len(cov["not_covered"]) == cov["calls"]

    figures = proof["steps"]["trace"]["figures"]
    for name in ("launches", "copies", "synchronisations", "nccl_collectives", "nccl_bytes"):
        pair = figures[name]
        assert pair["own"] > 0 and pair["traced"] == pair["own"], name  # exact on stand-ins
    assert figures["launches"]["own"] == 200 * 8  # 4 layers forward, 4 backward, per step
    assert set(figures["copy_bytes"]) == {"HtoD", "DtoH"}
    assert figures["nccl_latency"]["timed_calls"] == 200
    assert figures["python_entries"]["traced"] >= figures["python_entries"]["own"] == 1000
    assert len(figures["step_s"]["untraced_medians"]) == 2 == len(
        figures["step_s"]["traced_medians"])
    assert isinstance(figures["cost"], float)

    assert proof["steps"]["trace"]["step_settings"]["steps"] == 200
    alarms = proof["steps"]["alarms"]
    assert alarms["step_settings"]["learn_s"] == 15 and alarms["step_settings"]["cpu"] is True
    assert alarms["kinds"] == ["throttle", "tenant", "memfull", "h2d", "loader", "nccl_stall"]
    assert {r["kind"]: r["reason"] for r in alarms["refused"]} == {
        k: "refused: no GPU (dry run, --cpu)" for k in ("throttle", "memfull", "nccl_stall")}
    ran = {f["kind"]: f for f in alarms["live_faults"]}
    assert sorted(ran) == ["h2d", "loader", "tenant"]
    assert {k: f["expected_subsystem"] for k, f in ran.items()} == {
        "tenant": "cpu", "h2d": "memory", "loader": "cpu"}
    for f in ran.values():
        assert f["status"] == "ran" and 3.0 <= f["seconds"] < 60
        assert isinstance(f["firing"], list) and "alerted" in f["batch"]
        assert "start_s" not in f  # the clock readings were scored, not kept
    assert "; scoring" in (out / "alarms" / "watch.log").read_text()
    for kept in ("trace.json", "trace.txt", "nvml/pytest.txt", "alarms/summary.json",
                 "alarms/run.txt"):
        assert (out / kept).is_file(), kept


def _alarms(*argv: str) -> subprocess.CompletedProcess[str]:
    return _run(sys.executable, str(ALARMS), *argv, timeout=60)


def test_the_alarms_step_is_a_whole_gpu_alarms_run_and_exits_as_it_judged(dry_run):
    """``gpu_alarms.py --cpu`` as the proof runs it: a live watch, its clean span, each
    stand-in contention and both batch analyses; what the summary counts is what the watch
    sent; and it exits 0 exactly when its own targets are met (a busy 2-CPU host may not
    meet them: the figures are measured here, their judging checked below)."""
    _, out = dry_run
    alarms = out / "alarms"
    summary = json.loads((alarms / "summary.json").read_text())
    assert summary["cpu"] is True
    assert [c["name"] for c in summary["checks"]] == [
        "live alert episodes in the clean span", "contentions alerted",
        "time from a contention's start to its first alert, slowest (s)",
        "batch clean run: share of windows flagged", "batch fault run: episodes"]
    status = int((alarms / "exit_status").read_text())
    judged = _alarms("--judge", str(alarms / "summary.json"))  # its own (default) targets
    assert status == judged.returncode and status in (0, 1), judged.stdout
    assert summary["ok"] is (status == 0)
    said = (alarms / "run.txt").read_text()
    assert ("done: every check met" in said) == (status == 0) != (
        "a check failed (exit 1)" in said)
    assert summary["live_clean"]["seconds"] >= 5.0
    faults = summary["live_faults"]
    assert [f["kind"] for f in faults] == ["tenant", "h2d", "loader"]  # in order, refused out
    offsets = summary["fault_offsets_s"]
    assert offsets["tenant"] > 0  # after the clean span
    for a, b in itertools.pairwise(faults):  # a contention, then the gap (5 s); the
        # three figures are each rounded to 0.1 s, so they may fall short by 3 × 0.05 s
        assert offsets[b["kind"]] - offsets[a["kind"]] >= a["seconds"] + 5.0 - 0.151, offsets
    for name in ("batch_clean", "batch_fault"):
        batch = summary[name]
        assert batch["windows"] > 0 and 0 <= batch["anomalous_windows"] <= batch["windows"]
        assert batch["flagged_share"] == round(batch["anomalous_windows"] / batch["windows"], 4)
    assert (alarms / "train.log").stat().st_size > 0
    events = [json.loads(line) for line in (alarms / "alerts.jsonl").read_text().splitlines()]
    firing = {e["id"] for e in events if e["event"] == "firing"}
    heard = {a["id"] for f in faults for a in f["firing"]} | {
        a["id"] for a in summary["live_clean"]["firing"]}
    assert heard <= firing  # what the summary counts is what the watch sent


def test_gpu_alarms_exits_1_on_a_target_it_does_not_meet(dry_run):
    summary = str(dry_run[1] / "alarms" / "summary.json")
    proc = _alarms("--judge", summary, *ANY_HOST)
    assert proc.returncode == 0, proc.stdout  # every figure there
    for target, failed in ((["--max-clean-share", "-1"], "batch clean run"),
                           (["--max-clean-alerts", "-1"], "live alert episodes"),
                           (["--min-fault-episodes", "1000"], "batch fault run")):
        proc = _alarms("--judge", summary, *ANY_HOST, *target)  # the later option wins
        assert proc.returncode == 1, (target, proc.stdout)
        failures = [x for x in proc.stdout.splitlines() if x.startswith("FAILED")]
        assert len(failures) == 1 and failures[0].startswith(f"FAILED {failed}"), failures


def test_the_kept_proof_fails_the_gpu_targets_and_each_stricter_one_alone(dry_run):
    _, out = dry_run
    proof = out / "gpu_proof.json"
    assert _judge(proof, *DRY) == (0, [])
    # the GPU run's own targets: a dry run's clean span is shorter than 60 s
    code, failed = _judge(proof)
    assert code == 1
    assert any(f.startswith("FAILED [alarms] clean span's length") for f in failed), failed
    for target, only in ((["--max-count-error", "-1"], "[trace] "),
                         (["--max-cost", "-10"], "[trace] cost"),
                         (["--max-total-s", "1"], "[proof] whole run"),
                         (["--max-clean-share", "-1"], "[alarms] batch clean run")):
        code, failed = _judge(proof, *DRY, *target)  # the later option wins
        assert code == 1 and failed, target
        assert all(f.startswith(f"FAILED {only}") for f in failed), (target, failed)


def test_a_traced_count_off_by_one_fails_its_check(dry_run, tmp_path: Path):
    _, out = dry_run
    trace = json.loads((out / "trace.json").read_text())
    trace["figures"]["nccl_collectives"]["traced"] += 1
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    proc = _run(sys.executable, str(TRACE), "--judge", str(path), "--max-cost", "100",
                timeout=60)
    assert proc.returncode == 1
    failed = [x for x in proc.stdout.splitlines() if x.startswith("FAILED")]
    # the count, and the latency check that every counted call was timed
    assert [f.split(":")[0] for f in failed] == [
        "FAILED NCCL collectives", "FAILED NCCL latency"], failed


def test_usage():
    proc = _run("bash", str(PROOF), timeout=30)
    assert proc.returncode == 2 and "Usage: bash scripts/gpu_proof.sh [--cpu] OUTDIR" in proc.stderr
    proc = _run("bash", str(PROOF), "--help", timeout=30)
    assert proc.returncode == 0 and "--cpu   a dry run without a GPU" in proc.stdout
    assert "set -euo" not in proc.stdout
