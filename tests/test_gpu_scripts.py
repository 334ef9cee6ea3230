"""The GPU host scripts run here, without a GPU, in their dry runs (``--cpu``), so that they
cannot rot: ``scripts/gpu_check.sh`` with the replayed-NVML tests, a NumPy training job and
a busy loop; ``scripts/gpu_alarms.py``'s failures and its judging of the H200 runs kept in
bench/results, whose verdicts docs/validation.md states. Each must exit 0 when it ran and
met its targets, and non-zero when a step fails or a target is not met.

A whole dry run of ``gpu_alarms.py`` (a real watch, collector and analyses) is the alarms
step of ``scripts/gpu_proof.sh --cpu``: tests/test_gpu_proof.py checks it there, so that
it is made once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "gpu_check.sh"
ALARMS = ROOT / "scripts" / "gpu_alarms.py"
H200 = ROOT / "bench" / "results" / "gpu_alarms_h200.json"

pytestmark = pytest.mark.slow

#: gpu_check.sh as short as it goes: a baseline just long enough to fit on (10 windows)
CHECK_ENV = {"PYTHON": sys.executable, "WARMUP_S": "1", "BASELINE_S": "15", "RUN_S": "10",
             "FAULT_AT_S": "2", "FAULT_S": "4", "SKIP_BUILD": "1"}
#: two of the replayed-NVML tests (the whole file takes longer than this test may)
REPLAYED = ("tests/test_probes_gpu.py::test_channels_identity_and_values "
            "tests/test_probes_gpu.py::test_a_captured_h200_replays_with_what_it_lacks_named")
#: a test that fails on purpose (not collected by the suite itself)
FAILS = "tests/fixtures/gpu_check_fails.py"

def _check(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(CHECK), "--cpu", str(out)], cwd=ROOT, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, **CHECK_ENV, **env})


def _alarms(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ALARMS), *argv], cwd=ROOT, text=True,
                          capture_output=True, timeout=300)


def test_gpu_check_dry_run_keeps_what_it_saw_and_exits_with_pytests_status(tmp_path: Path):
    """Two replayed-NVML tests pass and one fails on purpose: every later step still runs
    and keeps its output, and the check exits with pytest's status (1)."""
    out = tmp_path / "out"
    proc = _check(out, TESTS=f"{REPLAYED} {FAILS}")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "dry run without a GPU (--cpu)" in (out / "host.txt").read_text()
    assert "1 failed, 2 passed" in (out / "pytest.txt").read_text()
    with tarfile.open(out / "runs.tgz") as tar:
        names = set(tar.getnames())
        assert {"runs/baseline/meta.json", "runs/fault/meta.json", "runs/report.json",
                "runs/report.html", "runs/analyze.txt", "runs/train.jsonl",
                "runs/fault_start", "runs/fault_end"} <= names
        report = json.load(tar.extractfile("runs/report.json"))  # type: ignore[arg-type]
        start = float(tar.extractfile("runs/fault_start").read())  # type: ignore[union-attr]
        end = float(tar.extractfile("runs/fault_end").read())  # type: ignore[union-attr]
    assert report["summary"]["windows"] >= 5  # the 10 s fault run, in 3 s windows
    assert 4.0 <= end - start < 10.0  # the busy loop ran its FAULT_S
    assert "done (pytest exit status 1)" in proc.stdout


def test_gpu_check_stops_at_a_step_that_fails(tmp_path: Path):
    out = tmp_path / "out"
    proc = _check(out, SKIP_TESTS="1", BASELINE_S="-1")  # collect refuses; piped to tail
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--duration must be positive" in proc.stdout + proc.stderr
    assert not (out / "runs.tgz").exists() and "== done" not in proc.stdout


def test_gpu_alarms_judges_the_kept_h200_runs_as_documented(tmp_path: Path):
    """docs/validation.md: before the rules, one live alert in the clean span and 5.3 % of
    the clean batch windows flagged; after them, neither, both contentions alerted within
    6 s and three episodes in the batch fault run."""
    before, after = json.loads(H200.read_text())["runs"]
    verdicts = {}
    for name, run in (("before", before), ("after", after)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(run))
        proc = _alarms("--judge", str(path))
        verdicts[name] = (proc.returncode, sorted(
            line.split(":")[0].removeprefix("FAILED ") for line in proc.stdout.splitlines()
            if line.startswith("FAILED")))
    assert verdicts == {
        "before": (1, ["batch clean run", "live alert episodes in the clean span"]),
        "after": (0, [])}


def test_gpu_alarms_exits_non_zero_when_the_run_cannot_be_made(tmp_path: Path):
    out = tmp_path / "out"
    proc = _alarms(str(out), "--cpu", "--learn-s", "5", "--warmup-s", "1")  # below 15 s
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "watch did not start scoring" in proc.stderr
    assert "--learn 5s is too short" in (out / "watch.log").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert "checks" not in summary and "live_clean" not in summary  # nothing judged


def test_the_kept_h200_trace_counts_every_launch_at_the_driver():
    """A real H200 run (bench/results/gpu_trace_h200.json, PyTorch 2.11 with CUDA 13): the
    uprobes on the shared libcudart.so.13 saw 5,400 of the 11,100 runtime launches the
    profiler named (cuBLAS and cuDNN link runtimes of their own), while the driver's
    cuLaunchKernel* saw one launch per kernel the profiler saw run. Judged with its kept
    figures (runtime launches) it fails on the launches; made again from its kept counts,
    on the cost alone (6.65 % of a 1.6 ms step)."""
    kept = ROOT / "bench" / "results" / "gpu_trace_h200.json"
    script = ROOT / "scripts" / "gpu_trace_check.py"

    def failed(*extra: str) -> list[str]:
        proc = subprocess.run([sys.executable, str(script), "--judge", str(kept), *extra],
                              capture_output=True, text=True, timeout=60, cwd=ROOT)
        lines = [x.split(":")[0] for x in proc.stdout.splitlines() if x.startswith("FAILED")]
        assert proc.returncode == (1 if lines else 0), proc.stdout + proc.stderr
        return lines

    cost = "FAILED cost on the job's step time (traced / untraced median - 1)"
    assert failed() == ["FAILED kernel launches (runtime API)", cost]
    assert failed("--refigure") == [cost]
    assert failed("--refigure", "--max-cost", "0.07") == []
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_trace_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    figures = gpu_trace_check.figures(json.loads(kept.read_text())["phase_results"])
    assert figures["launches"] == {"traced": 11400.0, "own": 11400, "at": "driver"}
    runtime = figures["runtime_launches"]
    assert runtime["traced"] < runtime["own"] < figures["launches"]["own"]


def _trace_module():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_trace_check
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return gpu_trace_check


def test_cost_rounds_turn_their_order_and_each_is_judged_against_its_own_untraced_phase():
    """Every round runs every setting once, each round's order turned by one (a drift of the
    job's speed falls on every setting alike); a setting's cost in a round is its median step
    over that round's untraced one."""
    trace = _trace_module()
    names = list(trace.COST_VARIANTS)
    phases = trace.cost_phases(3)
    assert len(phases) == 3 * len(names)
    rounds = [[p[5:] for p, _ in phases[i:i + len(names)]]
              for i in range(0, len(phases), len(names))]
    assert all(sorted(r) == sorted(names) for r in rounds)
    assert [r.index("untraced") for r in rounds] == [0, len(names) - 1, len(names) - 2]
    assert all((opts is None) == (p == "cost:untraced") for p, opts in phases)
    # made-up step times: round 1 untraced 2 ms, round 2 untraced 1 ms
    step = {"untraced": 2.0, "default": 2.2, "entry": 2.1, "driver": 2.4, "driver_entry": 2.0}
    made = [{"phase": p, "median_step_s": step[p[5:]] / (1 if i < len(names) else 2),
             "traced": None if opts is None else {"calls.cuLaunchKernel": 10.0 * (i + 1)}}
            for i, (p, opts) in enumerate(phases[:2 * len(names)])]
    costs = trace.variant_costs(made)
    assert costs["default"]["per_round"] == [0.1, 0.1]
    assert costs["driver"]["median"] == 0.2 and costs["driver_entry"]["median"] == 0.0
    assert "untraced" not in costs
    assert trace.variant_costs(made[:0]) is None


def test_the_kept_h200_cost_rounds_are_their_figures():
    """The H200 cost rounds kept in bench/results (4 rounds of 1,500 steps): the figures made
    again from the kept phases are the stored ones; the runtime's launches and copies left to
    the driver take a third of the traced calls away, and no setting's cost can be told from
    the untraced phases' own spread (docs/ebpf.md)."""
    trace = _trace_module()
    kept = json.loads((ROOT / "bench" / "results" / "gpu_trace_cost_h200.json").read_text())
    again = trace.variant_costs(kept["phase_results"])
    assert again == kept["figures"]["cost_variants"]
    assert again["driver"]["calls_per_phase"] / again["default"]["calls_per_phase"] < 0.7
    untraced = [p["median_step_s"] for p in kept["phase_results"] if "untraced" in p["phase"]]
    spread = max(untraced) / min(untraced) - 1
    assert all(abs(c) < spread for v in again.values() for c in [v["median"]])
