"""Metrics of the power probe: cpufreq, cpuidle, RAPL, thermal zones, hwmon sensors."""

from reveal.catalog import MetricInfo

ENTRIES = [
    MetricInfo("cpufreq.cur_mhz", "cpu", "gauge", "MHz", 60, "core frequency"),
    MetricInfo("cpuidle.time_us", "cpu", "counter", "µs", 45, "time in a CPU idle state"),
    MetricInfo("cpuidle.usage", "cpu", "counter", "entries", 35,
               "entries into a CPU idle state"),
    MetricInfo("rapl.energy_uj", "cpu", "counter", "µJ (wraps at max_energy_range_uj)", 65,
               "RAPL energy (package, core, DRAM)"),
    MetricInfo("thermal.temp_c", "cpu", "gauge", "°C", 50, "thermal zone temperature"),
    MetricInfo("hwmon.temp_c", "cpu", "gauge", "°C", 45, "hardware sensor temperature"),
    MetricInfo("hwmon.fan_rpm", "cpu", "gauge", "RPM", 35, "fan speed"),
    MetricInfo("hwmon.power_w", "cpu", "gauge", "W", 55, "hardware sensor power"),
]
