"""What the GPU probe asks NVML, as data: one :class:`Reading` per NVML call.

Each reading has a *rate*: ``fast`` ones are polled every interval, ``slow`` ones every
``slow_interval_s`` (PCIe throughput, which NVML measures over 20 ms per call and makes the
caller wait for; values that only change with configuration). Channel units are NVML's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Extract = Callable[[Any], float]

CLOCK_EVENT_BITS = (
    ("gpu_idle", 0x1), ("app_clocks", 0x2), ("sw_power_cap", 0x4), ("hw_slowdown", 0x8),
    ("sync_boost", 0x10), ("sw_thermal", 0x20), ("hw_thermal", 0x40),
    ("hw_power_brake", 0x80), ("display_clocks", 0x100),
)

# NVML field values read in one batch per poll: (metric, field constant name, per link?)
FIELDS = (
    ("gpu.mem_temp_c", "NVML_FI_DEV_MEMORY_TEMP", False),
    ("gpu.nvlink_crc_flit_errors", "NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_crc_data_errors", "NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_replay_errors", "NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_recovery_errors", "NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", False),
    ("gpu.nvlink_tx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", True),
    ("gpu.nvlink_rx_kib", "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", True),
)

# GPU Performance Monitoring (nvmlGpmMetricsGet, Hopper and later): metric, GPM metric id.
# These measure the SMs themselves, which nvmlDeviceGetUtilizationRates does not.
GPM_METRICS = (
    ("gpu.sm_active_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("gpu.sm_occupancy_pct", "NVML_GPM_METRIC_SM_OCCUPANCY"),
    ("gpu.tensor_active_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("gpu.dram_bw_util_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)

# nvmlValueType_t → the union member holding the value
VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal",
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
    """One NVML call per GPU per poll and the channels its answer fills.

    ``funcs``: the function name, then older names to try when the module lacks it.
    ``args``: arguments after the device handle; strings name ``NVML_*`` constants.
    ``outputs``: ``(metric, extractor)`` pairs applied to the call's answer.
    ``rate``: ``fast`` (every interval) or ``slow`` (every ``slow_interval_s``).
    ``option``: probe option that turns the reading off when false.
    """

    funcs: tuple[str, ...]
    args: tuple[str | int, ...]
    outputs: tuple[tuple[str, Extract], ...]
    rate: str = "fast"
    option: str = ""


def _one(func: str, metric: str, *args: str | int, rate: str = "fast",
         option: str = "") -> Reading:
    return Reading((func,), args, ((metric, _same),), rate, option)


READINGS: tuple[Reading, ...] = (
    Reading(("nvmlDeviceGetUtilizationRates",), (),
            (("gpu.kernel_active_pct", _attr("gpu")), ("gpu.mem_util", _attr("memory")))),
    Reading(("nvmlDeviceGetMemoryInfo",), (),
            (("gpu.mem_used_bytes", _attr("used")), ("gpu.mem_free_bytes", _attr("free")),
             ("gpu.mem_total_bytes", _attr("total")))),
    _one("nvmlDeviceGetPowerUsage", "gpu.power_mw"),
    _one("nvmlDeviceGetEnforcedPowerLimit", "gpu.power_limit_mw", rate="slow"),
    _one("nvmlDeviceGetTotalEnergyConsumption", "gpu.energy_mj"),
    _one("nvmlDeviceGetTemperature", "gpu.temp_c", "NVML_TEMPERATURE_GPU"),
    _one("nvmlDeviceGetFanSpeed", "gpu.fan_pct"),
    _one("nvmlDeviceGetPerformanceState", "gpu.pstate"),
    _one("nvmlDeviceGetClockInfo", "gpu.sm_clock_mhz", "NVML_CLOCK_SM"),
    _one("nvmlDeviceGetClockInfo", "gpu.mem_clock_mhz", "NVML_CLOCK_MEM"),
    _one("nvmlDeviceGetClockInfo", "gpu.graphics_clock_mhz", "NVML_CLOCK_GRAPHICS"),
    _one("nvmlDeviceGetCurrPcieLinkGeneration", "gpu.pcie_gen"),
    _one("nvmlDeviceGetCurrPcieLinkWidth", "gpu.pcie_width"),
    _one("nvmlDeviceGetMaxPcieLinkGeneration", "gpu.pcie_gen_max", rate="slow"),
    _one("nvmlDeviceGetMaxPcieLinkWidth", "gpu.pcie_width_max", rate="slow"),
    _one("nvmlDeviceGetPcieThroughput", "gpu.pcie_tx_kbps", "NVML_PCIE_UTIL_TX_BYTES",
         rate="slow", option="pcie_throughput"),
    _one("nvmlDeviceGetPcieThroughput", "gpu.pcie_rx_kbps", "NVML_PCIE_UTIL_RX_BYTES",
         rate="slow", option="pcie_throughput"),
    _one("nvmlDeviceGetPcieReplayCounter", "gpu.pcie_replay"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_corrected_volatile",
         "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_uncorrected_volatile",
         "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_corrected_aggregate",
         "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC", rate="slow"),
    _one("nvmlDeviceGetTotalEccErrors", "gpu.ecc_uncorrected_aggregate",
         "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC", rate="slow"),
    Reading(("nvmlDeviceGetRetiredPages",),
            ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",),
            (("gpu.retired_pages_sbe", _count),), "slow"),
    Reading(("nvmlDeviceGetRetiredPages",), ("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR",),
            (("gpu.retired_pages_dbe", _count),), "slow"),
    Reading(("nvmlDeviceGetRemappedRows",), (),
            (("gpu.remapped_rows_corr", _item(0)), ("gpu.remapped_rows_unc", _item(1)),
             ("gpu.remap_pending", _item(2)), ("gpu.remap_failed", _item(3))), "slow"),
    Reading(("nvmlDeviceGetCurrentClocksEventReasons",
             "nvmlDeviceGetCurrentClocksThrottleReasons"), (),
            tuple((f"gpu.clocks_event.{name}", _bit(mask)) for name, mask in CLOCK_EVENT_BITS)),
)

# Per MIG device (a GPU instance / compute instance pair), label ``mig=GI/CI``.
MIG_READINGS: tuple[Reading, ...] = (
    Reading(("nvmlDeviceGetMemoryInfo",), (),
            (("gpu.mig.mem_used_bytes", _attr("used")),
             ("gpu.mig.mem_free_bytes", _attr("free")),
             ("gpu.mig.mem_total_bytes", _attr("total")))),
)

XID_METRICS = ("gpu.xid_errors", "gpu.xid_last")
