"""Metrics computed at analysis time by :mod:`reveal.analysis.derive`."""

from reveal.catalog import MetricInfo

ENTRIES = [
    MetricInfo("derived.ipc", "cpu", "gauge", "instructions/cycle", 95,
               "instructions per cycle (IPC)"),
    MetricInfo("derived.cache_miss_ratio", "memory", "gauge", "ratio", 85, "cache-miss ratio"),
    MetricInfo("derived.branch_miss_ratio", "cpu", "gauge", "ratio", 70, "branch-miss ratio"),
    MetricInfo("derived.backend_stall_ratio", "cpu", "gauge", "ratio", 85,
               "backend stall ratio"),
    MetricInfo("derived.l3_stall_ratio", "memory", "gauge", "ratio", 90, "L3-miss stall ratio"),
    MetricInfo("derived.llc_miss_ratio", "memory", "gauge", "ratio", 80,
               "last-level-cache load-miss ratio"),
    MetricInfo("derived.cpu_busy_pct", "cpu", "gauge", "%", 100, "CPU busy percentage"),
    MetricInfo("derived.cgroup_throttled_pct", "cpu", "gauge", "%", 90,
               "share of container CPU-quota periods throttled"),
    MetricInfo("derived.mem_used_pct", "memory", "gauge", "%", 100, "memory used percentage"),
    MetricInfo("derived.disk_read_bytes_per_s", "storage", "gauge", "bytes/s", 95,
               "disk read throughput"),
    MetricInfo("derived.disk_write_bytes_per_s", "storage", "gauge", "bytes/s", 95,
               "disk write throughput"),
    MetricInfo("derived.disk_util_pct", "storage", "gauge", "%", 100, "disk utilisation"),
    MetricInfo("derived.net_bytes_per_s", "network", "gauge", "bytes/s", 95,
               "network throughput (received + sent)"),
    MetricInfo("derived.net_rx_util_pct", "network", "gauge", "% of link speed", 100,
               "network receive utilisation (received bits/s over the link speed)"),
    MetricInfo("derived.net_tx_util_pct", "network", "gauge", "% of link speed", 100,
               "network send utilisation (sent bits/s over the link speed)"),
]
