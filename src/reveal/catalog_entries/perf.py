"""perf_event_open counters (``perf.*{cpu=N}``), raw and cumulative per CPU since the probe
opened, plus each event group's time enabled and running.

Counts are stored as the kernel read them, unscaled. When the PMU multiplexes hardware
counters a group counts only part of the time; ``multiplex_group`` names the group whose
``perf.time_enabled_ns`` / ``perf.time_running_ns{cpu=N,group=NAME}`` channels scale each
interval's delta at analysis time (``reveal.analysis.derive``).
"""

from reveal.catalog import TIME_ENABLED_METRIC, TIME_RUNNING_METRIC, MetricInfo

ENTRIES = [
    MetricInfo("perf.cycles", "cpu", "counter", "cycles", 70, "CPU cycles",
               multiplex_group="cycles"),
    MetricInfo("perf.instructions", "cpu", "counter", "instructions", 75,
               "instructions retired", multiplex_group="cycles"),
    MetricInfo("perf.cache_references", "cpu", "counter", "references", 45,
               "cache references", multiplex_group="cache"),
    MetricInfo("perf.cache_misses", "cpu", "counter", "misses", 65, "cache misses",
               multiplex_group="cache"),
    MetricInfo("perf.branches", "cpu", "counter", "branches", 35, "branch instructions",
               multiplex_group="branches"),
    MetricInfo("perf.branch_misses", "cpu", "counter", "misses", 50, "branch mispredictions",
               multiplex_group="branches"),
    MetricInfo("perf.stalled_cycles_frontend", "cpu", "counter", "cycles", 55,
               "cycles stalled in the front end (instruction fetch/decode)",
               multiplex_group="stalls"),
    MetricInfo("perf.stalled_cycles_backend", "cpu", "counter", "cycles", 55,
               "cycles stalled in the back end (memory, execution units)",
               multiplex_group="stalls"),
    MetricInfo("perf.llc_loads", "memory", "counter", "loads", 50,
               "last-level cache loads", multiplex_group="llc"),
    MetricInfo("perf.llc_load_misses", "memory", "counter", "misses", 70,
               "last-level cache load misses (memory traffic)", multiplex_group="llc"),
    MetricInfo("perf.task_clock", "cpu", "counter", "ns", 5,
               "time the CPU's counters were enabled (system-wide task clock)"),
    MetricInfo("perf.context_switches", "cpu", "counter", "switches", 60,
               "context switches", multiplex_group="software"),
    MetricInfo("perf.cpu_migrations", "cpu", "counter", "migrations", 45,
               "task migrations between CPUs", multiplex_group="software"),
    MetricInfo("perf.page_faults", "memory", "counter", "faults", 45, "page faults",
               multiplex_group="software"),
    MetricInfo("perf.minor_faults", "memory", "counter", "faults", 40,
               "minor page faults (no I/O)", multiplex_group="software"),
    MetricInfo("perf.major_faults", "memory", "counter", "faults", 60,
               "major page faults (needing I/O)", multiplex_group="software"),
    MetricInfo(TIME_ENABLED_METRIC, "cpu", "counter", "ns", 3,
               "time a perf event group was enabled"),
    MetricInfo(TIME_RUNNING_METRIC, "cpu", "counter", "ns", 4,
               "time a perf event group was counting (below enabled when multiplexed)"),
]
