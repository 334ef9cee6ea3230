"""GPU probes against a real NVIDIA GPU and driver, checked against ``nvidia-smi``.

These run only where NVML finds a GPU and ``nvidia-smi`` is installed; elsewhere each test
skips saying so (the replayed-NVML tests, ``test_probes_gpu.py``, cover the same code
there). ``scripts/gpu_check.sh`` runs them on a GPU host together with a real collection.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np
import pynvml
import pytest

from reveal.collect.gpu import GpuProbe
from reveal.collect.gpu_procs import GpuProcessProbe
from reveal.collect.probe import Probe
from reveal.frame import parse_channel


def _gpu_count() -> int:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        pynvml.nvmlShutdown()


pytestmark = pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or _gpu_count() == 0,
    reason="no NVIDIA GPU with its driver and nvidia-smi on this host")

SMI_FIELDS = ("memory.total", "memory.used", "temperature.gpu", "power.draw", "clocks.mem",
              "power.limit")


def smi(fields: tuple[str, ...] = SMI_FIELDS) -> dict[int, dict[str, float]]:
    """``nvidia-smi --query-gpu`` per GPU index: MiB, °C, W, MHz as it prints them."""
    text = subprocess.run(
        ["nvidia-smi", f"--query-gpu=index,{','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=30).stdout
    rows = {}
    for line in text.strip().splitlines():
        index, *values = (v.strip() for v in line.split(","))
        rows[int(index)] = {f: float(v) if v.replace(".", "", 1).isdigit() else float("nan")
                            for f, v in zip(fields, values, strict=True)}
    return rows


def read(probe: Probe) -> dict[str, float]:
    out = np.full(len(probe.channels), np.nan)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


def until(check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def by_gpu(values: dict[str, float], metric: str) -> dict[int, float]:
    out = {}
    for channel, value in values.items():
        name, labels = parse_channel(channel)
        if name == metric and "gpu" in labels and "link" not in labels:
            out[int(labels["gpu"])] = value
    return out


@pytest.fixture()
def gpu_probe() -> Iterator[GpuProbe]:
    probe = GpuProbe(interval_s=0.1, slow_interval_s=0.5)
    probe.open()
    try:
        yield probe
    finally:
        probe.close()


def test_the_gpu_probe_reads_what_nvidia_smi_reads(gpu_probe: GpuProbe) -> None:
    """Memory, temperature, power, memory clock and power limit agree with nvidia-smi
    within what two samples a moment apart may differ by."""
    until(lambda: all(np.isfinite(v) for v in by_gpu(read(gpu_probe),
                                                     "gpu.power_mw").values()), 10.0)
    ours = read(gpu_probe)
    theirs = smi()
    assert set(by_gpu(ours, "gpu.mem_total_bytes")) == set(theirs)
    for index, row in theirs.items():
        total = by_gpu(ours, "gpu.mem_total_bytes")[index] / 2**20
        assert abs(total - row["memory.total"]) <= 1.0, (index, total, row)
        used = by_gpu(ours, "gpu.mem_used_bytes")[index] / 2**20
        assert abs(used - row["memory.used"]) <= max(64.0, 0.02 * row["memory.total"])
        assert abs(by_gpu(ours, "gpu.temp_c")[index] - row["temperature.gpu"]) <= 3
        power_w = by_gpu(ours, "gpu.power_mw")[index] / 1e3
        assert abs(power_w - row["power.draw"]) <= max(25.0, 0.2 * row["power.draw"])
        assert abs(by_gpu(ours, "gpu.mem_clock_mhz")[index] - row["clocks.mem"]) <= (
            0.05 * row["clocks.mem"])
        if np.isfinite(row["power.limit"]):
            limit_w = by_gpu(ours, "gpu.power_limit_mw")[index] / 1e3
            assert abs(limit_w - row["power.limit"]) <= 1.0


def test_energy_grows_with_power_drawn(gpu_probe: GpuProbe) -> None:
    """The energy counter (mJ) advances by about power × time between two reads."""
    until(lambda: all(np.isfinite(v) for v in by_gpu(read(gpu_probe),
                                                     "gpu.energy_mj").values()), 10.0)
    first, start = read(gpu_probe), time.monotonic()
    time.sleep(3.0)
    second, elapsed = read(gpu_probe), time.monotonic() - start
    for index, energy in by_gpu(first, "gpu.energy_mj").items():
        gained_j = (by_gpu(second, "gpu.energy_mj")[index] - energy) / 1e3
        power_w = by_gpu(second, "gpu.power_mw")[index] / 1e3
        assert gained_j > 0
        assert 0.5 * power_w * elapsed <= gained_j <= 2.0 * power_w * elapsed + 50.0


HOLDER = """
import sys, time, torch
block = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
block.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
deadline = time.monotonic() + float(sys.argv[2])
a = torch.randn(4096, 4096, device="cuda")
while time.monotonic() < deadline:
    a = (a @ a).tanh()
    torch.cuda.synchronize()
"""


def test_the_process_probe_sees_a_cuda_process_and_its_memory() -> None:
    """A child that holds 1 GiB on GPU 0 and runs kernels is listed under its pid with at
    least that memory; it gets an SM-use channel."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch here has no CUDA")
    held = 2**30
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(held), "60"],
                             stdout=subprocess.PIPE, text=True)
    probe = GpuProcessProbe(interval_s=0.1)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        probe.open()

        def listed() -> bool:
            probe.refresh()
            return any(parse_channel(c)[1].get("pid") == str(child.pid)
                       for c in probe.channels)

        until(listed, 20.0)
        until(lambda: any(parse_channel(c)[0] == "gpu.proc.mem_used_bytes"
                          and parse_channel(c)[1].get("pid") == str(child.pid)
                          and v >= held for c, v in read(probe).items()), 10.0)
        mine = {parse_channel(c)[0] for c in probe.channels
                if parse_channel(c)[1].get("pid") == str(child.pid)}
        assert "gpu.proc.sm_util" in mine or "processUtilization" in str(probe.info)
    finally:
        child.kill()
        child.wait()
        probe.close()
