"""The collector's own timing channels (``reveal collect --self-channels``)."""

from reveal.catalog import MetricInfo

ENTRIES = [
    MetricInfo("reveal.sample_latency_s", "software", "gauge", "s", 20,
               "collector time to read all probes"),
    MetricInfo("reveal.tick_lag_s", "software", "gauge", "s", 20,
               "collector tick lateness (scheduling delay)"),
    MetricInfo("reveal.missed_ticks", "software", "event", "ticks", 20,
               "collector ticks skipped"),
]
