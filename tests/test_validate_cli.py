"""``reveal validate``: cleanup of leftovers, option errors, and a small suite end to end."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from reveal.cli import main
from reveal.inject.naming import PREFIX, pid_alive, temp_root


def _dead_pid() -> int:
    pid = 4_000_000
    while pid_alive(pid):
        pid -= 1
    return pid


def test_cleanup_removes_a_dead_owners_leftovers_only(capsys) -> None:  # type: ignore[no-untyped-def]
    dead = temp_root() / f"{PREFIX}-{_dead_pid()}-test-leftover"
    live = temp_root() / f"{PREFIX}-1-test-live"  # pid 1 is always alive
    dead.mkdir()
    live.mkdir()
    try:
        assert main(["validate", "--cleanup"]) == 0
        out = capsys.readouterr().out
        assert str(dead) in out and not dead.exists()
        assert live.exists()
    finally:
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)


def test_unknown_fault_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--faults", "cpu_contention,meteor_strike", "--out",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "meteor_strike" in err and "\n" not in err
    assert not (tmp_path / "validate.json").exists()


def test_gap_shorter_than_the_settle_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--gap-seconds", "5", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--gap-seconds" in err and "10 s" in err and "\n" not in err
    assert not (tmp_path / "validate.json").exists()


def test_gap_seconds_space_the_episodes() -> None:
    """Episodes start an episode (twice for a self-ending fault) plus the gap apart."""
    import dataclasses
    import itertools

    from reveal.inject.faults import FAULTS
    from reveal.inject.validation import SuiteOptions, build_scenarios

    options = dataclasses.replace(SuiteOptions(), gap_s=60.0, repetitions=1,
                                  faults=("cpu_contention", "writeback_storm", "disk_burst"))
    (scenario,) = build_scenarios(options)
    (plans,) = scenario.plans
    assert plans[0].offset_s == options.lead_s
    for a, b in itertools.pairwise(plans):
        span = a.duration_s * (2.0 if FAULTS[a.kind].self_ending else 1.0)
        assert b.offset_s - a.offset_s == pytest.approx(span + 60.0)
    assert scenario.run_s >= plans[-1].offset_s + plans[-1].duration_s + 60.0


@pytest.mark.slow
@pytest.mark.root
def test_a_suite_records_its_runs_then_scores_them(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``reveal validate`` as a user runs it, made small (one disk burst after a 20 s
    baseline): the baseline and the faulted run recorded with the fault's events, each run
    analysed with its report beside it, and the result written. It runs beside other tests,
    so only what it made is judged here, not whether the fault was caught; the quick suite's
    detection on a quiet host is judged on the demo's recording (tests/test_demo.py)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the collector's perf/eBPF probes, fault cleanup)")
    if shutil.which("fio") is None:
        pytest.skip("fio not installed")
    assert main(["validate", "--faults", "disk_burst", "--intensities", "high",
                 "--repetitions", "1", "--baseline-seconds", "20", "--episode-seconds", "5",
                 "--gap-seconds", "10", "--quiet", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "validate.json").read_text())
    assert result["schema"] == "reveal-validate" and result["quick"] is False
    assert result["settings"]["baseline_s"] == 20.0 and result["settings"]["episode_s"] == 5.0
    assert set(result["met"]) == {"recall", "median_ttd_s", "attribution_accuracy",
                                  "clean_flag_share"}
    [episode] = result["episodes"]
    assert (episode["kind"], episode["intensity"]) == ("disk_burst", "high")
    assert result["summary"]["total"]["episodes"] == 1
    [run] = result["runs"]
    recorded = Path(run["path"])
    assert (recorded / "meta.json").is_file() and (recorded / "events.jsonl").is_file()
    assert (recorded.parent / "baseline1" / "meta.json").is_file()
    assert Path(run["path"] + ".report.json").is_file()
    assert run["windows"] > 0 and run["clean_windows"] > 0 and run["episodes"] == 1
    assert (tmp_path / "validate.md").read_text().startswith("# Reveal validation")
    assert "disk_burst" in capsys.readouterr().out


def test_reanalyse_scores_recorded_runs_again(tmp_path: Path) -> None:
    import numpy as np

    from reveal.frame import Telemetry
    from reveal.inject.groundtruth import Episode, EventLog
    from reveal.store.run_writer import write_run

    s = 1_000_000_000

    def tel(seed: int, spike: bool) -> Telemetry:
        rng = np.random.default_rng(seed)
        n = 900
        busy = 40 + rng.normal(0, 2, n)
        if spike:
            busy[400:500] += 50  # 40..50 s after the start
        ts = (np.arange(n) * 0.1 * s).astype(np.int64) + 1000 * s
        ticks = np.cumsum(busy / 10.0)  # USER_HZ ticks (100 per CPU-second), 10 samples/s
        return Telemetry("h", ts, np.column_stack([ticks, rng.normal(0, 1, n)]),
                         ["cpu.user{cpu=0}", "mem.MemFree"], {"interval_s": 0.1})

    scenario = tmp_path / "runs" / "single"
    write_run(tel(1, False), scenario / "baseline1")
    run = write_run(tel(2, True), scenario / "run1")
    EventLog(run).append(Episode(1040 * s, 1050 * s, "cpu_contention", "cpu", "high"))
    assert main(["validate", "--reanalyse", str(tmp_path), "--quiet"]) == 0
    result = json.loads((tmp_path / "validate.json").read_text())
    [episode] = result["episodes"]
    assert episode["detected"] and episode["attributed"] == "cpu"
    assert episode["auc"]["combined"] > 0.9
    assert result["runs"][0]["baseline"].endswith("baseline1")
    # into another directory: reports go there, the recorded suite is not written to
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    out = tmp_path.parent / f"{tmp_path.name}-again"
    assert main(["validate", "--reanalyse", str(tmp_path), "--out", str(out), "--quiet"]) == 0
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()} == before
    assert (out / "reports" / "single" / "run1.report.json").is_file()
    assert json.loads((out / "validate.json").read_text())["episodes"][0]["detected"]


def test_reanalyse_without_runs_is_an_input_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", "--reanalyse", str(tmp_path)]) == 2
    assert "no recorded runs" in capsys.readouterr().err
