"""Metrics of the ``ebpf`` probe (bpftrace) and the ``gpu_procs`` probe (NVML per process).

Kinds follow :mod:`reveal.catalog`: call, byte and histogram-bucket counts are cumulative
counters (rated at analysis time); error codes and TCP retransmissions are events; means,
maxima and in-flight calls describe the last kernel print interval (gauges, NaN when no
call completed in it). Latencies are nanoseconds. Labels: per process ``pid``, ``comm``,
``cgroup``; per call ``fn``; ``kind`` (copy direction), ``dtype`` (NCCL datatype), ``code``
(non-zero return code), ``le`` (histogram bucket: calls with latency in [le/2, le) ns),
``dev`` (block device), ``saddr``/``sport``/``daddr``/``dport`` (TCP flow), ``source``
(how Python entries are seen).
"""

from reveal.catalog import MetricInfo


def _calls(family: str, subsystem: str, what: str, priority: int) -> list[MetricInfo]:
    return [
        MetricInfo(f"ebpf.{family}.calls", subsystem, "counter", "calls", priority,
                   f"{what} calls"),
        MetricInfo(f"ebpf.{family}.latency_ns_total", subsystem, "counter", "ns",
                   priority - 20, f"time spent in {what} calls"),
        MetricInfo(f"ebpf.{family}.latency_ns_mean", subsystem, "gauge", "ns", priority + 5,
                   f"mean {what} call latency"),
        MetricInfo(f"ebpf.{family}.latency_ns_max", subsystem, "gauge", "ns", priority,
                   f"longest {what} call"),
        MetricInfo(f"ebpf.{family}.in_flight", subsystem, "gauge", "calls", priority,
                   f"{what} calls entered and not yet returned"),
        MetricInfo(f"ebpf.{family}.lat_hist", subsystem, "counter", "calls", priority - 30,
                   f"{what} calls per log2 latency bucket"),
        MetricInfo(f"ebpf.{family}.errors", subsystem, "event", "calls", priority + 10,
                   f"{what} calls returning an error code"),
    ]


ENTRIES = [
    *_calls("cuda", "gpu", "CUDA runtime/driver", 65),
    MetricInfo("ebpf.cuda.memcpy_bytes", "gpu", "counter", "bytes", 70,
               "bytes requested by CUDA copies"),
    MetricInfo("ebpf.cuda.memcpy_calls", "gpu", "counter", "calls", 45,
               "CUDA copies per direction"),
    MetricInfo("ebpf.cuda.alloc_bytes", "gpu", "counter", "bytes", 55,
               "GPU memory allocated through CUDA"),
    MetricInfo("ebpf.cuda.free_bytes", "gpu", "counter", "bytes", 50,
               "GPU memory released through CUDA"),
    *_calls("nccl", "network", "NCCL", 70),
    MetricInfo("ebpf.nccl.bytes", "network", "counter", "bytes", 80,
               "bytes named by NCCL operations (count x datatype size)"),
    MetricInfo("ebpf.nccl.elements", "network", "counter", "elements", 30,
               "elements named by NCCL operations with an invalid datatype"),
    MetricInfo("ebpf.python.calls", "software", "counter", "calls", 50,
               "Python function entries"),
    MetricInfo("ebpf.tcp.retransmits", "network", "event", "segments", 80,
               "TCP retransmissions of one flow"),
    MetricInfo("ebpf.tcp.retransmits_by_task", "network", "event", "segments", 40,
               "TCP retransmissions by the task on CPU"),
    MetricInfo("ebpf.block.ios", "storage", "counter", "requests", 60,
               "block requests completed"),
    MetricInfo("ebpf.block.latency_ns_total", "storage", "counter", "ns", 40,
               "time block requests spent in the device queue and device"),
    MetricInfo("ebpf.block.latency_ns_mean", "storage", "gauge", "ns", 75,
               "mean block request latency"),
    MetricInfo("ebpf.block.latency_ns_max", "storage", "gauge", "ns", 70,
               "longest block request"),
    MetricInfo("ebpf.block.lat_hist", "storage", "counter", "requests", 30,
               "block requests per log2 latency bucket"),
    MetricInfo("ebpf.sched.runq_waits", "cpu", "counter", "waits", 45,
               "tasks that waited on a run queue"),
    MetricInfo("ebpf.sched.runq_latency_ns_total", "cpu", "counter", "ns", 50,
               "time tasks waited on run queues"),
    MetricInfo("ebpf.sched.runq_latency_ns_mean", "cpu", "gauge", "ns", 75,
               "mean run-queue wait"),
    MetricInfo("ebpf.sched.runq_latency_ns_max", "cpu", "gauge", "ns", 70,
               "longest run-queue wait"),
    MetricInfo("ebpf.sched.runq_lat_hist", "cpu", "counter", "waits", 30,
               "run-queue waits per log2 latency bucket"),
    # gpu_procs (NVML per process)
    MetricInfo("gpu.proc.mem_used_bytes", "gpu", "gauge", "bytes", 75,
               "GPU memory held by a process"),
    MetricInfo("gpu.proc.sm_util", "gpu", "gauge", "percent", 85,
               "GPU SM utilisation of a process"),
    MetricInfo("gpu.proc.mem_util", "gpu", "gauge", "percent", 70,
               "GPU memory-controller utilisation of a process"),
    MetricInfo("gpu.proc.enc_util", "gpu", "gauge", "percent", 30,
               "GPU video-encoder utilisation of a process"),
    MetricInfo("gpu.proc.dec_util", "gpu", "gauge", "percent", 30,
               "GPU video-decoder utilisation of a process"),
]
