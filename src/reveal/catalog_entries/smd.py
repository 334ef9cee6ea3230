"""Server Machine Dataset (OmniAnomaly) columns, as named by the dataset's authors.

Values there are already min-max scaled gauges, one row per minute.
"""

from reveal.catalog import MetricInfo

_COLUMNS = (
    ("cpu_r", "cpu", 90, "CPU utilisation"),
    ("load_1", "cpu", 40, "1-minute load average"),
    ("load_5", "cpu", 35, "5-minute load average"),
    ("load_15", "cpu", 30, "15-minute load average"),
    ("mem_shmem", "memory", 40, "shared memory"),
    ("mem_u", "memory", 90, "memory used"),
    ("mem_u_e", "memory", 60, "memory used excluding buffers and cache"),
    ("total_mem", "memory", 10, "total memory"),
    ("disk_q", "storage", 70, "disk queue length"),
    ("disk_r", "storage", 80, "disk reads per second"),
    ("disk_rb", "storage", 85, "disk read throughput"),
    ("disk_svc", "storage", 60, "disk service time"),
    ("disk_u", "storage", 90, "disk utilisation"),
    ("disk_w", "storage", 80, "disk writes per second"),
    ("disk_wa", "storage", 60, "disk wait time"),
    ("disk_wb", "storage", 85, "disk write throughput"),
    ("si", "memory", 50, "swap-in rate"),
    ("so", "memory", 50, "swap-out rate"),
    ("eth1_fi", "network", 60, "eth1 inbound frames"),
    ("eth1_fo", "network", 60, "eth1 outbound frames"),
    ("eth1_pi", "network", 85, "eth1 inbound packets"),
    ("eth1_po", "network", 85, "eth1 outbound packets"),
    ("tcp_tw", "network", 40, "TCP connections in TIME_WAIT"),
    ("tcp_use", "network", 50, "TCP sockets in use"),
    ("active_opens", "network", 50, "TCP active opens"),
    ("curr_estab", "network", 60, "TCP established connections"),
    ("in_errs", "network", 70, "IP input errors"),
    ("in_segs", "network", 80, "TCP segments received"),
    ("listen_overflows", "network", 70, "TCP listen-queue overflows"),
    ("out_rsts", "network", 60, "TCP resets sent"),
    ("out_segs", "network", 80, "TCP segments sent"),
    ("passive_opens", "network", 50, "TCP passive opens"),
    ("retransegs", "network", 75, "TCP retransmitted segments"),
    ("tcp_timeouts", "network", 70, "TCP timeouts"),
    ("udp_in_dg", "network", 60, "UDP datagrams received"),
    ("udp_out_dg", "network", 60, "UDP datagrams sent"),
    ("udp_rcv_buf_errs", "network", 60, "UDP receive-buffer errors"),
    ("udp_snd_buf_errs", "network", 60, "UDP send-buffer errors"),
)

SMD_COLUMNS: tuple[str, ...] = tuple(name for name, *_ in _COLUMNS)

ENTRIES = [
    MetricInfo(f"smd.{name}", subsystem, "gauge", "scaled", priority, description)
    for name, subsystem, priority, description in _COLUMNS
] + [
    MetricInfo("asd.*", "unknown", "gauge", "scaled", 0, "anonymised application-server metric"),
]
