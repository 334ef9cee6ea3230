"""GPU probe: replayed NVML answers (tests/fixtures/nvml) and the real no-NVML path.

No GPU is reachable here, so the probe runs against a pynvml-shaped object that answers
from a recorded fixture: functions and arguments as nvidia-ml-py takes them, answers with
NVML's types and units, errors as the real ``pynvml.NVMLError`` subclasses. Constants come
from the real ``pynvml`` module. A call the fixture does not hold fails the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pynvml
import pytest

from reveal.catalog import default_catalog
from reveal.collect.gpu import GpuProbe
from reveal.collect.probe import ProbeUnavailable
from reveal.frame import channel_metric

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
H100 = FIXTURES / "h100_sxm5_x2.json"


class UnrecordedCall(AssertionError):
    """The probe made an NVML call the fixture does not hold."""


def _resolve(arg: Any) -> Any:
    return getattr(pynvml, arg) if isinstance(arg, str) else arg


def _answer(value: Any) -> Any:
    if isinstance(value, dict):
        return SimpleNamespace(**value)
    if isinstance(value, list):
        return tuple(value)
    return value


class ReplayNvml:
    """A ``pynvml`` stand-in replaying a fixture; ``calls`` counts calls per function."""

    def __init__(self, fixture: dict[str, Any], init_error: str | None = None) -> None:
        self._fixture = fixture
        self._init_error = init_error
        self._records: dict[tuple[int, str, tuple[Any, ...]], dict[str, Any]] = {}
        self._served: dict[tuple[int, str, tuple[Any, ...]], int] = {}
        self._fields: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.calls: dict[str, int] = {}
        self.initialised = False
        for dev in fixture["devices"]:
            for rec in dev["calls"]:
                key = (dev["index"], rec["fn"], tuple(_resolve(a) for a in rec["args"]))
                self._records[key] = rec
            for rec in dev["fields"]:
                self._fields[(dev["index"], _resolve(rec["field"]), rec["scope"])] = rec

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML", "nvmlClocks")):
            return getattr(pynvml, name)
        if name.startswith("nvmlDevice") and any(
                fn == name for _, fn, _ in self._records):
            return lambda handle, *args: self._replay(name, handle, args)
        raise AttributeError(name)

    NVMLError = pynvml.NVMLError

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def nvmlInit(self) -> None:
        self._count("nvmlInit")
        if self._init_error:
            raise pynvml.NVMLError(getattr(pynvml, self._init_error))
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self._fixture["system"]["nvmlSystemGetDriverVersion"]

    def nvmlDeviceGetCount(self) -> int:
        return self._fixture["system"]["nvmlDeviceGetCount"]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        return ("handle", index)

    def _replay(self, name: str, handle: tuple[str, int], args: tuple[Any, ...]) -> Any:
        assert self.initialised, f"{name} called before nvmlInit or after nvmlShutdown"
        self._count(name)
        key = (handle[1], name, tuple(args))
        rec = self._records.get(key)
        if rec is None:
            raise UnrecordedCall(f"{name}{args} for GPU {handle[1]} is not in the fixture")
        if "error" in rec:
            raise pynvml.NVMLError(getattr(pynvml, rec["error"]))
        if "returns" in rec:
            served = self._served.get(key, 0)
            self._served[key] = served + 1
            return _answer(rec["returns"][min(served, len(rec["returns"]) - 1)])
        return _answer(rec["return"])

    def nvmlDeviceGetFieldValues(self, handle: tuple[str, int], ids: list[Any]) -> list[Any]:
        self._count("nvmlDeviceGetFieldValues")
        answers = []
        for item in ids:
            field_id, scope = item if isinstance(item, tuple) else (item, 0)
            key = (handle[1], field_id, scope)
            rec = self._fields.get(key)
            if rec is None:
                raise UnrecordedCall(f"field {field_id} scope {scope} not in the fixture")
            if "nvmlReturn" in rec:
                answers.append(SimpleNamespace(fieldId=field_id, scopeId=scope, valueType=0,
                                               nvmlReturn=_resolve(rec["nvmlReturn"]),
                                               value=SimpleNamespace()))
                continue
            served = self._served.get(key, 0)
            self._served[key] = served + 1
            value = rec["values"][min(served, len(rec["values"]) - 1)]
            vtype = _resolve(rec["valueType"])
            member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                      6: "usVal"}[vtype]
            answers.append(SimpleNamespace(fieldId=field_id, scopeId=scope, valueType=vtype,
                                           nvmlReturn=pynvml.NVML_SUCCESS,
                                           value=SimpleNamespace(**{member: value})))
        return answers


@pytest.fixture()
def h100() -> dict[str, Any]:
    return json.loads(H100.read_text())


def _open(fixture: dict[str, Any], **options: Any) -> tuple[GpuProbe, ReplayNvml]:
    nvml = ReplayNvml(fixture)
    probe = GpuProbe(nvml=nvml, **options)
    probe.open()
    return probe, nvml


def _read(probe: GpuProbe) -> dict[str, float]:
    out = np.full(len(probe.channels), -1.0)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


def test_fixture_follows_nvml_types(h100: dict[str, Any]) -> None:
    """The fixture holds only names the real bindings know, with NVML's value types."""
    for dev in h100["devices"]:
        for rec in dev["calls"]:
            assert hasattr(pynvml, rec["fn"]), rec["fn"]
            for arg in rec["args"]:
                assert isinstance(arg, int) or hasattr(pynvml, arg), arg
            if "error" in rec:
                assert isinstance(getattr(pynvml, rec["error"]), int)
        for rec in dev["fields"]:
            assert isinstance(getattr(pynvml, rec["field"]), int)
        calls = {r["fn"]: r for r in dev["calls"] if not r["args"]}
        memory = calls["nvmlDeviceGetMemoryInfo"]["return"]
        assert memory["total"] == memory["used"] + memory["free"]  # bytes
        assert memory["total"] == 81559 * 2**20  # H100 80GB HBM3 as nvidia-smi shows it
        assert calls["nvmlDeviceGetEnforcedPowerLimit"]["return"] == 700_000  # mW


def test_channels_identity_and_values(h100: dict[str, Any]) -> None:
    probe, nvml = _open(h100)
    assert probe.status == "ok"
    assert probe.info["gpus"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3",
         "uuid": "GPU-5f8a2c1e-93b4-4d2a-8c61-2e7f0b9d4a13", "pci_bus_id": "00000000:18:00.0"},
        {"index": 1, "name": "NVIDIA H100 80GB HBM3",
         "uuid": "GPU-0c3d7e9b-1a42-4f6e-b8d5-7a9c2e1f6b80", "pci_bus_id": "00000000:2A:00.0"},
    ]
    assert probe.info["driver_version"] == "550.54.15"
    assert len(set(probe.channels)) == len(probe.channels)
    first = _read(probe)
    assert all(np.isfinite(v) for v in first.values())
    assert first["gpu.sm_util{gpu=0}"] == 98.0  # open() consumed the first recorded answer
    assert first["gpu.sm_util{gpu=1}"] == 0.0
    assert first["gpu.mem_total_bytes{gpu=0}"] == 85520809984.0
    assert first["gpu.power_mw{gpu=0}"] == 618902.0
    assert first["gpu.power_limit_mw{gpu=0}"] == 700000.0
    assert first["gpu.sm_clock_mhz{gpu=0}"] == 1980.0
    assert first["gpu.pcie_gen{gpu=0}"] == 5.0 and first["gpu.pcie_width_max{gpu=1}"] == 16.0
    assert first["gpu.pcie_rx_kbps{gpu=0}"] == 2204000.0
    assert first["gpu.ecc_corrected_aggregate{gpu=0}"] == 3.0
    assert first["gpu.mem_temp_c{gpu=0}"] == 72.0
    # throttle reasons: GPU 0 held by the software power cap, GPU 1 idle
    assert first["gpu.clocks_event.sw_power_cap{gpu=0}"] == 1.0
    assert first["gpu.clocks_event.gpu_idle{gpu=0}"] == 0.0
    assert first["gpu.clocks_event.gpu_idle{gpu=1}"] == 1.0
    assert first["gpu.clocks_event.hw_thermal{gpu=1}"] == 0.0
    links = [c for c in probe.channels if c.startswith("gpu.nvlink_tx_kib{gpu=0,")]
    assert len(links) == 18
    second = _read(probe)
    for counter in ("gpu.energy_mj{gpu=0}", "gpu.nvlink_tx_kib{gpu=0,link=5}",
                    "gpu.nvlink_rx_kib{gpu=1,link=17}"):
        assert second[counter] >= first[counter]
    assert second["gpu.energy_mj{gpu=0}"] - first["gpu.energy_mj{gpu=0}"] == 61890.0
    # every GPU reading is one call per GPU per tick, plus one field-values batch
    assert nvml.calls["nvmlDeviceGetFieldValues"] == 2 * 3
    probe.close()
    assert not nvml.initialised


def test_not_supported_calls_dropped_and_listed(h100: dict[str, Any]) -> None:
    probe, _ = _open(h100)
    for gone in ("gpu.fan_pct{gpu=0}", "gpu.retired_pages_sbe{gpu=1}",
                 "gpu.retired_pages_dbe{gpu=0}", "gpu.nvlink_crc_flit_errors{gpu=0}"):
        assert gone not in probe.channels
        assert any(entry.startswith(gone + ": ") and "Not Supported" in entry
                   for entry in probe.info["unsupported"]), gone
    assert "gpu.nvlink_replay_errors{gpu=0}" in probe.channels
    assert "gpu.remapped_rows_unc{gpu=1}" in probe.channels
    probe.close()


def test_every_channel_is_catalogued(h100: dict[str, Any]) -> None:
    probe, _ = _open(h100)
    catalog = default_catalog()
    for channel in probe.channels:
        info = catalog.lookup(channel)
        assert channel_metric(channel) in catalog, channel
        assert info.subsystem == "gpu" and info.description
    assert catalog.lookup("gpu.energy_mj{gpu=0}").kind == "counter"
    assert catalog.lookup("gpu.ecc_uncorrected_volatile{gpu=0}").kind == "event"
    assert catalog.lookup("gpu.mem_total_bytes{gpu=0}").kind == "static"
    probe.close()


def test_pcie_throughput_can_be_left_out(h100: dict[str, Any]) -> None:
    probe, nvml = _open(h100, pcie_throughput=False)
    assert not any(c.startswith("gpu.pcie_tx_kbps") for c in probe.channels)
    assert "nvmlDeviceGetPcieThroughput" not in nvml.calls
    probe.close()


def test_failed_call_reads_nan_then_recovers(h100: dict[str, Any]) -> None:
    probe, nvml = _open(h100)
    key = (0, "nvmlDeviceGetPowerUsage", ())
    saved = nvml._records[key]
    nvml._records[key] = {"error": "NVML_ERROR_GPU_IS_LOST"}
    values = _read(probe)
    assert np.isnan(values["gpu.power_mw{gpu=0}"])
    assert np.isfinite(values["gpu.power_mw{gpu=1}"])
    nvml._records[key] = saved
    assert np.isfinite(_read(probe)["gpu.power_mw{gpu=0}"])
    probe.close()


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


def test_recorder_encodes_nvml_structures() -> None:
    """record_nvml.py (run on a GPU host to refresh the fixture) stores NVML's structures."""
    import importlib.util

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
