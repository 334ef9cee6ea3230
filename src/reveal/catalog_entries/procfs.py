"""Metrics of the /proc probes: cpu, interrupts, memory, storage, network, pressure.

Units say what the stored value is (counters raw, as the kernel gives them; kB already
converted to bytes where noted). Glob entries cover families; exact entries override them.
"""

from reveal.catalog import MetricInfo

TICKS = "USER_HZ ticks (1/100 s)"


def _family(prefix: str, subsystem: str, kind: str, unit: str,
            rows: tuple[tuple[str, int, str], ...]) -> list[MetricInfo]:
    return [MetricInfo(f"{prefix}{name}", subsystem, kind, unit, priority, description)
            for name, priority, description in rows]


_CPU_TIME = (
    ("user", 90, "CPU time in user mode"),
    ("nice", 50, "CPU time in user mode at low priority (nice)"),
    ("system", 85, "CPU time in kernel mode"),
    ("idle", 80, "idle CPU time"),
    ("iowait", 80, "CPU time idle while waiting for I/O"),
    ("irq", 60, "CPU time servicing hardware interrupts"),
    ("softirq", 65, "CPU time servicing softirqs"),
    ("steal", 75, "CPU time stolen by the hypervisor"),
    ("guest", 40, "CPU time running guest VMs"),
    ("guest_nice", 30, "CPU time running low-priority guest VMs"),
)

CPU = [
    *_family("cpu.", "cpu", "counter", TICKS, _CPU_TIME),
    MetricInfo("cpu.intr", "cpu", "counter", "interrupts", 55, "interrupts serviced"),
    MetricInfo("cpu.ctxt", "cpu", "counter", "switches", 75, "context switches"),
    MetricInfo("cpu.processes", "cpu", "counter", "forks", 45, "processes created (forks)"),
    MetricInfo("cpu.procs_running", "cpu", "gauge", "tasks", 70, "runnable tasks"),
    MetricInfo("cpu.procs_blocked", "cpu", "gauge", "tasks", 70, "tasks blocked on I/O"),
    MetricInfo("loadavg.load1", "cpu", "smoothed", "tasks", 60, "1-minute load average"),
    MetricInfo("loadavg.load5", "cpu", "smoothed", "tasks", 40, "5-minute load average"),
    MetricInfo("loadavg.load15", "cpu", "smoothed", "tasks", 30, "15-minute load average"),
    MetricInfo("loadavg.runnable", "cpu", "gauge", "tasks", 65, "runnable scheduling entities"),
    MetricInfo("loadavg.tasks", "cpu", "gauge", "tasks", 35, "scheduling entities in existence"),
    MetricInfo("softirq.count", "cpu", "counter", "softirqs", 55, "softirqs handled"),
    # {cpu,irq}: one IRQ on one CPU; {irq}: summed over CPUs; {cpu}: summed over IRQs
    MetricInfo("irq.count", "cpu", "counter", "interrupts", 50,
               "interrupts handled (of one IRQ, one CPU, or both)"),
]

_MEM_ROWS = (
    ("MemFree", 70, "free memory"), ("MemAvailable", 85, "available memory"),
    ("Buffers", 40, "block-device buffer memory"), ("Cached", 60, "page-cache memory"),
    ("SwapCached", 40, "swap-cache memory"), ("Active", 45, "recently used memory"),
    ("Inactive", 45, "less recently used memory"),
    ("Active_anon", 50, "recently used anonymous memory"),
    ("Inactive_anon", 45, "less recently used anonymous memory"),
    ("Active_file", 45, "recently used file-backed memory"),
    ("Inactive_file", 45, "less recently used file-backed memory"),
    ("Unevictable", 35, "unevictable memory"), ("Mlocked", 35, "mlocked memory"),
    ("SwapFree", 60, "free swap"), ("Dirty", 70, "dirty page-cache memory"),
    ("Writeback", 65, "memory under writeback"), ("AnonPages", 75, "anonymous memory"),
    ("Mapped", 50, "memory-mapped file memory"), ("Shmem", 50, "shared memory"),
    ("KReclaimable", 35, "reclaimable kernel memory"), ("Slab", 50, "kernel slab memory"),
    ("SReclaimable", 35, "reclaimable slab memory"),
    ("SUnreclaim", 45, "unreclaimable slab memory"),
    ("KernelStack", 35, "kernel stack memory"), ("PageTables", 45, "page-table memory"),
    ("Committed_AS", 60, "committed virtual memory"), ("VmallocUsed", 25, "vmalloc memory"),
    ("Percpu", 20, "per-CPU allocator memory"),
    ("AnonHugePages", 40, "transparent huge pages in anonymous memory"),
    ("ShmemHugePages", 25, "huge pages in shared memory"),
    ("FileHugePages", 25, "huge pages in the page cache"),
    ("Zswap", 30, "zswap pool memory"), ("Zswapped", 30, "memory stored in zswap"),
)
_MEM_STATIC = ("MemTotal", "SwapTotal", "CommitLimit", "VmallocTotal", "VmallocChunk",
               "Hugetlb", "Hugepagesize", "DirectMap4k", "DirectMap2M", "DirectMap1G",
               "CmaTotal")

MEMORY = _family("mem.", "memory", "gauge", "bytes (kernel kB × 1024)", _MEM_ROWS) + [
    MetricInfo(f"mem.{name}", "memory", "static", "bytes (kernel kB × 1024)", 10,
               f"{name} (size)") for name in _MEM_STATIC
] + [
    MetricInfo("mem.*", "memory", "gauge", "bytes (kernel kB × 1024)", 20, ""),
    MetricInfo("mem.HardwareCorrupted", "memory", "event", "bytes", 60,
               "memory poisoned by hardware errors"),
    MetricInfo("mem.HugePages_Total", "memory", "static", "pages", 10, "huge pages in pool"),
    MetricInfo("mem.HugePages_Free", "memory", "gauge", "pages", 40, "free huge pages"),
    MetricInfo("mem.HugePages_Rsvd", "memory", "gauge", "pages", 30, "reserved huge pages"),
    MetricInfo("mem.HugePages_Surp", "memory", "gauge", "pages", 25, "surplus huge pages"),
    MetricInfo("vmstat.*", "memory", "counter", "events", 20, ""),
    MetricInfo("vmstat.nr_*", "memory", "gauge", "pages", 25, ""),
    # node stats named nr_* that only ever grow (cumulative since boot, not levels)
    MetricInfo("vmstat.nr_vmscan_write", "memory", "counter", "pages", 45,
               "pages written out by reclaim"),
    MetricInfo("vmstat.nr_vmscan_immediate_reclaim", "memory", "counter", "pages", 40,
               "pages reclaim found under writeback (rotated for immediate reclaim)"),
    MetricInfo("vmstat.nr_dirtied", "memory", "counter", "pages", 55, "pages dirtied"),
    MetricInfo("vmstat.nr_written", "memory", "counter", "pages", 55,
               "pages written back"),
    MetricInfo("vmstat.nr_throttled_written", "memory", "counter", "pages", 35,
               "pages written while reclaim was throttled"),
    # pins are taken for direct I/O (and RDMA): evidence of block I/O, not memory state
    MetricInfo("vmstat.nr_foll_pin_acquired", "storage", "counter", "pages", 30,
               "pages pinned for direct I/O (FOLL_PIN; also RDMA)"),
    MetricInfo("vmstat.nr_foll_pin_released", "storage", "counter", "pages", 30,
               "pages unpinned after direct I/O"),
    MetricInfo("vmstat.nr_dirty_threshold", "memory", "static", "pages", 5,
               "dirty-page throttling threshold"),
    MetricInfo("vmstat.nr_dirty_background_threshold", "memory", "static", "pages", 5,
               "background writeback threshold"),
    MetricInfo("vmstat.workingset_nodes", "memory", "gauge", "nodes", 20,
               "radix-tree nodes tracking evicted pages"),
    MetricInfo("vmstat.pgfault", "memory", "counter", "faults", 70, "page faults"),
    MetricInfo("vmstat.pgmajfault", "memory", "event", "faults", 80,
               "major page faults (served from disk)"),
    # block I/O of every device in KiB (page cache and direct I/O alike): a storage signal
    MetricInfo("vmstat.pgpgin", "storage", "counter", "KiB", 60, "data read from block devices"),
    MetricInfo("vmstat.pgpgout", "storage", "counter", "KiB", 60,
               "data written to block devices"),
    MetricInfo("vmstat.pswpin", "memory", "counter", "pages", 75, "pages swapped in"),
    MetricInfo("vmstat.pswpout", "memory", "counter", "pages", 75, "pages swapped out"),
    MetricInfo("vmstat.oom_kill", "memory", "event", "kills", 90, "out-of-memory kills"),
    MetricInfo("vmstat.allocstall_*", "memory", "event", "stalls", 75,
               "direct-reclaim allocation stalls"),
    MetricInfo("vmstat.compact_stall", "memory", "event", "stalls", 60, "compaction stalls"),
    MetricInfo("vmstat.compact_fail", "memory", "event", "failures", 55,
               "failed memory compactions"),
    MetricInfo("vmstat.thp_fault_fallback", "memory", "event", "faults", 50,
               "huge-page faults that fell back to small pages"),
    MetricInfo("vmstat.pgscan_direct", "memory", "counter", "pages", 65,
               "pages scanned by direct reclaim"),
    MetricInfo("vmstat.pgscan_kswapd", "memory", "counter", "pages", 60,
               "pages scanned by kswapd"),
    MetricInfo("vmstat.pgsteal_direct", "memory", "counter", "pages", 60,
               "pages reclaimed by direct reclaim"),
    MetricInfo("vmstat.pgsteal_kswapd", "memory", "counter", "pages", 55,
               "pages reclaimed by kswapd"),
    MetricInfo("vmstat.workingset_refault_*", "memory", "counter", "pages", 55,
               "refaults of recently evicted pages (thrashing)"),
    MetricInfo("vmstat.numa_miss", "memory", "counter", "pages", 50,
               "allocations off the preferred NUMA node"),
    MetricInfo("numa.*", "memory", "gauge", "bytes (kernel kB × 1024)", 35, ""),
    MetricInfo("numa.MemTotal", "memory", "static", "bytes", 10, "NUMA node memory size"),
    MetricInfo("numa.MemFree", "memory", "gauge", "bytes", 60, "free memory on a NUMA node"),
    MetricInfo("numa.MemUsed", "memory", "gauge", "bytes", 60, "used memory on a NUMA node"),
    MetricInfo("numa.HugePages_*", "memory", "gauge", "pages", 25, ""),
    MetricInfo("numastat.*", "memory", "counter", "pages", 35, ""),
    MetricInfo("numastat.numa_miss", "memory", "counter", "pages", 55,
               "allocations placed on a NUMA node other than the preferred one"),
    MetricInfo("numastat.other_node", "memory", "counter", "pages", 55,
               "allocations for a process on another NUMA node"),
    MetricInfo("buddy.free_blocks", "memory", "state", "blocks of 2^order pages", 35,
               "free memory blocks of one size order (fragmentation)"),
    MetricInfo("hugepages.nr", "memory", "static", "pages", 10, "huge pages in pool"),
    MetricInfo("hugepages.free", "memory", "gauge", "pages", 40, "free huge pages"),
    MetricInfo("hugepages.resv", "memory", "gauge", "pages", 30, "reserved huge pages"),
    MetricInfo("hugepages.surplus", "memory", "gauge", "pages", 25, "surplus huge pages"),
]

_DISK = (
    ("reads_completed", "counter", "reads", 80, "disk reads completed"),
    ("reads_merged", "counter", "reads", 40, "disk reads merged"),
    ("sectors_read", "counter", "512-byte sectors", 85, "disk read throughput"),
    ("time_reading_ms", "counter", "ms", 65, "time spent on disk reads"),
    ("writes_completed", "counter", "writes", 80, "disk writes completed"),
    ("writes_merged", "counter", "writes", 40, "disk writes merged"),
    ("sectors_written", "counter", "512-byte sectors", 85, "disk write throughput"),
    ("time_writing_ms", "counter", "ms", 65, "time spent on disk writes"),
    ("ios_in_progress", "gauge", "I/Os", 75, "disk I/Os in flight"),
    ("time_io_ms", "counter", "ms", 90, "disk busy time (utilisation)"),
    ("weighted_time_io_ms", "counter", "ms", 80, "weighted disk I/O time (queue depth)"),
    ("discards_completed", "counter", "discards", 30, "disk discards completed"),
    ("discards_merged", "counter", "discards", 15, "disk discards merged"),
    ("sectors_discarded", "counter", "512-byte sectors", 30, "disk sectors discarded"),
    ("time_discarding_ms", "counter", "ms", 20, "time spent on disk discards"),
    ("flushes_completed", "counter", "flushes", 40, "disk cache flushes"),
    ("time_flushing_ms", "counter", "ms", 35, "time spent on disk flushes"),
)

STORAGE = [MetricInfo(f"disk.{name}", "storage", kind, unit, priority, description)
           for name, kind, unit, priority, description in _DISK]

_NET_DEV = (
    ("rx_bytes", "counter", "bytes", 90, "network bytes received"),
    ("rx_packets", "counter", "packets", 85, "network packets received"),
    ("rx_errs", "event", "packets", 70, "network receive errors"),
    ("rx_drop", "event", "packets", 75, "received network packets dropped"),
    ("rx_fifo", "event", "packets", 50, "network receive FIFO overruns"),
    ("rx_frame", "event", "packets", 45, "network receive framing errors"),
    ("rx_compressed", "counter", "packets", 10, "compressed packets received"),
    ("rx_multicast", "counter", "packets", 30, "multicast packets received"),
    ("tx_bytes", "counter", "bytes", 90, "network bytes sent"),
    ("tx_packets", "counter", "packets", 85, "network packets sent"),
    ("tx_errs", "event", "packets", 70, "network transmit errors"),
    ("tx_drop", "event", "packets", 75, "sent network packets dropped"),
    ("tx_fifo", "event", "packets", 50, "network transmit FIFO overruns"),
    ("tx_colls", "event", "collisions", 40, "network collisions"),
    ("tx_carrier", "event", "errors", 45, "network carrier losses"),
    ("tx_compressed", "counter", "packets", 10, "compressed packets sent"),
)

_SNMP_EVENTS = (
    ("snmp.Tcp.RetransSegs", 85, "TCP segments retransmitted"),
    ("snmp.Tcp.InErrs", 70, "TCP segments received in error"),
    ("snmp.Tcp.OutRsts", 55, "TCP resets sent"),
    ("snmp.Tcp.AttemptFails", 60, "failed TCP connection attempts"),
    ("snmp.Tcp.EstabResets", 60, "established TCP connections reset"),
    ("snmp.Ip.InDiscards", 60, "IP packets discarded on input"),
    ("snmp.Ip.OutDiscards", 60, "IP packets discarded on output"),
    ("snmp.Udp.RcvbufErrors", 70, "UDP receive-buffer overflows"),
    ("snmp.Udp.SndbufErrors", 65, "UDP send-buffer errors"),
    ("snmp.Udp.NoPorts", 40, "UDP datagrams to closed ports"),
    ("netstat.TcpExt.TCPTimeouts", 80, "TCP retransmission timeouts"),
    ("netstat.TcpExt.ListenOverflows", 75, "TCP listen-queue overflows"),
    ("netstat.TcpExt.ListenDrops", 75, "TCP connection requests dropped at listen"),
    ("netstat.TcpExt.TCPSynRetrans", 70, "TCP SYN retransmissions"),
    ("netstat.TcpExt.TCPLostRetransmit", 65, "TCP retransmissions lost"),
    ("netstat.TcpExt.TCPFastRetrans", 65, "TCP fast retransmissions"),
    ("netstat.TcpExt.TCPBacklogDrop", 60, "TCP packets dropped from a full socket backlog"),
    ("netstat.TcpExt.TCPRcvQDrop", 60, "TCP packets dropped from a full receive queue"),
    ("netstat.TcpExt.TCPMemoryPressures", 60, "TCP memory-pressure episodes"),
    ("netstat.TcpExt.PruneCalled", 50, "TCP receive-queue prunes"),
)

NETWORK = [MetricInfo(f"net.{name}", "network", kind, unit, priority, description)
           for name, kind, unit, priority, description in _NET_DEV] + [
    MetricInfo("net.speed_mbps", "network", "static", "Mbit/s", 0, "network link speed"),
    MetricInfo("snmp.*", "network", "counter", "count", 30, ""),
    MetricInfo("snmp.*Errors", "network", "event", "count", 55, ""),
    MetricInfo("snmp.*Errs", "network", "event", "count", 55, ""),
    MetricInfo("snmp.*Discards", "network", "event", "count", 50, ""),
    MetricInfo("snmp.*Fails", "network", "event", "count", 45, ""),
    MetricInfo("snmp.Ip.Forwarding", "network", "static", "", 0, "IP forwarding setting"),
    MetricInfo("snmp.Ip.DefaultTTL", "network", "static", "hops", 0, "default IP TTL"),
    MetricInfo("snmp.Tcp.RtoAlgorithm", "network", "static", "", 0, "TCP RTO algorithm"),
    MetricInfo("snmp.Tcp.RtoMin", "network", "static", "ms", 0, "minimum TCP RTO"),
    MetricInfo("snmp.Tcp.RtoMax", "network", "static", "ms", 0, "maximum TCP RTO"),
    MetricInfo("snmp.Tcp.MaxConn", "network", "static", "connections", 0,
               "TCP connection limit (-1: none)"),
    MetricInfo("snmp.Tcp.CurrEstab", "network", "gauge", "connections", 60,
               "established TCP connections"),
    MetricInfo("snmp.Tcp.InSegs", "network", "counter", "segments", 80,
               "TCP segments received"),
    MetricInfo("snmp.Tcp.OutSegs", "network", "counter", "segments", 80, "TCP segments sent"),
    MetricInfo("snmp.Tcp.ActiveOpens", "network", "counter", "connections", 50,
               "TCP connections opened"),
    MetricInfo("snmp.Tcp.PassiveOpens", "network", "counter", "connections", 50,
               "TCP connections accepted"),
    MetricInfo("snmp.Udp.InDatagrams", "network", "counter", "datagrams", 60,
               "UDP datagrams received"),
    MetricInfo("snmp.Udp.OutDatagrams", "network", "counter", "datagrams", 60,
               "UDP datagrams sent"),
    MetricInfo("netstat.*", "network", "counter", "count", 25, ""),
    MetricInfo("netstat.*Drop*", "network", "event", "packets", 50, ""),
    MetricInfo("netstat.TcpExt.TCPAbortOn*", "network", "event", "connections", 45, ""),
    MetricInfo("netstat.MPTcpExt.MPCurrEstab", "network", "gauge", "connections", 30,
               "established MPTCP connections"),
    MetricInfo("netstat.IpExt.InOctets", "network", "counter", "bytes", 70, "IP bytes received"),
    MetricInfo("netstat.IpExt.OutOctets", "network", "counter", "bytes", 70, "IP bytes sent"),
] + [MetricInfo(name, "network", "event", "count", priority, description)
     for name, priority, description in _SNMP_EVENTS] + [
    MetricInfo("snmp6.*", "network", "counter", "count", 25, ""),
    MetricInfo("snmp6.*Errors", "network", "event", "count", 45, ""),
    MetricInfo("snmp6.*Discards", "network", "event", "count", 45, ""),
    MetricInfo("softnet.processed", "network", "counter", "packets", 60,
               "packets processed by the network softirq"),
    MetricInfo("softnet.dropped", "network", "event", "packets", 75,
               "packets dropped from a full CPU backlog"),
    MetricInfo("softnet.time_squeeze", "network", "event", "events", 70,
               "network softirq runs cut short with work left (time squeeze)"),
    MetricInfo("softnet.received_rps", "network", "counter", "IPIs", 30,
               "packets steered to the CPU by RPS"),
    MetricInfo("softnet.flow_limit_count", "network", "event", "packets", 40,
               "packets dropped by the flow limit"),
    MetricInfo("softnet.backlog_len", "network", "gauge", "packets", 50,
               "packets waiting in the CPU backlog"),
    MetricInfo("sockstat.*", "network", "gauge", "sockets", 40, ""),
    MetricInfo("sockstat.*.mem", "network", "gauge", "pages", 45, ""),
    MetricInfo("sockstat.FRAG.memory", "network", "gauge", "bytes", 20,
               "IP fragment reassembly memory"),
    MetricInfo("sockstat.sockets.used", "network", "gauge", "sockets", 45, "sockets in use"),
    MetricInfo("sockstat.TCP.inuse", "network", "gauge", "sockets", 50, "TCP sockets in use"),
    MetricInfo("sockstat.TCP.tw", "network", "gauge", "sockets", 45,
               "TCP sockets in TIME_WAIT"),
    MetricInfo("sockstat.TCP.orphan", "network", "gauge", "sockets", 40,
               "orphaned TCP sockets"),
    MetricInfo("ib.*", "network", "counter", "count", 40, ""),
    MetricInfo("ib.*error*", "network", "event", "count", 65, ""),
    MetricInfo("ib.*discards*", "network", "event", "packets", 65, ""),
    MetricInfo("ib.link_downed", "network", "event", "count", 75, "InfiniBand link downs"),
    MetricInfo("ib.link_error_recovery", "network", "event", "count", 70,
               "InfiniBand link error recoveries"),
    MetricInfo("ib.symbol_error", "network", "event", "count", 60, "InfiniBand symbol errors"),
    MetricInfo("ib.port_xmit_data", "network", "counter", "4-byte words", 85,
               "InfiniBand data sent"),
    MetricInfo("ib.port_rcv_data", "network", "counter", "4-byte words", 85,
               "InfiniBand data received"),
    MetricInfo("ib.port_xmit_packets", "network", "counter", "packets", 75,
               "InfiniBand packets sent"),
    MetricInfo("ib.port_rcv_packets", "network", "counter", "packets", 75,
               "InfiniBand packets received"),
    MetricInfo("ib.port_xmit_wait", "network", "counter", "ticks", 70,
               "InfiniBand transmit wait (congestion)"),
]

_PSI_SUBSYSTEM = {"cpu": "cpu", "io": "storage", "memory": "memory", "irq": "cpu"}
_PSI_WHAT = {"cpu": "CPU", "io": "I/O", "memory": "memory", "irq": "IRQ"}
PRESSURE = [
    entry
    for res, subsystem in _PSI_SUBSYSTEM.items()
    for kind, who in (("some", "some tasks"), ("full", "all non-idle tasks"))
    for entry in (
        MetricInfo(f"psi.{res}.{kind}.total", subsystem, "counter", "µs",
                   90 if kind == "some" else 80,
                   f"time {who} stalled on {_PSI_WHAT[res]}"),
        MetricInfo(f"psi.{res}.{kind}.avg10", subsystem, "smoothed", "percent",
                   70 if kind == "some" else 60,
                   f"share of time {who} stalled on {_PSI_WHAT[res]} (10 s average)"),
        MetricInfo(f"psi.{res}.{kind}.avg60", subsystem, "smoothed", "percent", 35,
                   f"share of time {who} stalled on {_PSI_WHAT[res]} (60 s average)"),
        MetricInfo(f"psi.{res}.{kind}.avg300", subsystem, "smoothed", "percent", 25,
                   f"share of time {who} stalled on {_PSI_WHAT[res]} (300 s average)"),
    )
]

ENTRIES = CPU + MEMORY + STORAGE + NETWORK + PRESSURE
