"""The reference workloads train (steps advance, loss falls) and stop when told to."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from reveal.inject.cleanup import make_temp_dir
from reveal.inject.veth_pair import NetnsPair
from reveal.inject.workloads import WorkloadRun, torch_available, unavailable_reason


@pytest.fixture
def workdir():  # type: ignore[no-untyped-def]
    path = make_temp_dir("wl")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _final(run: WorkloadRun) -> list[dict]:
    return [line for line in run.progress() if line.get("final")]


def test_numpy_workload_trains_from_its_files(workdir) -> None:  # type: ignore[no-untyped-def]
    with WorkloadRun("numpy_train", workdir, duration_s=3.0, samples=256) as run:
        assert run.wait(30)
    [final] = _final(run)
    assert final["steps"] > 10
    assert final["loss"] < 2.3  # below chance (ln 10) after some steps
    assert len(list((workdir / "data").glob("*.npy"))) == 256


def test_torch_workload_stops_on_sigterm(workdir) -> None:  # type: ignore[no-untyped-def]
    if not torch_available():
        pytest.skip(unavailable_reason("torch_train") or "torch missing")
    run = WorkloadRun("torch_train", workdir, duration_s=120.0, samples=256).start()
    deadline = time.monotonic() + 90  # imports are slow on a busy machine
    while not run.progress() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert run.progress(), "no progress line: the job never trained"
    started = time.monotonic()
    run.stop()
    assert time.monotonic() - started < 5.0
    [final] = _final(run)
    assert final["steps"] > 0


def test_busy_workload_computes_with_one_thread_per_cpu(workdir) -> None:  # type: ignore[no-untyped-def]
    from reveal.inject.workloads import busy_threads

    if not torch_available():
        pytest.skip(unavailable_reason("torch_busy") or "torch missing")
    with WorkloadRun("torch_busy", workdir, duration_s=3.0, samples=256) as run:
        assert run.wait(90)
    [final] = _final(run)
    assert final["steps"] > 0
    assert final["threads"] == busy_threads() == len(os.sched_getaffinity(0))
    with WorkloadRun("torch_train", workdir, duration_s=1.0, samples=256) as run:
        assert run.wait(90)
    assert [line["threads"] for line in _final(run)] == [1]


def test_ddp_workload_all_reduces_across_the_veth(workdir) -> None:  # type: ignore[no-untyped-def]
    if not torch_available():
        pytest.skip(unavailable_reason("torch_ddp") or "torch missing")
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    with NetnsPair(tag="ddp") as pair:
        with WorkloadRun("torch_ddp", workdir, duration_s=4.0, samples=256, netns=pair) as run:
            assert run.wait(60)
        text = Path(f"/proc/{os.getpid()}/net/dev").read_text()
        assert pair.ifnames[0] not in text  # the traffic never touched the host's namespace
    finals = _final(run)
    assert sorted(line["rank"] for line in finals) == [0, 1]
    assert finals[0]["steps"] == finals[1]["steps"] > 0  # lock-step: every step all-reduced


def test_unknown_workload_is_refused() -> None:
    assert "unknown workload" in (unavailable_reason("nope") or "")


def test_workload_runs_in_its_own_cpu_cgroup(workdir) -> None:  # type: ignore[no-untyped-def]
    from reveal.inject.jobcgroup import JobCgroup

    if os.geteuid() != 0:
        pytest.skip("needs root (cgroup directories)")
    cgroup = JobCgroup().create()
    if not cgroup.paths:
        pytest.skip("no CPU cgroup hierarchy where this process sits at the root")
    paths = list(cgroup.paths)
    try:
        run = WorkloadRun("numpy_train", workdir, duration_s=30.0, samples=64,
                          cgroup=cgroup).start()
        membership = Path(f"/proc/{run.procs[0].pid}/cgroup").read_text()
        assert cgroup.name in membership
        run.stop()
    finally:
        cgroup.close()
    assert not any(path.exists() for path in paths)
