"""GPU probe: replayed NVML answers (tests/fixtures/nvml) and the real no-NVML path.

No GPU is reachable here, so the probe runs against a pynvml-shaped object that answers
from a recorded fixture (``fixtures/nvml/replay.py``): functions and arguments as
nvidia-ml-py takes them, answers with NVML's types and units, errors as the real
``pynvml.NVMLError`` subclasses, constants from the real ``pynvml``. A call the fixture
does not hold, or any NVML call from the sampling thread, fails the test. The probe's own
threads, the real Sampler and the real procfs probes run as they do in the collector.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pynvml
import pytest

from reveal.catalog import default_catalog
from reveal.collect.cpu import CpuProbe
from reveal.collect.gpu import GpuProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.probe import Probe, ProbeUnavailable
from reveal.collect.sampler import MemorySink, Sampler, ticker_available
from reveal.frame import channel_metric

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
H100 = FIXTURES / "h100_sxm5_x2.json"
H100_MIG = FIXTURES / "h100_mig_x1.json"
H200 = FIXTURES / "h200_x1.json"  # captured from a real H200 (the others are written by hand)

_spec = importlib.util.spec_from_file_location("nvml_replay", FIXTURES / "replay.py")
assert _spec is not None and _spec.loader is not None
replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay)
ReplayNvml = replay.ReplayNvml

FAST = {"interval_s": 0.05, "slow_interval_s": 0.5}  # polls in these tests, seconds


@pytest.fixture()
def h100() -> dict[str, Any]:
    return json.loads(H100.read_text())


@pytest.fixture()
def opened() -> Iterator[Callable[..., tuple[GpuProbe, Any]]]:
    """Opens probes on a replay; closes them after the test and checks that every NVML
    call was one the fixture holds and none came from the sampling thread."""
    made: list[tuple[GpuProbe, Any]] = []

    def _open(fixture: dict[str, Any], **options: Any) -> tuple[GpuProbe, Any]:
        replay_options = {k: options.pop(k) for k in ("gpus", "delays") if k in options}
        nvml = ReplayNvml(fixture, **replay_options)
        probe = GpuProbe(nvml=nvml, **{**FAST, **options})
        probe.open()
        nvml.forbidden = threading.current_thread()
        made.append((probe, nvml))
        return probe, nvml

    yield _open
    for probe, nvml in made:
        for gpu in range(nvml.nvmlDeviceGetCount()):
            nvml.release(gpu)
        probe.close()
        assert nvml.unrecorded == []


def _read(probe: GpuProbe) -> dict[str, float]:
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


def _until(check: Callable[[], bool], timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _settled(probe: GpuProbe) -> dict[str, float]:
    """Values once every group has been polled (no NaN left)."""
    _until(lambda: all(np.isfinite(v) for v in _read(probe).values()))
    return _read(probe)


def test_fixtures_follow_nvml_types(h100: dict[str, Any]) -> None:
    """The fixtures hold only names the real bindings know, with NVML's value types."""
    for path in sorted(FIXTURES.glob("*.json")):
        fixture = json.loads(path.read_text())
        for dev in fixture["devices"]:
            recs = dev["calls"] + [c for m in dev.get("mig_devices", []) for c in m["calls"]]
            for rec in recs:
                assert hasattr(pynvml, rec["fn"]), rec["fn"]
                for arg in rec["args"]:
                    assert isinstance(arg, int) or hasattr(pynvml, arg), arg
                if "error" in rec:
                    assert isinstance(getattr(pynvml, rec["error"]), int)
            for rec in dev["fields"]:
                assert isinstance(getattr(pynvml, rec["field"]), int)
            for name in dev.get("gpm", {}).get("metrics", {}):
                assert isinstance(getattr(pynvml, name), int)
    calls = {r["fn"]: r for r in h100["devices"][0]["calls"] if not r["args"]}
    memory = calls["nvmlDeviceGetMemoryInfo"]["return"]
    assert memory["total"] == memory["used"] + memory["free"]  # bytes
    assert memory["total"] == 81559 * 2**20  # H100 80GB HBM3 as nvidia-smi shows it
    assert calls["nvmlDeviceGetEnforcedPowerLimit"]["return"] == 700_000  # mW
    assert calls["nvmlDeviceGetSupportedEventTypes"]["return"] & \
        pynvml.nvmlEventTypeXidCriticalError


def test_channels_identity_and_values(h100: dict[str, Any], opened: Any) -> None:
    probe, nvml = opened(h100)
    assert probe.status == "ok", probe.reason
    assert probe.info["gpus"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3",
         "uuid": "GPU-5f8a2c1e-93b4-4d2a-8c61-2e7f0b9d4a13", "pci_bus_id": "00000000:18:00.0"},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3",
         "uuid": "GPU-0c3d7e9b-1a42-4f6e-b8d5-7a9c2e1f6b80", "pci_bus_id": "00000000:2A:00.0"},
    ]
    assert probe.info["driver_version"] == "550.54.15"
    assert len(set(probe.channels)) == len(probe.channels)
    assert not any(c.startswith("gpu.sm_util") for c in probe.channels)  # renamed
    first = _settled(probe)
    assert first["gpu.kernel_active_pct{gpu=0}"] in (98.0, 99.0, 97.0)
    assert first["gpu.kernel_active_pct{gpu=1}"] == 0.0
    assert first["gpu.mem_total_bytes{gpu=0}"] == 85520809984.0
    assert first["gpu.power_limit_mw{gpu=0}"] == 700000.0
    assert first["gpu.sm_clock_mhz{gpu=0}"] == 1980.0
    assert first["gpu.pcie_gen{gpu=0}"] == 5.0 and first["gpu.pcie_width_max{gpu=1}"] == 16.0
    assert first["gpu.pcie_rx_kbps{gpu=0}"] > 0
    assert first["gpu.ecc_corrected_aggregate{gpu=0}"] == 3.0
    assert first["gpu.mem_temp_c{gpu=0}"] in (72.0, 73.0)
    # SM activity from GPM, next to (and lower than) NVML's kernel-active time
    assert 70.0 <= first["gpu.sm_active_pct{gpu=0}"] <= 73.0
    assert first["gpu.tensor_active_pct{gpu=0}"] > 40.0
    assert first["gpu.sm_active_pct{gpu=1}"] == 0.0
    assert first["gpu.clocks_event.sw_power_cap{gpu=0}"] == 1.0
    assert first["gpu.clocks_event.gpu_idle{gpu=1}"] == 1.0
    assert first["gpu.xid_errors{gpu=0}"] == 0.0 and first["gpu.xid_last{gpu=1}"] == 0.0
    links = [c for c in probe.channels if c.startswith("gpu.nvlink_tx_kib{gpu=0,")]
    assert len(links) == 18
    assert first["gpu.energy_mj{gpu=0}"] == 4815345979.0  # the last recorded answer
    # read() only copies: no NVML call from this thread (the replay would have failed)
    before = dict(nvml.calls)
    for _ in range(100):
        _read(probe)
    assert sum(nvml.calls.values()) - sum(before.values()) < 100 * 10  # pollers only


def test_a_captured_h200_replays_with_what_it_lacks_named(opened: Any) -> None:
    """NVML's answers from a real H200 in a virtual machine: no fan, no NVLink peers and no
    retired pages (rows are remapped) are named as unsupported, GPM is there, and the
    values are the captured ones in the catalog's units."""
    fixture = json.loads(H200.read_text())
    probe, _ = opened(fixture)
    assert probe.status == "ok", probe.reason
    assert probe.info["gpus"][0]["name"] == "NVIDIA H200"
    assert probe.info["driver_version"] == "580.159.04"
    for gone in ("gpu.fan_pct{gpu=0}", "gpu.retired_pages_sbe{gpu=0}",
                 "gpu.nvlink_crc_flit_errors{gpu=0}"):
        assert gone not in probe.channels
        assert any(entry.startswith(gone + ": ") for entry in probe.info["unsupported"]), gone
    assert not any(c.startswith("gpu.nvlink_tx_kib") for c in probe.channels)
    values = _settled(probe)
    assert values["gpu.mem_total_bytes{gpu=0}"] == 150754820096.0  # 143771 MiB in nvidia-smi
    assert values["gpu.power_limit_mw{gpu=0}"] == 700000.0
    answers = {(c["fn"], tuple(c["args"])): c for c in fixture["devices"][0]["calls"]}
    power = answers[("nvmlDeviceGetPowerUsage", ())]["returns"]  # milliwatts, as recorded
    assert min(power) <= values["gpu.power_mw{gpu=0}"] <= max(power)
    assert values["gpu.mem_clock_mhz{gpu=0}"] == answers[
        ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",))]["return"] == 3201
    assert values["gpu.remapped_rows_unc{gpu=0}"] == 0.0
    assert 1.0 < values["gpu.sm_active_pct{gpu=0}"] < 1.5  # GPM, percent
    catalog = default_catalog()
    assert all(catalog.lookup(c) is not None for c in probe.channels)


def test_reads_never_wait_for_nvml(h100: dict[str, Any], opened: Any) -> None:
    """With every NVML call taking 20 ms and a GPU that hangs, read() takes microseconds."""
    probe, nvml = opened(h100, delays={"nvmlDeviceGetPowerUsage": 0.02})
    nvml.hang(1)
    out = np.empty(len(probe.channels))
    t0 = time.perf_counter()
    for _ in range(200):
        probe.read(out)
    assert (time.perf_counter() - t0) / 200 < 0.002


def test_slow_queries_at_their_own_rate(h100: dict[str, Any], opened: Any) -> None:
    probe, nvml = opened(h100, delays={"nvmlDeviceGetPcieThroughput": 0.02})
    time.sleep(1.2)
    fast = nvml.calls["nvmlDeviceGetPowerUsage"]
    pcie = nvml.calls["nvmlDeviceGetPcieThroughput"]
    # 2 GPUs: ~24 fast polls each in 1.2 s at 50 ms; PCIe at 0.5 s, two directions
    assert fast >= 2 * 15
    assert pcie <= 2 * 2 * 5
    assert np.isfinite(_read(probe)["gpu.pcie_tx_kbps{gpu=1}"])


def test_pcie_throughput_can_be_left_out(h100: dict[str, Any], opened: Any) -> None:
    probe, nvml = opened(h100, pcie_throughput=False)
    time.sleep(0.2)
    assert not any(c.startswith("gpu.pcie_tx_kbps") for c in probe.channels)
    assert "nvmlDeviceGetPcieThroughput" not in nvml.calls


def test_not_supported_calls_dropped_and_listed(h100: dict[str, Any], opened: Any) -> None:
    probe, _ = opened(h100)
    for gone in ("gpu.fan_pct{gpu=0}", "gpu.retired_pages_sbe{gpu=1}",
                 "gpu.retired_pages_dbe{gpu=0}", "gpu.nvlink_crc_flit_errors{gpu=0}"):
        assert gone not in probe.channels
        assert any(entry.startswith(gone + ": ") and "Not Supported" in entry
                   for entry in probe.info["unsupported"]), gone
    assert "gpu.nvlink_replay_errors{gpu=0}" in probe.channels
    assert "gpu.remapped_rows_unc{gpu=1}" in probe.channels


def test_every_channel_is_catalogued(h100: dict[str, Any], opened: Any) -> None:
    catalog = default_catalog()
    for fixture in (h100, json.loads(H100_MIG.read_text())):
        probe, _ = opened(fixture)
        for channel in probe.channels:
            info = catalog.lookup(channel)
            assert channel_metric(channel) in catalog, channel
            assert info.subsystem == "gpu" and info.description
    assert catalog.lookup("gpu.energy_mj{gpu=0}").kind == "counter"
    assert catalog.lookup("gpu.xid_errors{gpu=0}").kind == "event"
    assert catalog.lookup("gpu.mig.mem_total_bytes{gpu=0,mig=1/0}").kind == "static"
    # runs recorded under the old name still read as NVML's kernel-active time
    old, new = catalog.lookup("gpu.sm_util"), catalog.lookup("gpu.kernel_active_pct")
    assert (old.kind, old.unit) == (new.kind, new.unit) and "kernel" in old.description


def test_failed_call_reads_nan_then_recovers(h100: dict[str, Any], opened: Any) -> None:
    probe, nvml = opened(h100)
    _settled(probe)
    key = (("gpu", 0), "nvmlDeviceGetPowerUsage", ())
    saved = nvml._records[key]
    nvml._records[key] = {"fn": "nvmlDeviceGetPowerUsage", "args": [],
                          "error": "NVML_ERROR_GPU_IS_LOST"}
    _until(lambda: np.isnan(_read(probe)["gpu.power_mw{gpu=0}"]))
    assert np.isfinite(_read(probe)["gpu.power_mw{gpu=1}"])
    nvml._records[key] = saved
    _until(lambda: np.isfinite(_read(probe)["gpu.power_mw{gpu=0}"]))


def test_a_stuck_gpu_reads_nan_and_delays_nothing_else(h100: dict[str, Any],
                                                       opened: Any) -> None:
    probe, nvml = opened(h100)
    _settled(probe)
    nvml.hang(1)
    hung_at = time.monotonic()
    _until(lambda: np.isnan(_read(probe)["gpu.power_mw{gpu=1}"]), timeout_s=2.0)
    # stale after 3 fast polls (0.15 s) plus the watchdog's period (0.05 s), long before
    # the slow group's 1.5 s; the bound leaves room for a loaded machine
    assert time.monotonic() - hung_at < 1.0
    polls = nvml.calls["nvmlDeviceGetPowerUsage"]
    _until(lambda: nvml.calls["nvmlDeviceGetPowerUsage"] >= polls + 5)  # GPU 0 goes on
    assert np.isfinite(_read(probe)["gpu.power_mw{gpu=0}"])
    # slow values (PCIe, limits) go stale after 3 of their own periods (1.5 s)
    _until(lambda: all(np.isnan(v) for k, v in _read(probe).items()
                       if "{gpu=1" in k and not k.startswith("gpu.xid")))
    assert np.isfinite(_read(probe)["gpu.xid_errors{gpu=1}"])  # the event thread is not stuck
    probe.refresh()
    assert probe.status == "degraded" and "GPU 1 not answering" in probe.reason
    nvml.release(1)
    _until(lambda: np.isfinite(_read(probe)["gpu.power_mw{gpu=1}"]))
    probe.refresh()
    assert probe.status == "ok"


def test_mig_devices_are_channels_and_the_reason_says_so(opened: Any) -> None:
    probe, _ = opened(json.loads(H100_MIG.read_text()))
    assert probe.status == "degraded"
    assert "MIG mode" in probe.reason and "1/0, 2/0, 9/0" in probe.reason
    assert "gpu.kernel_active_pct" in probe.reason  # what NVML does not give under MIG
    assert [m["gi"] for m in probe.info["gpus"][0]["mig"]] == [1, 2, 9]
    assert probe.info["mig_gpus"] == [0]
    values = _settled(probe)
    assert values["gpu.mig.mem_total_bytes{gpu=0,mig=1/0}"] == 40192 * 2**20
    assert values["gpu.mig.mem_total_bytes{gpu=0,mig=9/0}"] == 9856 * 2**20
    assert values["gpu.mig.mem_used_bytes{gpu=0,mig=2/0}"] == 4 * 2**30
    assert values["gpu.mig.mem_used_bytes{gpu=0,mig=1/0}"] > 24 * 2**30
    assert "gpu.kernel_active_pct{gpu=0}" not in probe.channels


def test_mig_option_off_keeps_the_reason(opened: Any) -> None:
    probe, _ = opened(json.loads(H100_MIG.read_text()), mig=False)
    assert not any(c.startswith("gpu.mig.") for c in probe.channels)
    assert probe.status == "degraded" and "option mig" in probe.reason


def test_xid_events_raise_the_counter(h100: dict[str, Any], opened: Any) -> None:
    probe, nvml = opened(h100)
    _settled(probe)
    nvml.raise_xid(1, 79)
    _until(lambda: _read(probe)["gpu.xid_errors{gpu=1}"] == 1.0)
    assert _read(probe)["gpu.xid_last{gpu=1}"] == 79.0
    nvml.raise_xid(1, 48)
    _until(lambda: _read(probe)["gpu.xid_errors{gpu=1}"] == 2.0)
    values = _read(probe)
    assert values["gpu.xid_last{gpu=1}"] == 48.0 and values["gpu.xid_errors{gpu=0}"] == 0.0


def test_xid_not_supported_degrades_gracefully(h100: dict[str, Any], opened: Any) -> None:
    for dev in h100["devices"]:
        for rec in dev["calls"]:
            if rec["fn"] == "nvmlDeviceGetSupportedEventTypes":
                rec["return"] &= ~pynvml.nvmlEventTypeXidCriticalError
    probe, _ = opened(h100)
    assert probe.status == "ok"
    assert not any(c.startswith("gpu.xid") for c in probe.channels)
    assert "gpu.xid_errors{gpu=0}: XID events not supported on this GPU" in \
        probe.info["unsupported"]
    off, nvml = opened(h100, xid=False)
    assert not any(c.startswith("gpu.xid") for c in off.channels) and not nvml.event_sets


def test_options_are_declared() -> None:
    for key in ("nvml", "interval_s", "slow_interval_s", "stale_intervals", "pcie_throughput",
                "gpm", "mig", "xid", "xid_wait_ms", "open_timeout_s"):
        assert GpuProbe.options_help[key]


def test_driver_not_loaded_is_unavailable(h100: dict[str, Any]) -> None:
    nvml = ReplayNvml(h100, init_error="NVML_ERROR_DRIVER_NOT_LOADED")
    probe = GpuProbe(nvml=nvml)
    with pytest.raises(ProbeUnavailable, match=r"NVML could not start.*Driver Not Loaded"):
        probe.open()
    assert probe.status == "unavailable"


def test_no_gpu_reported_is_unavailable(h100: dict[str, Any]) -> None:
    h100["system"]["nvmlDeviceGetCount"] = 0
    nvml = ReplayNvml(h100)
    with pytest.raises(ProbeUnavailable, match="no GPU"):
        GpuProbe(nvml=nvml).open()
    assert not nvml.initialised  # shut down again


def test_real_pynvml_without_driver_is_unavailable() -> None:
    """The real bindings on a host without libnvidia-ml: one clear ProbeUnavailable."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("an NVIDIA driver is present on this host")
    probe = GpuProbe()
    with pytest.raises(ProbeUnavailable) as info:
        probe.open()
    message = str(info.value)
    assert message.startswith("gpu: NVML could not start")
    assert "\n" not in message and "libnvidia-ml" in message
    assert probe.status == "unavailable" and probe.reason == message


def _sample(probes: list[Probe], seconds: float) -> tuple[Sampler, list[str], np.ndarray]:
    sampler = Sampler(probes, 0.1, refresh_s=1.0)
    sink = MemorySink(sampler.channels)
    sampler.run(sink, duration_s=seconds)
    channels, _, rows = sink.parts[-1]
    return sampler, channels, np.asarray(rows)


@pytest.mark.parametrize("hang", [False, True], ids=["8-gpus", "8-gpus-one-hung"])
def test_eight_slow_gpus_beside_procfs_probes_miss_no_tick(
        h100: dict[str, Any], native_on: None, hang: bool) -> None:
    """8 GPUs whose PCIe query sleeps 20 ms per call (320 ms per round if it were on the
    tick), sampled at 100 ms for 3 s with the real cpu and memory probes."""
    nvml = ReplayNvml(h100, gpus=8, delays={"nvmlDeviceGetPcieThroughput": 0.02})
    gpu = GpuProbe(nvml=nvml, interval_s=0.1, slow_interval_s=0.5)
    probes: list[Probe] = [CpuProbe(), MemoryProbe(), gpu]
    for probe in probes:
        probe.open()
    nvml.forbidden = threading.current_thread()
    try:
        if hang:
            nvml.hang(7)
        sampler, channels, rows = _sample(probes, 3.0)
    finally:
        nvml.release(7)
        for probe in probes:
            probe.close()
    assert nvml.unrecorded == []
    assert sampler.stats.missed_ticks == 0
    assert len(rows) == 30
    if ticker_available():
        assert sampler.mode == "native"  # the C thread kept the ticks with GPUs present
    power = [channels.index(f"gpu.power_mw{{gpu={i}}}") for i in range(8)]
    late = rows[10:]  # after the first second
    assert np.isfinite(late[:, power[:7]]).all()
    assert np.isnan(late[:, power[7]]).all() == hang
    assert np.isfinite(late[:, channels.index(f"gpu.pcie_tx_kbps{{gpu={0}}}")]).all()
    assert np.isfinite(rows[:, channels.index("cpu.user")]).all()


def test_recorder_encodes_nvml_structures() -> None:
    """record_nvml.py (run on a GPU host to refresh the fixture) stores NVML's structures."""
    spec = importlib.util.spec_from_file_location("record_nvml", FIXTURES / "record_nvml.py")
    assert spec is not None and spec.loader is not None
    recorder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recorder)
    memory = pynvml.c_nvmlMemory_t()
    memory.total, memory.free, memory.used = 85520809984, 21096300544, 64424509440
    assert recorder.encode(memory) == {"total": 85520809984, "free": 21096300544,
                                       "used": 64424509440}
    assert recorder.encode((0, 1, 0, 0)) == [0, 1, 0, 0]
    assert recorder.encode(b"NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    assert recorder._ERRORS[pynvml.NVML_ERROR_NOT_SUPPORTED] == "NVML_ERROR_NOT_SUPPORTED"


def test_a_gpu_hung_at_open_joins_when_it_answers(h100: dict[str, Any]) -> None:
    """open() waits at most open_timeout_s; the GPUs that answered are recorded at once."""
    nvml = ReplayNvml(h100)
    nvml.hang(0)
    probe = GpuProbe(nvml=nvml, open_timeout_s=0.5, **FAST)
    t0 = time.monotonic()
    probe.open()
    try:
        assert time.monotonic() - t0 < 1.0
        assert probe.status == "degraded" and "GPU 0: no answer yet" in probe.reason
        assert probe.channels and all("gpu=1" in c for c in probe.channels)
        assert np.isfinite(_settled(probe)["gpu.power_mw{gpu=1}"])
        nvml.release(0)
        _until(lambda: probe.refresh() or "gpu.power_mw{gpu=0}" in probe.channels)
        assert probe.status == "ok"
        assert np.isfinite(_settled(probe)["gpu.power_mw{gpu=0}"])
    finally:
        probe.close()
    assert nvml.unrecorded == []
