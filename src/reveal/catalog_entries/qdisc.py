"""Queueing disciplines (``qdisc`` probe, rtnetlink ``RTM_GETQDISC``)."""

from reveal.catalog import MetricInfo

ENTRIES = [
    MetricInfo("qdisc.bytes", "network", "counter", "bytes", 70,
               "bytes sent through a queueing discipline"),
    MetricInfo("qdisc.packets", "network", "counter", "packets", 65,
               "packets sent through a queueing discipline"),
    MetricInfo("qdisc.drops", "network", "event", "packets", 85,
               "packets dropped by a queueing discipline"),
    MetricInfo("qdisc.overlimits", "network", "event", "events", 80,
               "times a queueing discipline held back traffic over its rate or limit"),
    MetricInfo("qdisc.requeues", "network", "event", "packets", 50,
               "packets a queueing discipline had to queue again (driver busy)"),
    MetricInfo("qdisc.backlog_bytes", "network", "gauge", "bytes", 70,
               "bytes waiting in a queueing discipline"),
    MetricInfo("qdisc.backlog_packets", "network", "gauge", "packets", 65,
               "packets waiting in a queueing discipline"),
]
