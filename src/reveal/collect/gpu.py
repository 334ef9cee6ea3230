"""NVIDIA GPUs through NVML (the ``pynvml`` module of nvidia-ml-py).

The probe talks to a *pynvml-shaped* object: the real ``pynvml`` module by default, or any
object with the same function names, ``NVML_*`` constants and ``NVMLError`` class (option
``nvml=``; the tests replay recorded NVML answers this way). Each per-GPU reading is one
NVML call; at ``open()`` every call is tried once and a call answering ``NOT_SUPPORTED``
(or ``NO_PERMISSION``, ``FUNCTION_NOT_FOUND``, ``INVALID_ARGUMENT``) drops its channels,
listed in ``info["unsupported"]``. A call failing later reads as NaN for that tick.

Channels, label ``{gpu=INDEX}`` (NVLink ones add ``link=N``), units as NVML reports them:

- ``gpu.sm_util``, ``gpu.mem_util`` (percent of the last sample period, busy SM / memory
  controller), ``gpu.mem_used_bytes``, ``gpu.mem_free_bytes``, ``gpu.mem_total_bytes``;
- ``gpu.power_mw``, ``gpu.power_limit_mw`` (milliwatts), ``gpu.energy_mj`` (cumulative
  millijoules since the driver loaded), ``gpu.temp_c``, ``gpu.mem_temp_c`` (°C),
  ``gpu.fan_pct``, ``gpu.pstate`` (0 = P0, fastest);
- ``gpu.sm_clock_mhz``, ``gpu.mem_clock_mhz``, ``gpu.graphics_clock_mhz`` (MHz);
- ``gpu.pcie_gen``, ``gpu.pcie_width`` (current link), ``gpu.pcie_gen_max``,
  ``gpu.pcie_width_max``; ``gpu.pcie_tx_kbps``, ``gpu.pcie_rx_kbps`` (KB/s measured by the
  driver over 20 ms, which each call waits for: ``pcie_throughput=False`` leaves them out);
  ``gpu.pcie_replay`` (cumulative link replays);
- ``gpu.ecc_corrected_volatile``, ``gpu.ecc_uncorrected_volatile`` (since the driver
  loaded), ``gpu.ecc_corrected_aggregate``, ``gpu.ecc_uncorrected_aggregate`` (lifetime);
  ``gpu.retired_pages_sbe``, ``gpu.retired_pages_dbe`` (pre-Ampere);
  ``gpu.remapped_rows_corr``, ``gpu.remapped_rows_unc``, ``gpu.remap_pending``,
  ``gpu.remap_failed`` (Ampere and later);
- ``gpu.clocks_event.<reason>``: 1 while that reason holds clocks down (``gpu_idle``,
  ``sw_power_cap``, ``hw_slowdown``, ``sw_thermal``, ``hw_thermal``, ``hw_power_brake``,
  ``sync_boost``, ``app_clocks``, ``display_clocks``);
- ``gpu.nvlink_tx_kib{link}``, ``gpu.nvlink_rx_kib{link}`` (cumulative data KiB per active
  link) and ``gpu.nvlink_crc_flit_errors``, ``gpu.nvlink_crc_data_errors``,
  ``gpu.nvlink_replay_errors``, ``gpu.nvlink_recovery_errors`` (all links), read with one
  ``nvmlDeviceGetFieldValues`` call per GPU per tick.

GPU identity (index, name, uuid, PCI bus id) goes to ``info["gpus"]``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from reveal.collect._nvml import error_is, load_nvml, start_nvml
from reveal.collect.probe import Probe, ProbeUnavailable, register
from reveal.frame import format_channel

Extract = Callable[[Any], float]

_DROP_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
                "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")

CLOCK_EVENT_BITS = (
    ("gpu_idle", 0x1), ("app_clocks", 0x2), ("sw_power_cap", 0x4), ("hw_slowdown", 0x8),
    ("sync_boost", 0x10), ("sw_thermal", 0x20), ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80), ("display_clocks", 0x100),
)

# NVML field values read in one batch: (metric, field constant name, per link?)
FIELDS = (
    ("gpu.mem_temp_c", "NVML_FI_DEV_MEMORY_TEMP", False),
    ("gpu.nvlink_crc_flit_errors", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_crc_data_errors", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_replay_errors", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_recovery_errors", "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", True),
    ("gpu.nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", True),
)

# nvmlValueType_t → the union member holding the value
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
                 6: "usVal"}


def _same(value: Any) -> float:
    return float(value)


def _attr(name: str) -> Extract:
    return lambda value: float(getattr(value, name))


def _item(index: int) -> Extract:
    return lambda value: float(value[index])


def _bit(mask: int) -> Extract:
    return lambda value: float(bool(int(value) & mask))


def _count(value: Any) -> float:
    return float(len(value))


@dataclass(frozen=True)
class Reading:
    """One NVML call per GPU per tick and the channels its answer fills.

    ``funcs``: the function name, then older names to try when the module lacks it.
    ``args``: arguments after the device handle; strings name ``NVML_*`` constants.
    ``outputs``: ``(metric, extractor)`` pairs applied to the call's answer.
    """

    funcs: tuple[str, ...]
    args: tuple[str | int, ...]
    outputs: tuple[tuple[str, Extract], ...]
    option: str = ""  # probe option that turns the reading off when False


def _one(func: str, metric: str, *args: str | int, option: str = "") -> Reading:
    return Reading((func,), args, ((metric, _same),), option)


READINGS: tuple[Reading, ...] = (
    Reading(("nvmlDeviceGetUtilizationRates",), (),
            (("gpu.sm_util", _attr("gpu")), ("gpu.mem_util", _attr("memory")))),
    Reading(("nvmlDeviceGetMemoryInfo",), (),
            (("gpu.mem_used_bytes", _attr("used")), ("gpu.mem_free_bytes", _attr("free")),
             ("gpu.mem_total_bytes", _attr("total")))),
    _one("nvmlDeviceGetPowerUsage", "gpu.power_mw"),
    _one("nvmlDeviceGetEnforcedPowerLimit", "gpu.power_limit_mw"),
    _one("nvmlDeviceGetTotalEnergyConsumption", "gpu.energy_mj"),
    _one("nvmlDeviceGetTemperature", "gpu.temp_c", "NVML_TEMPERATURE_GPU"),
    _one("nvmlDeviceGetFanSpeed", "gpu.fan_pct"),
    _one("nvmlDeviceGetPerformanceState", "gpu.pstate"),
    _one("nvmlDeviceGetClockInfo", "gpu.sm_clock_mhz", "NVML_CLOCK_SM"),
    _one("nvmlDeviceGetClockInfo", "gpu.mem_clock_mhz", "NVML_CLOCK_MEM"),
    _one("nvmlDeviceGetClockInfo", "gpu.graphics_clock_mhz", "NVML_CLOCK_GRAPHICS"),
    _one("nvmlDeviceGetCurrPcieLinkGeneration", "gpu.pcie_gen"),
    _one("nvmlDeviceGetCurrPcieLinkWidth", "gpu.pcie_width"),
    _one("nvmlDeviceGetMaxPcieLinkGeneration", "gpu.pcie_gen_max"),
    _one("nvmlDeviceGetMaxPcieLinkWidth", "gpu.pcie_width_max"),
    _one("nvmlDeviceGetPcieThroughput", "gpu.pcie_tx_kbps", "NVML_PCIE_UTIL_TX_BYTES",
         option="pcie_throughput"),
    _one("nvmlDeviceGetPcieThroughput", "gpu.pcie_rx_kbps", "NVML_PCIE_UTIL_RX_BYTES",
         option="pcie_throughput"),
    _one("nvmlDeviceGetPcieReplayCounter", "gpu.pcie_replay"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_corrected_volatile",
         "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_uncorrected_volatile",
         "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_corrected_aggregate",
         "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_uncorrected_aggregate",
         "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
    Reading(("nvmlDeviceGetRetiredPages",),
            ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",),
            (("gpu.retired_pages_sbe", _count),)),
    Reading(("nvmlDeviceGetRetiredPages",), ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",),
            (("gpu.retired_pages_dbe", _count),)),
    Reading(("nvmlDeviceGetRemappedRows",), (),
            (("gpu.remapped_rows_corr", _item(0)), ("gpu.remapped_rows_unc", _item(1)),
             ("gpu.remap_pending", _item(2)), ("gpu.remap_failed", _item(3)))),
    Reading(("nvmlDeviceGetCurrentClocksEventReasons",
             "nvmlDeviceGetCurrentClocksThrottleReasons"), (),
            tuple((f"gpu.clocks_event.{name}", _bit(mask)) for name, mask in CLOCK_EVENT_BITS)),
)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass
class _Bound:
    """A reading resolved for one GPU: the callable, its arguments (handle first), slots."""

    func: Callable[..., Any]
    args: tuple[Any, ...]
    slots: list[tuple[Extract, int]]


@register
class GpuProbe(Probe):
    """Per-GPU utilisation, memory, power, clocks, PCIe, ECC, throttling, NVLink (NVML)."""

    name = "gpu"
    description = "NVIDIA GPU utilisation, memory, power, clocks, PCIe, ECC, NVLink (NVML)"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._nvml: Any = None
        self._calls: list[_Bound] = []
        self._fields: list[tuple[Any, list[Any], list[int]]] = []
        self._initialised = False

    # -- setup -----------------------------------------------------------------------------
    def _error_name(self, exc: Exception) -> str:
        return next((n for n in _DROP_ERRORS if error_is(self._nvml, exc, n)), "")

    def open(self) -> None:
        nvml = self._nvml = load_nvml(self.options, "gpu")
        try:
            start_nvml(nvml, "gpu")
        except ProbeUnavailable as exc:
            self.status, self.reason = "unavailable", str(exc)
            raise
        self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise ProbeUnavailable("gpu: NVML started but reports no GPU")
            self.info["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
            self._setup(count)
        except ProbeUnavailable as exc:
            self.status, self.reason = "unavailable", str(exc)
            self.close()
            raise
        except nvml.NVMLError as exc:
            self.status, self.reason = "unavailable", f"gpu: NVML query failed at start: {exc}"
            self.close()
            raise ProbeUnavailable(self.reason) from exc

    def _setup(self, count: int) -> None:
        nvml = self._nvml
        channels: list[str] = []
        unsupported: list[str] = []
        gpus: list[dict[str, Any]] = []
        self._calls, self._fields = [], []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(self._identity(index, handle))
            labels = {"gpu": str(index)}
            for reading in READINGS:
                if reading.option and not self.options.get(reading.option, True):
                    continue
                bound = self._bind(reading, handle, labels, channels, unsupported)
                if bound is not None:
                    self._calls.append(bound)
            self._bind_fields(handle, labels, channels, unsupported)
        self.channels = channels
        self.info["gpus"] = gpus
        self.info["unsupported"] = unsupported
        if not channels:
            raise ProbeUnavailable("gpu: every NVML query is unsupported on these GPUs")

    def _identity(self, index: int, handle: Any) -> dict[str, Any]:
        nvml = self._nvml
        ident: dict[str, Any] = {"index": index}
        for key, func in (("name", "nvmlDeviceGetName"), ("uuid", "nvmlDeviceGetUUID")):
            try:
                ident[key] = _text(getattr(nvml, func)(handle))
            except nvml.NVMLError:
                ident[key] = ""
        try:
            ident["pci_bus_id"] = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
        except nvml.NVMLError:
            ident["pci_bus_id"] = ""
        return ident

    def _bind(self, reading: Reading, handle: Any, labels: dict[str, str],
              channels: list[str], unsupported: list[str]) -> _Bound | None:
        nvml = self._nvml
        func = next((getattr(nvml, f) for f in reading.funcs if hasattr(nvml, f)), None)
        names = [format_channel(metric, labels) for metric, _ in reading.outputs]
        if func is None:
            unsupported += [f"{n}: {reading.funcs[0]} missing from the NVML bindings"
                            for n in names]
            return None
        args = tuple(getattr(nvml, a) if isinstance(a, str) else a for a in reading.args)
        try:
            answer = func(handle, *args)
        except nvml.NVMLError as exc:
            if self._error_name(exc):
                unsupported += [f"{n}: {exc}" for n in names]
                return None
            answer = None  # transient failure: keep the channels, NaN until it answers
        slots: list[tuple[Extract, int]] = []
        for (_, extract), name in zip(reading.outputs, names, strict=True):
            if answer is not None:
                try:
                    extract(answer)
                except (TypeError, ValueError, AttributeError, IndexError):
                    unsupported.append(f"{name}: unexpected answer {type(answer).__name__}")
                    continue
            slots.append((extract, len(channels)))
            channels.append(name)
        return _Bound(func, (handle, *args), slots) if slots else None

    def _links(self, handle: Any) -> list[int]:
        nvml = self._nvml
        links: list[int] = []
        if not hasattr(nvml, "nvmlDeviceGetNvLinkState"):
            return links
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except nvml.NVMLError:
                break  # no NVLink, or past the last link
            if state == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
                links.append(link)
        return links

    def _bind_fields(self, handle: Any, labels: dict[str, str], channels: list[str],
                     unsupported: list[str]) -> None:
        nvml = self._nvml
        if not hasattr(nvml, "nvmlDeviceGetFieldValues"):
            return
        links = self._links(handle)
        wanted: list[tuple[str, tuple[int, int]]] = []
        for metric, constant, per_link in FIELDS:
            field_id = getattr(nvml, constant, None)
            if field_id is None:
                continue
            if per_link:
                wanted += [(format_channel(metric, {**labels, "link": str(link)}),
                            (field_id, link)) for link in links]
            else:
                wanted.append((format_channel(metric, labels), (field_id, 0)))
        if not wanted:
            return
        try:
            answers = nvml.nvmlDeviceGetFieldValues(handle, [ids for _, ids in wanted])
        except nvml.NVMLError as exc:
            unsupported += [f"{name}: {exc}" for name, _ in wanted]
            return
        success = getattr(nvml, "NVML_SUCCESS", 0)
        kept: list[tuple[int, int]] = []
        slots: list[int] = []
        for (name, ids), answer in zip(wanted, answers, strict=False):
            if answer.nvmlReturn != success:
                unsupported.append(f"{name}: {nvml.NVMLError(answer.nvmlReturn)}")
                continue
            kept.append(ids)
            slots.append(len(channels))
            channels.append(name)
        if kept:
            self._fields.append((handle, kept, slots))

    # -- sampling --------------------------------------------------------------------------
    def read(self, out: np.ndarray) -> None:
        error = self._nvml.NVMLError
        for bound in self._calls:
            try:
                answer = bound.func(*bound.args)
            except error:
                for _, slot in bound.slots:
                    out[slot] = math.nan
                continue
            for extract, slot in bound.slots:
                try:
                    out[slot] = extract(answer)
                except (TypeError, ValueError, AttributeError, IndexError):
                    out[slot] = math.nan  # an answer of an unexpected shape
        success = getattr(self._nvml, "NVML_SUCCESS", 0)
        for handle, ids, slots in self._fields:
            try:
                answers = self._nvml.nvmlDeviceGetFieldValues(handle, ids)
            except error:
                out[slots] = math.nan
                continue
            out[slots] = [getattr(a.value, _VALUE_MEMBER.get(a.valueType, "ullVal"))
                          if a.nvmlReturn == success else math.nan for a in answers]

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._initialised = False
        self._calls, self._fields = [], []
