"""Kept recordings scored again (bench/recordings.py, bench/rescore.py): a figure made from a
packed recording is reproduced by today's code, and a figure that moved is named with its
stored value, its value now and the difference; a missing recording is said."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reveal.frame import Telemetry

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
S = 1_000_000_000


def _script(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH / name), *args], capture_output=True,
                          text=True, timeout=600, cwd=ROOT, check=False)


def _recorded_suite(where: Path) -> Path:
    """A recorded suite as ``bench_alarms.py record`` lays it out: a baseline and a run with
    one CPU fault 40–50 s in (:func:`synthetic.ar1_host`)."""
    from reveal.inject.groundtruth import Episode, EventLog
    from reveal.store.run_writer import write_run
    from synthetic import ar1_host

    def telemetry(seed: int, fault: bool) -> Telemetry:
        return ar1_host(90.0, seed, fault=(40.0, 50.0) if fault else None, start_s=1000.0)

    scenario = where / "runs" / "distributed"
    write_run(telemetry(1, False), scenario / "baseline1")
    run = write_run(telemetry(2, True), scenario / "run1")
    EventLog(run).append(Episode(1040 * S, 1050 * S, "cpu_contention", "cpu", "high"))
    (where / "runs" / "distributed" / "baseline1.collect.log").write_text("left out\n")
    return where


def test_a_packed_recording_is_scored_again_and_a_moved_figure_is_named(tmp_path: Path) -> None:
    suite = _recorded_suite(tmp_path / "suite")
    archive = tmp_path / "kept" / "tiny.tar.xz"
    packed = _script("recordings.py", "pack", str(suite), str(archive))
    assert packed.returncode == 0, packed.stderr
    import tarfile

    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "runs/distributed/run1/events.jsonl" in names
    assert not any(n.endswith(".log") for n in names)  # the collectors' logs left out

    result = tmp_path / "alarms_tiny.json"
    made = _script("bench_alarms.py", "analyse", str(archive), "--result", str(result),
                   "--set", "detect.persistence_s=1")
    assert made.returncode == 0, made.stderr
    stored = json.loads(result.read_text())
    assert stored["recordings"] == [str(archive)]
    [row] = stored["rows"]
    assert row["run"] == f"{archive}:runs/distributed/run1" and row["detected"]
    assert stored["provenance"]["settings"]["analysis"]["detect.persistence_s"] == 1

    again = _script("rescore.py", str(result), "--check", "--out", str(tmp_path / "r.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "reproduced: 1 runs, every figure as stored" in again.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["results"][0]["moved"] == [] and report["provenance"]["revision"]["commit"]

    # a stored figure that today's code does not give is named, with how far it moved
    stored["total"]["before_flag_share"] = round(stored["total"]["before_flag_share"] + 0.25, 4)
    stored["rows"][0]["flagged"] += 3
    result.write_text(json.dumps(stored))
    moved = _script("rescore.py", str(result), "--check")
    assert moved.returncode == 1
    assert "2 figures moved:" in moved.stdout
    assert "total: before_flag_share:" in moved.stdout and "(-0.25)" in moved.stdout
    assert f"{archive}:runs/distributed/run1: flagged:" in moved.stdout
    assert "(-3)" in moved.stdout
    assert _script("rescore.py", str(result)).returncode == 0  # without --check: a report

    archive.unlink()
    missing = _script("rescore.py", str(result), "--check")
    assert missing.returncode == 1 and "recordings missing" in missing.stdout


def test_every_kept_recording_is_named_by_a_result() -> None:
    """A recording nobody's figure comes from is dead weight; a result naming a recording
    that is not kept cannot be scored again."""
    sys.path.insert(0, str(BENCH))
    try:
        import rescore
    finally:
        sys.path.remove(str(BENCH))
    named = set()
    for path in rescore.kept_results():
        for name in json.loads(path.read_text())["recordings"]:
            assert (ROOT / name).is_file(), f"{path.name} names {name}, which is not kept"
            named.add(name)
    kept = {str(p.relative_to(ROOT)) for p in (BENCH / "recordings").glob("*.tar.xz")}
    assert kept <= named, f"kept but named by no result: {sorted(kept - named)}"
    if not kept:
        pytest.fail("no recording is kept under bench/recordings")


def test_the_smallest_kept_recording_is_scored_again(tmp_path: Path) -> None:
    """A real kept suite, analysed from its archive with today's code: every run it holds
    is scored and compared (whether a figure moved is the comparison's answer, listed by
    ``bench/rescore.py``, not this test's)."""
    sys.path.insert(0, str(BENCH))
    try:
        import rescore
    finally:
        sys.path.remove(str(BENCH))
    results = rescore.kept_results()
    assert results, "no result names a kept recording"
    size = {p: sum((ROOT / n).stat().st_size for n in json.loads(p.read_text())["recordings"])
            for p in results}
    smallest = min(results, key=size.__getitem__)
    out = tmp_path / "rescored.json"
    done = _script("rescore.py", str(smallest), "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    [outcome] = json.loads(out.read_text())["results"]
    stored = json.loads(smallest.read_text())
    assert "missing" not in outcome and outcome["runs"] == len(stored["rows"]) > 0
    assert {m["where"] for m in outcome["moved"]} <= {"total"} | {r["run"] for r in
                                                                   stored["rows"]}
    # every stored figure is made again (a figure new since is listed as moved from None)
    assert set(stored["total"]) <= set(outcome["total_now"])
