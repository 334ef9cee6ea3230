"""Per-process NVML probe: replayed NVML structures (no GPU here) and the real no-NVML path.

The probe polls NVML on one thread per GPU; here those threads poll once at open and then
wait an hour (``interval_s``), and :func:`_poll` makes the next poll of every GPU from the
test, after the replay moved to its next recorded tick, so each step's values are exact.
The polled behaviour under the real sampler is in ``test_gpu_procs_poll.py``.

The replay answers with nvidia-ml-py's own ctypes structures (``c_nvmlProcessInfo_v2_t``,
``c_nvmlProcessUtilizationSample_t``) and raises the real ``pynvml.NVMLError`` subclasses,
exactly as the bindings do. Pids in the fixture are bound to live processes this test
starts (one in a cgroup it creates), so the cgroup and comm attribution is real.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pynvml
import pytest

from reveal.catalog import default_catalog
from reveal.collect.gpu_procs import GpuProcessProbe
from reveal.collect.probe import ProbeUnavailable
from reveal.frame import parse_channel

FIXTURE = Path(__file__).parent / "fixtures" / "nvml_procs" / "h100_mig_x2.json"
H200 = FIXTURE.with_name("h200_x1.json")  # captured from a real H200 (the other is by hand)

_spec = importlib.util.spec_from_file_location(
    "ebpf_workload", Path(__file__).parent / "fixtures" / "ebpf" / "workload.py")
assert _spec is not None and _spec.loader is not None
workload = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(workload)
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF


class ProcReplay:
    """A pynvml stand-in for the per-process calls; ``tick`` selects the recorded answer."""

    NVMLError = pynvml.NVMLError

    def __init__(self, fixture: dict[str, Any], pids: dict[str, int]) -> None:
        self.devices = fixture["devices"]
        self.pids = pids
        self.tick = 0
        self.shutdown = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _pid(self, value: int | str) -> int:
        return self.pids[value[1:]] if isinstance(value, str) else int(value)

    def _answer(self, handle: int, key: str) -> Any:
        answer = self.devices[handle]["ticks"][self.tick][key]
        if isinstance(answer, dict) and "error" in answer:
            raise pynvml.NVMLError(getattr(pynvml, answer["error"]))
        return answer

    def nvmlInit(self) -> None:
        self.shutdown = False

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        mode = self.devices[handle]["mig_mode"]
        if "error" in mode:
            raise pynvml.NVMLError(getattr(pynvml, mode["error"]))
        return list(mode["answer"])

    def _processes(self, handle: int, key: str) -> list[Any]:
        out = []
        for rec in self._answer(handle, key):
            struct = pynvml.c_nvmlProcessInfo_v2_t(
                pid=self._pid(rec["pid"]), usedGpuMemory=rec["usedGpuMemory"],
                gpuInstanceId=rec["gpuInstanceId"], computeInstanceId=rec["computeInstanceId"])
            obj = pynvml.nvmlStructToFriendlyObject(struct)
            if obj.usedGpuMemory == _NOT_AVAILABLE:  # what the bindings do
                obj.usedGpuMemory = None
            out.append(obj)
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return self._processes(handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Any]:
        return self._processes(handle, "graphics")

    def nvmlDeviceGetProcessUtilization(self, handle: int, last_seen: int) -> list[Any]:
        samples = [pynvml.c_nvmlProcessUtilizationSample_t(
            pid=self._pid(s["pid"]), timeStamp=s["timeStamp"], smUtil=s["smUtil"],
            memUtil=s["memUtil"], encUtil=s["encUtil"], decUtil=s["decUtil"])
            for s in self._answer(handle, "utilization") if s["timeStamp"] > last_seen]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return samples


@pytest.fixture
def workers() -> Iterator[tuple[dict[str, int], str | None]]:
    """Live processes for the fixture's pids; ``train`` in a fresh cgroup when possible."""
    procs = {name: subprocess.Popen(["sleep", "60"]) for name in
             ("train", "infer", "unaccounted", "late")}
    cgroup_dir: Path | None = None
    root = workload.cgroup2_root()
    if root is not None and os.geteuid() == 0:
        cgroup_dir = root / f"reveal-test-{uuid.uuid4().hex[:8]}"
        try:
            cgroup_dir.mkdir()
            (cgroup_dir / "cgroup.procs").write_text(str(procs["train"].pid))
        except OSError:
            cgroup_dir = None
    try:
        rel = None if cgroup_dir is None else "/" + cgroup_dir.relative_to(root).as_posix()
        yield {name: p.pid for name, p in procs.items()}, rel
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        if cgroup_dir is not None:
            cgroup_dir.rmdir()


HOUR = {"interval_s": 3600.0}  # the poller threads poll at open only; _poll does the rest


def _poll(probe: GpuProcessProbe) -> None:
    """One poll of every GPU now (the poller threads are waiting for their next slot)."""
    for poller in probe._pollers:
        poller.poll_fast()


def _by_labels(channels: list[str], values: np.ndarray) -> dict[tuple[str, ...], float]:
    out = {}
    for name, value in zip(channels, values, strict=True):
        metric, labels = parse_channel(name)
        out[(metric, labels["gpu"], labels["pid"])] = float(value)
    return out


def test_no_nvml_here_is_reported_unavailable() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this host has a working NVML: the no-NVML path cannot be exercised")
    probe = GpuProcessProbe()
    with pytest.raises(ProbeUnavailable, match="NVML could not start"):
        probe.open()
    assert probe.status == "unavailable" and "NVML" in probe.reason


def test_a_captured_h200_process_replays_with_its_memory_and_sm_use() -> None:
    """The answers a real H200 gave about a PyTorch process (MIG off): the process's
    memory in bytes and its SM use, the newest samples only at each poll."""
    fixture = json.loads(H200.read_text())
    live = subprocess.Popen(["sleep", "60"])
    try:
        replay = ProcReplay(fixture, {"python3": live.pid})
        probe = GpuProcessProbe(nvml=replay, **HOUR)
        probe.open()
        assert probe.status == "ok", probe.reason
        out = np.full(len(probe.channels), -1.0)
        probe.read(out)
        got = _by_labels(probe.channels, out)
        pid = str(live.pid)
        ticks = fixture["devices"][0]["ticks"]  # what the driver answered, tick by tick
        assert got[("gpu.proc.mem_used_bytes", "0", pid)] == ticks[0]["compute"][0][
            "usedGpuMemory"] > 0
        assert got[("gpu.proc.sm_util", "0", pid)] == ticks[0]["utilization"][0]["smUtil"]
        replay.tick = 3
        _poll(probe)
        probe.read(out)
        assert _by_labels(probe.channels, out)[("gpu.proc.sm_util", "0", pid)] == ticks[3][
            "utilization"][0]["smUtil"]
        probe.close()
    finally:
        live.kill()
        live.wait()


def test_replayed_processes_memory_utilisation_and_mig(workers) -> None:
    pids, cgroup = workers
    replay = ProcReplay(json.loads(FIXTURE.read_text()), pids)
    probe = GpuProcessProbe(nvml=replay, **HOUR)
    probe.open()

    # GPU 1 is in MIG mode: utilisation per process is unsupported there, and said so.
    assert probe.status == "degraded"
    assert "GPU 1" in probe.reason and "MIG" in probe.reason
    assert probe.info["mig_gpus"] == [1]

    labels = {c: parse_channel(c)[1] for c in probe.channels}
    train_mem = [c for c, lab in labels.items() if c.startswith("gpu.proc.mem_used_bytes")
                 and lab["pid"] == str(pids["train"]) and lab["gpu"] == "0"]
    assert len(train_mem) == 1
    lab = labels[train_mem[0]]
    assert lab["comm"] == "sleep" and lab["type"] == "compute"
    if cgroup is not None:
        assert lab["cgroup"] == cgroup
    foreign = [lab for lab in labels.values() if lab["pid"] == "4000001"]
    assert foreign and all(x["comm"] == "?" and x["cgroup"] == "?" for x in foreign)
    mig = [lab for c, lab in labels.items() if lab["gpu"] == "1"]
    assert mig and all(c.startswith("gpu.proc.mem_used_bytes") for c in probe.channels
                       if labels[c]["gpu"] == "1")
    assert {(x["pid"], x["gi"], x["ci"]) for x in mig} == {
        (str(pids["train"]), "1", "0"), (str(pids["infer"]), "2", "0")}
    assert not [c for c in probe.channels if str(pids["late"]) in c]

    # tick 0: two samples of the training process are averaged
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    got = _by_labels(probe.channels, out)
    train, infer = str(pids["train"]), str(pids["infer"])
    assert got[("gpu.proc.sm_util", "0", train)] == pytest.approx(92.0)
    assert got[("gpu.proc.mem_util", "0", train)] == pytest.approx(62.0)
    assert got[("gpu.proc.dec_util", "0", infer)] == pytest.approx(35.0)
    assert got[("gpu.proc.mem_used_bytes", "0", train)] == 32212254720
    assert np.isnan(got[("gpu.proc.mem_used_bytes", "0", str(pids["unaccounted"]))])
    assert got[("gpu.proc.sm_util", "0", str(pids["unaccounted"]))] == 0.0
    assert got[("gpu.proc.mem_used_bytes", "1", infer)] == 5368709120
    assert not probe.refresh()

    # tick 1: only newer samples count; a new process appears at the next refresh
    replay.tick = 1
    _poll(probe)
    probe.read(out)
    got = _by_labels(probe.channels, out)
    assert got[("gpu.proc.sm_util", "0", train)] == pytest.approx(88.0)
    assert got[("gpu.proc.sm_util", "0", infer)] == 0.0
    assert got[("gpu.proc.mem_used_bytes", "0", train)] == 34359738368
    assert probe.refresh()
    late = [c for c in probe.channels if f"pid={pids['late']}" in c]
    assert len(late) == 5  # memory + four utilisations

    # tick 2: the inference process left GPU 0 and the MIG GPU: its channels read NaN
    replay.tick = 2
    _poll(probe)
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    got = _by_labels(probe.channels, out)
    assert np.isnan(got[("gpu.proc.mem_used_bytes", "0", infer)])
    assert np.isnan(got[("gpu.proc.sm_util", "0", infer)])
    assert np.isnan(got[("gpu.proc.mem_used_bytes", "1", infer)])
    assert got[("gpu.proc.mem_used_bytes", "0", str(pids["late"]))] == 2147483648
    assert not np.any(out == -1.0)

    probe.close()
    assert replay.shutdown


def test_gpu_proc_channels_are_catalogued(workers) -> None:
    pids, _ = workers
    probe = GpuProcessProbe(nvml=ProcReplay(json.loads(FIXTURE.read_text()), pids), **HOUR)
    probe.open()
    catalog = default_catalog()
    for name in probe.channels:
        info = catalog.lookup(name)
        assert info.subsystem == "gpu" and info.kind == "gauge", name
        assert info.unit in ("bytes", "percent"), name
    probe.close()


def test_every_query_unsupported_is_unavailable_with_reason(workers) -> None:
    pids, _ = workers
    fixture = json.loads(FIXTURE.read_text())
    for device in fixture["devices"]:
        for tick in device["ticks"]:
            for key in ("compute", "graphics", "utilization"):
                tick[key] = {"error": "NVML_ERROR_NO_PERMISSION"}
    replay = ProcReplay(fixture, pids)
    probe = GpuProcessProbe(nvml=replay, **HOUR)
    with pytest.raises(ProbeUnavailable, match="no per-process NVML query is supported"):
        probe.open()
    assert replay.shutdown


def _pids_with_channels(probe: GpuProcessProbe) -> set[str]:
    return {parse_channel(c)[1]["pid"] for c in probe.channels}


def test_exited_process_retires_at_the_next_refresh(workers) -> None:
    """A process NVML stops listing keeps its channels (NaN) while it lives, for
    ``retire_s``; once it has exited they go at the next refresh."""
    pids, _ = workers
    replay = ProcReplay(json.loads(FIXTURE.read_text()), pids)
    probe = GpuProcessProbe(nvml=replay, retire_s=3600, **HOUR)
    probe.open()
    replay.tick = 1
    _poll(probe)
    probe.refresh()
    infer = str(pids["infer"])
    assert infer in _pids_with_channels(probe)
    replay.tick = 2  # the inference process is no longer listed, but still runs
    _poll(probe)
    probe.refresh()
    # still running: kept; a pid of another namespace (no /proc entry) unlisted: gone
    assert {infer, str(pids["unaccounted"])} <= _pids_with_channels(probe)
    assert "4000001" not in _pids_with_channels(probe)
    assert probe.info["retired_channels"] == 5
    os.kill(pids["infer"], 9)
    os.waitpid(pids["infer"], 0)
    _poll(probe)
    assert probe.refresh()
    assert infer not in _pids_with_channels(probe)
    # GPU 0: memory + 4 utilisations, the MIG GPU: memory
    assert probe.info["retired_channels"] == 5 + 5 + 1
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    assert np.isfinite(out[probe.channels.index(next(
        c for c in probe.channels if f"pid={pids['late']}" in c and "mem_used" in c))])
    probe.close()


def test_unlisted_process_retires_after_retire_s_and_channels_are_capped(workers) -> None:
    pids, _ = workers
    replay = ProcReplay(json.loads(FIXTURE.read_text()), pids)
    probe = GpuProcessProbe(nvml=replay, retire_s=0.0, max_channels=8, **HOUR)
    probe.open()
    assert len(probe.channels) == 8
    assert probe.status == "degraded" and "max_channels=8" in probe.reason
    assert probe.info["processes_over_cap"] >= 1
    replay.tick = 2
    _poll(probe)
    probe.refresh()
    # the live but unlisted inference process is gone at once (retire_s=0)
    assert str(pids["infer"]) not in _pids_with_channels(probe)
    assert len(probe.channels) <= 8
    probe.close()
