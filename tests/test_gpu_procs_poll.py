"""``gpu_procs`` polled off the tick path, under the real sampler.

NVML is the replay of ``fixtures/nvml`` (8 GPUs from the H100 answers) with per-process
answers from ``fixtures/nvml/procs.py``, driven by processes this test starts and ends
(real ``sleep`` processes, so ``/proc``, comm and the exit check are real). Every NVML call
is slowed (20 ms per PCIe throughput call, 10 ms per per-process query), and any call from
the sampling thread fails the test. The ``gpu`` and ``gpu_procs`` probes' threads, the
cpu and memory probes and the Sampler (with its C tick thread where built) are the real
ones.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reveal.collect.cpu import CpuProbe
from reveal.collect.gpu import GpuProbe
from reveal.collect.gpu_procs import GpuProcessProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.probe import Probe
from reveal.collect.sampler import MemorySink, Sampler, ticker_available
from reveal.frame import parse_channel

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
_spec = importlib.util.spec_from_file_location("nvml_procs_replay", FIXTURES / "procs.py")
assert _spec is not None and _spec.loader is not None
procs_replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(procs_replay)

GPUS = 8
SLOW = {"nvmlDeviceGetPcieThroughput": 0.020, "nvmlDeviceGetComputeRunningProcesses": 0.010,
        "nvmlDeviceGetGraphicsRunningProcesses": 0.010,
        "nvmlDeviceGetProcessUtilization": 0.010}  # seconds per call
GIB = 2**30


@pytest.fixture()
def sleepers() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts ``sleep`` processes; kills whatever is left after the test."""
    made: list[subprocess.Popen[bytes]] = []

    def _start() -> subprocess.Popen[bytes]:
        made.append(subprocess.Popen(["sleep", "60"]))
        return made[-1]

    yield _start
    for proc in made:
        proc.kill()
        proc.wait()


def _replay(**options: Any) -> Any:
    fixture = json.loads((FIXTURES / "h100_sxm5_x2.json").read_text())
    return procs_replay.ProcessReplayNvml(fixture, gpus=GPUS, delays=dict(SLOW), **options)


def _pids(channels: list[str]) -> set[int]:
    return {int(parse_channel(c)[1]["pid"]) for c in channels if c.startswith("gpu.proc.")}


def _until(check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.mark.parametrize("hang", [False, True], ids=["8-gpus", "8-gpus-one-hung"])
def test_gpu_and_gpu_procs_keep_the_ticks_in_c(native_on: None, sleepers: Any,
                                               hang: bool) -> None:
    """8 slow GPUs with a training process on each and a second one on GPU 3, sampled at
    100 ms for 4 s beside the cpu and memory probes; meanwhile a process starts on GPU 5
    and the one on GPU 3 exits. (With ``hang``, GPU 7 answers nothing throughout.)"""
    nvml = _replay()
    train = sleepers()
    leaving, joining = sleepers(), sleepers()
    for gpu in range(GPUS):
        nvml.run(gpu, train.pid, (gpu + 1) * GIB, sm_pct=90.0)
    nvml.run(3, leaving.pid, 3 * GIB)
    gpu_probe = GpuProbe(nvml=nvml, interval_s=0.1, slow_interval_s=0.5)
    procs = GpuProcessProbe(nvml=nvml, interval_s=0.1, retire_s=3600)
    probes: list[Probe] = [CpuProbe(), MemoryProbe(), gpu_probe, procs]
    for probe in probes:
        probe.open()
    assert _pids(procs.channels) == {train.pid, leaving.pid}
    assert len(procs.channels) == GPUS * 5 + 5  # memory + 4 utilisations per process/GPU
    assert procs.native_parts() is not None
    nvml.forbidden = threading.current_thread()  # refresh and read run here: no NVML

    def change() -> None:
        nvml.run(5, joining.pid, 7 * GIB)
        nvml.end(3, leaving.pid)
        leaving.kill()
        leaving.wait()

    timer = threading.Timer(1.3, change)
    sampler = Sampler(probes, 0.1, refresh_s=1.0)
    sink = MemorySink(sampler.channels)
    try:
        if hang:
            nvml.hang(GPUS - 1)
        timer.start()
        sampler.run(sink, duration_s=4.0)
        timer.join()
    finally:
        nvml.release(GPUS - 1)
        for probe in reversed(probes):
            probe.close()
    assert nvml.unrecorded == []  # no NVML call from the sampling thread
    # judged by counts, not every tick: the slow GPUs cost the tick thread nothing, so at
    # most a tick or two of the 40 is lost, and only to the host's own load (a slow GPU
    # read on the tick thread would lose one per read, dozens here)
    rows = sum(len(ts) for _, ts, _ in sink.parts)
    assert sampler.stats.missed_ticks <= 2 and 38 <= rows <= 40, (sampler.stats.missed_ticks,
                                                                  rows)
    if ticker_available():
        assert sampler.mode == "native"  # the C thread kept the ticks, gpu_procs included
    assert nvml.calls["nvmlDeviceGetProcessUtilization"] >= 7 * 30  # polled, not ticked

    # the process that started joined at a refresh; the one that exited retired
    first, _, _ = sink.parts[0]
    channels, _, rows_list = sink.parts[-1]
    rows = np.asarray(rows_list)
    assert joining.pid not in _pids(first) and leaving.pid in _pids(first)
    assert joining.pid in _pids(channels) and leaving.pid not in _pids(channels)
    assert procs.info["retired_channels"] == 5
    assert len(sink.parts) >= 2 and sampler.stats.schema_changes >= 1

    def column(metric: str, gpu: int, pid: int) -> np.ndarray:
        return rows[:, channels.index(
            next(c for c in channels if c.startswith(metric + "{")
                 and parse_channel(c)[1]["gpu"] == str(gpu)
                 and parse_channel(c)[1]["pid"] == str(pid)))]

    late = slice(len(rows) // 2, None)  # the second half of the last segment
    for gpu in range(GPUS - 1):
        mem = column("gpu.proc.mem_used_bytes", gpu, train.pid)[late]
        assert (mem == (gpu + 1) * GIB).all(), gpu
        assert (column("gpu.proc.sm_util", gpu, train.pid)[late] >= 0).all()
    assert (column("gpu.proc.sm_util", 0, train.pid)[late] == 90.0).mean() > 0.5
    assert (column("gpu.proc.mem_used_bytes", 5, joining.pid)[late] == 7 * GIB).all()
    hung = column("gpu.proc.mem_used_bytes", GPUS - 1, train.pid)[late]
    if hang:
        assert np.isnan(hung).all()  # stale: NaN, never a frozen value
        assert "GPU 7 not answering" in procs.reason and procs.status == "degraded"
        assert procs.info["stale_gpus"] == [GPUS - 1]
    else:
        assert (hung == GPUS * GIB).all()
        assert procs.status == "ok", procs.reason
    assert np.isfinite(rows[:, channels.index("cpu.user")]).all()


def test_read_copies_only_and_stale_values_turn_nan(sleepers: Any) -> None:
    """``read`` makes no NVML call; a GPU whose poller blocks reads NaN within
    ``stale_intervals`` poll periods and its values come back when it answers."""
    nvml = _replay()
    proc = sleepers()
    for gpu in range(GPUS):
        nvml.run(gpu, proc.pid, GIB)
    probe = GpuProcessProbe(nvml=nvml, interval_s=0.05, stale_intervals=3)
    probe.open()
    nvml.forbidden = threading.current_thread()
    try:
        mem = [probe.channels.index(c) for c in probe.channels
               if c.startswith("gpu.proc.mem_used_bytes")]
        out = np.full(len(probe.channels), -1.0)

        def values() -> np.ndarray:
            probe.read(out)
            return out[mem]

        _until(lambda: bool((values() == GIB).all()))
        nvml.hang(2)
        _until(lambda: bool(np.isnan(values()[2])))
        assert (np.delete(values(), 2) == GIB).all()
        assert not probe.refresh()
        assert probe.status == "degraded" and "GPU 2 not answering" in probe.reason
        nvml.release(2)
        _until(lambda: bool((values() == GIB).all()))
        probe.refresh()
        assert probe.status == "ok", probe.reason
    finally:
        nvml.release(2)
        probe.close()
    assert nvml.unrecorded == []


def test_a_new_process_waits_for_a_refresh_and_gets_its_values(sleepers: Any) -> None:
    """The channel set changes only at ``refresh()``; the new array holds the last poll's
    values at once (no tick of NaN for channels that were already there)."""
    nvml = _replay()
    first, second = sleepers(), sleepers()
    nvml.run(0, first.pid, GIB)
    probe = GpuProcessProbe(nvml=nvml, interval_s=0.05)
    probe.open()
    try:
        before = list(probe.channels)
        assert _pids(before) == {first.pid}
        nvml.run(1, second.pid, 2 * GIB)
        calls = nvml.calls["nvmlDeviceGetComputeRunningProcesses"]
        _until(lambda: nvml.calls["nvmlDeviceGetComputeRunningProcesses"] > calls + 2 * GPUS)
        assert probe.channels == before  # nothing joins between refreshes
        assert probe.refresh()
        assert _pids(probe.channels) == {first.pid, second.pid}
        parts = probe.native_parts()
        assert parts is not None and parts[0].reader is probe._board.values
        out = np.full(len(probe.channels), -1.0)
        probe.read(out)
        got = dict(zip(probe.channels, out, strict=True))
        mem = {parse_channel(c)[1]["pid"]: v for c, v in got.items()
               if c.startswith("gpu.proc.mem_used_bytes")}
        assert mem == {str(first.pid): GIB, str(second.pid): 2 * GIB}
        assert not probe.refresh()
    finally:
        probe.close()


def test_options_are_declared() -> None:
    for key in ("nvml", "proc_root", "retire_s", "max_channels", "interval_s",
                "stale_intervals", "open_timeout_s"):
        assert key in GpuProcessProbe.options_help, key
