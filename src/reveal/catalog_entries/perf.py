"""perf_event_open counters (``perf.*{cpu=N}``), cumulative per CPU since the probe opened.

Hardware counts are scaled by time_enabled/time_running when the PMU multiplexes.
"""

from reveal.catalog import MetricInfo

ENTRIES = [
    MetricInfo("perf.cycles", "cpu", "counter", "cycles", 70, "CPU cycles"),
    MetricInfo("perf.instructions", "cpu", "counter", "instructions", 75,
               "instructions retired"),
    MetricInfo("perf.cache_references", "cpu", "counter", "references", 45,
               "cache references"),
    MetricInfo("perf.cache_misses", "cpu", "counter", "misses", 65, "cache misses"),
    MetricInfo("perf.branches", "cpu", "counter", "branches", 35, "branch instructions"),
    MetricInfo("perf.branch_misses", "cpu", "counter", "misses", 50, "branch mispredictions"),
    MetricInfo("perf.stalled_cycles_frontend", "cpu", "counter", "cycles", 55,
               "cycles stalled in the front end (instruction fetch/decode)"),
    MetricInfo("perf.stalled_cycles_backend", "cpu", "counter", "cycles", 55,
               "cycles stalled in the back end (memory, execution units)"),
    MetricInfo("perf.llc_loads", "memory", "counter", "loads", 50,
               "last-level cache loads"),
    MetricInfo("perf.llc_load_misses", "memory", "counter", "misses", 70,
               "last-level cache load misses (memory traffic)"),
    MetricInfo("perf.task_clock", "cpu", "counter", "ns", 5,
               "time the CPU's counters were enabled (system-wide task clock)"),
    MetricInfo("perf.context_switches", "cpu", "counter", "switches", 60,
               "context switches"),
    MetricInfo("perf.cpu_migrations", "cpu", "counter", "migrations", 45,
               "task migrations between CPUs"),
    MetricInfo("perf.page_faults", "memory", "counter", "faults", 45, "page faults"),
    MetricInfo("perf.minor_faults", "memory", "counter", "faults", 40,
               "minor page faults (no I/O)"),
    MetricInfo("perf.major_faults", "memory", "counter", "faults", 60,
               "major page faults (needing I/O)"),
]
