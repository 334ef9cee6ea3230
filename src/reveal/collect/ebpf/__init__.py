"""Software-stack tracing without instrumentation: eBPF uprobes and tracepoints via bpftrace.

Modules, one job each:

- :mod:`~reveal.collect.ebpf.functions`: the traced CUDA runtime, driver and NCCL entry
  points (which argument holds bytes, copy kind, datatype) and their numeric ids.
- :mod:`~reveal.collect.ebpf.elf`: just enough ELF reading to know which of those a
  shared object exports and whether a Python interpreter carries USDT probes.
- :mod:`~reveal.collect.ebpf.targets`: which processes to trace and the ``.so`` files they
  actually map (``/proc/PID/maps``), with tenant-safe labels.
- :mod:`~reveal.collect.ebpf.scripts`: bpftrace program generation (in-kernel aggregation
  printed once per interval; a bounded per-event program for captures).
- :mod:`~reveal.collect.ebpf.session`: one running bpftrace process, read without blocking.
- :mod:`~reveal.collect.ebpf.parse`: bpftrace's JSON output to channel values.
- :mod:`~reveal.collect.ebpf.environment`: what this host allows (root, bpftrace, tracefs).
- :mod:`~reveal.collect.ebpf.probe`: the ``ebpf`` probe (opt-in).
- :mod:`~reveal.collect.ebpf.capture`: a short per-event capture as Chrome-trace JSON.

Nothing here imports bpftrace bindings: bpftrace is run as a program, so every module
imports on hosts without it.
"""

from reveal.collect.ebpf import probe as probe  # registers the ebpf probe
