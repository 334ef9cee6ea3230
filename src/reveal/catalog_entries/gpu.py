"""Metrics of the NVML GPU probe (label ``gpu``; NVLink ones add ``link``, MIG ones ``mig``).

Units are NVML's: percent, bytes, milliwatts, millijoules, °C, MHz, KB/s (PCIe, sampled
by the driver over 20 ms, polled every ``slow_interval_s``), KiB (NVLink, cumulative).
Every value is the latest a poller thread read (at most one poll period old); NaN when
its GPU has not answered for ``stale_intervals`` poll periods.
"""

from reveal.catalog import MetricInfo

_REASONS = (
    ("gpu_idle", 40, "GPU clocks lowered while idle"),
    ("app_clocks", 30, "GPU clocks held by the application-clock setting"),
    ("sw_power_cap", 80, "GPU clocks held down by the software power cap"),
    ("hw_slowdown", 85, "GPU hardware slowdown (thermal or power brake)"),
    ("sync_boost", 40, "GPU clocks held for sync boost"),
    ("sw_thermal", 80, "GPU clocks held down by software thermal slowdown"),
    ("hw_thermal", 85, "GPU hardware thermal slowdown"),
    ("hw_power_brake", 85, "GPU hardware power-brake slowdown"),
    ("display_clocks", 10, "GPU clocks held by the display clock setting"),
)

_KERNEL_ACTIVE = ("GPU kernel-active time: percent of NVML's last sample period during which "
                  "one or more kernels ran (nvmlDeviceGetUtilizationRates .gpu; 100 with one "
                  "busy SM)")

ENTRIES = [
    MetricInfo("gpu.kernel_active_pct", "gpu", "gauge", "percent", 95, _KERNEL_ACTIVE),
    # the same NVML value under the name runs recorded before gpu.kernel_active_pct use
    MetricInfo("gpu.sm_util", "gpu", "gauge", "percent", 95,
               _KERNEL_ACTIVE + "; old name of gpu.kernel_active_pct"),
    MetricInfo("gpu.sm_active_pct", "gpu", "gauge", "percent", 95,
               "GPU SM activity: percent of SMs busy over the poll period (GPM SM_UTIL)"),
    MetricInfo("gpu.sm_occupancy_pct", "gpu", "gauge", "percent", 75,
               "GPU SM occupancy: resident warps as percent of the maximum (GPM)"),
    MetricInfo("gpu.tensor_active_pct", "gpu", "gauge", "percent", 85,
               "GPU tensor-core activity: percent of time SMs ran tensor operations (GPM)"),
    MetricInfo("gpu.dram_bw_util_pct", "gpu", "gauge", "percent", 85,
               "GPU memory bandwidth used, percent of the maximum (GPM)"),
    MetricInfo("gpu.mem_util", "gpu", "gauge", "percent", 85,
               "GPU memory-controller utilisation (percent of time reading or writing)"),
    MetricInfo("gpu.mem_used_bytes", "gpu", "gauge", "bytes", 80, "GPU memory in use"),
    MetricInfo("gpu.mem_free_bytes", "gpu", "gauge", "bytes", 50, "free GPU memory"),
    MetricInfo("gpu.mem_total_bytes", "gpu", "static", "bytes", 5, "GPU memory size"),
    MetricInfo("gpu.mig.mem_used_bytes", "gpu", "gauge", "bytes", 80,
               "MIG device memory in use"),
    MetricInfo("gpu.mig.mem_free_bytes", "gpu", "gauge", "bytes", 50, "free MIG device memory"),
    MetricInfo("gpu.mig.mem_total_bytes", "gpu", "static", "bytes", 5, "MIG device memory size"),
    MetricInfo("gpu.power_mw", "gpu", "gauge", "mW", 80, "GPU power draw"),
    MetricInfo("gpu.power_limit_mw", "gpu", "static", "mW", 10, "GPU enforced power limit"),
    MetricInfo("gpu.energy_mj", "gpu", "counter", "mJ", 70, "GPU energy consumed"),
    MetricInfo("gpu.temp_c", "gpu", "gauge", "°C", 70, "GPU temperature"),
    MetricInfo("gpu.mem_temp_c", "gpu", "gauge", "°C", 60, "GPU memory temperature (HBM)"),
    MetricInfo("gpu.fan_pct", "gpu", "gauge", "percent", 30, "GPU fan speed"),
    MetricInfo("gpu.pstate", "gpu", "gauge", "P-state", 50,
               "GPU performance state (0 fastest)"),
    MetricInfo("gpu.sm_clock_mhz", "gpu", "gauge", "MHz", 75, "GPU SM clock"),
    MetricInfo("gpu.mem_clock_mhz", "gpu", "gauge", "MHz", 60, "GPU memory clock"),
    MetricInfo("gpu.graphics_clock_mhz", "gpu", "gauge", "MHz", 50, "GPU graphics clock"),
    MetricInfo("gpu.pcie_gen", "gpu", "gauge", "generation", 55,
               "current GPU PCIe link generation"),
    MetricInfo("gpu.pcie_width", "gpu", "gauge", "lanes", 55, "current GPU PCIe link width"),
    MetricInfo("gpu.pcie_gen_max", "gpu", "static", "generation", 5,
               "maximum GPU PCIe link generation"),
    MetricInfo("gpu.pcie_width_max", "gpu", "static", "lanes", 5,
               "maximum GPU PCIe link width"),
    MetricInfo("gpu.pcie_tx_kbps", "gpu", "gauge", "KB/s", 80,
               "GPU PCIe transmit throughput (a 20 ms sample every slow poll)"),
    MetricInfo("gpu.pcie_rx_kbps", "gpu", "gauge", "KB/s", 80,
               "GPU PCIe receive throughput (a 20 ms sample every slow poll)"),
    MetricInfo("gpu.pcie_replay", "gpu", "event", "replays", 70, "GPU PCIe link replays"),
    MetricInfo("gpu.ecc_corrected_volatile", "gpu", "event", "errors", 75,
               "GPU corrected ECC errors"),
    MetricInfo("gpu.ecc_uncorrected_volatile", "gpu", "event", "errors", 90,
               "GPU uncorrected ECC errors"),
    MetricInfo("gpu.ecc_corrected_aggregate", "gpu", "event", "errors", 30,
               "GPU lifetime corrected ECC errors"),
    MetricInfo("gpu.ecc_uncorrected_aggregate", "gpu", "event", "errors", 40,
               "GPU lifetime uncorrected ECC errors"),
    MetricInfo("gpu.retired_pages_sbe", "gpu", "event", "pages", 40,
               "GPU pages retired for repeated single-bit ECC errors"),
    MetricInfo("gpu.retired_pages_dbe", "gpu", "event", "pages", 50,
               "GPU pages retired for double-bit ECC errors"),
    MetricInfo("gpu.remapped_rows_corr", "gpu", "event", "rows", 40,
               "GPU memory rows remapped for correctable errors"),
    MetricInfo("gpu.remapped_rows_unc", "gpu", "event", "rows", 60,
               "GPU memory rows remapped for uncorrectable errors"),
    MetricInfo("gpu.remap_pending", "gpu", "gauge", "flag", 60,
               "GPU row remapping pending (reset needed)"),
    MetricInfo("gpu.remap_failed", "gpu", "gauge", "flag", 70, "GPU row remapping failed"),
    MetricInfo("gpu.xid_errors", "gpu", "event", "errors", 95,
               "GPU XID critical errors (NVML events, since the collector started)"),
    MetricInfo("gpu.xid_last", "gpu", "gauge", "XID code", 60,
               "code of the GPU's last XID critical error (0 before the first)"),
    MetricInfo("gpu.nvlink_tx_kib", "gpu", "counter", "KiB", 80, "NVLink data sent"),
    MetricInfo("gpu.nvlink_rx_kib", "gpu", "counter", "KiB", 80, "NVLink data received"),
    MetricInfo("gpu.nvlink_crc_flit_errors", "gpu", "event", "errors", 65,
               "NVLink flow-control CRC errors"),
    MetricInfo("gpu.nvlink_crc_data_errors", "gpu", "event", "errors", 65,
               "NVLink data CRC errors"),
    MetricInfo("gpu.nvlink_replay_errors", "gpu", "event", "errors", 65, "NVLink replays"),
    MetricInfo("gpu.nvlink_recovery_errors", "gpu", "event", "errors", 70,
               "NVLink recoveries"),
] + [MetricInfo(f"gpu.clocks_event.{name}", "gpu", "gauge", "flag", priority, description)
     for name, priority, description in _REASONS]
