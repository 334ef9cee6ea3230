"""bpftrace JSON output → batches of map values → channel values.

bpftrace (``-f json``) prints one record per map: ``{"type": "map" | "hist" | "stats",
"data": {"@name": VALUE}}`` where VALUE is a scalar, a histogram (list of ``{"min", "max",
"count"}`` buckets) or stats (``{"count", "average", "total"}``), or a dict of those keyed by
the map key joined with commas (``"1234,7"``). The aggregation program ends each print
round with a ``reveal-batch`` printf and its last one with ``reveal-final``;
:class:`BatchAssembler` groups records into :class:`Batch` objects at those markers.

:class:`BatchConverter` turns one batch into channel values (see ``docs/ebpf.md`` for the
channel list): counters are the kernel's cumulative values for this bpftrace run, gauges
describe the interval since the previous batch (NaN when nothing happened in it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from reveal.collect.ebpf.functions import (
    FUNCTIONS,
    copy_kind_label,
    error_label,
    nccl_dtype,
)
from reveal.collect.ebpf.scripts import BATCH_MARKER, FINAL_MARKER
from reveal.frame import format_channel

Key = tuple[int | str, ...]
NAN = float("nan")


def parse_key(text: str) -> Key:
    """``"1234,7"`` → ``(1234, 7)``; non-numeric parts (addresses) stay text."""
    out: list[int | str] = []
    for part in text.split(","):
        part = part.strip()
        try:
            out.append(int(part))
        except ValueError:
            out.append(part)
    return tuple(out)


def _is_stats(value: Any) -> bool:
    return isinstance(value, dict) and "count" in value and "total" in value


def _normalise(kind: str, value: Any) -> dict[Key, Any]:
    """One map's data as ``{key tuple: value}`` (``()`` for a map without keys)."""
    if kind == "hist":
        if isinstance(value, list):
            return {(): value}
        return {parse_key(k): v for k, v in value.items()}
    if kind == "stats" and _is_stats(value):
        return {(): value}
    if isinstance(value, dict):
        return {parse_key(k): v for k, v in value.items()}
    return {(): value}


@dataclass
class Batch:
    """The maps of one print round: ``maps[name][key]`` (name without ``@``)."""

    maps: dict[str, dict[Key, Any]] = field(default_factory=dict)
    final: bool = False

    def get(self, name: str) -> dict[Key, Any]:
        return self.maps.get(name, {})


class BatchAssembler:
    """Groups bpftrace records into batches at the batch markers."""

    def __init__(self) -> None:
        self._pending = Batch()
        self.done = False  # the final batch was seen

    def feed(self, records: Iterable[dict[str, Any]]) -> list[Batch]:
        batches = []
        for record in records:
            if self.done:
                break
            kind = record.get("type")
            data = record.get("data")
            if kind in ("map", "hist", "stats") and isinstance(data, dict):
                for name, value in data.items():
                    self._pending.maps[name.lstrip("@")] = _normalise(kind, value)
            elif kind == "printf" and isinstance(data, str):
                marker = data.strip()
                if marker in (BATCH_MARKER, FINAL_MARKER):
                    self._pending.final = marker == FINAL_MARKER
                    batches.append(self._pending)
                    self._pending = Batch()
                    self.done = marker == FINAL_MARKER
        return batches


class Labeller(Protocol):
    """Resolves kernel keys to labels (user space owns every name)."""

    def process(self, pid: int) -> dict[str, str] | None:
        """``{"pid", "comm", "cgroup"}`` of a traced process, None if not selected."""

    def python_source(self, pid: int) -> str:
        """``usdt`` or ``eval_frame``: how this process's Python entries are seen."""

    def task(self, pid: int) -> dict[str, str]:
        """``{"pid", "comm"}`` of any task (no selection)."""

    def device(self, dev: int) -> str:
        """Block device name of a kernel ``dev_t``."""


def _hist_channels(metric: str, labels: dict[str, str], buckets: Any,
                   out: dict[str, float]) -> None:
    """Per-bucket counts, label ``le`` = the bucket's exclusive upper bound (ns)."""
    if not isinstance(buckets, list):
        return
    for bucket in buckets:
        count = bucket.get("count", 0)
        if not count:
            continue
        upper = int(bucket.get("max", 0)) + 1
        out[format_channel(metric, {**labels, "le": str(upper)})] = float(count)


@dataclass
class Values:
    """Channel values from one batch: cumulative counters and per-interval gauges."""

    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


class BatchConverter:
    """Turns batches of one bpftrace run into channel values (keeps the previous totals
    to compute per-interval means)."""

    def __init__(self, labeller: Labeller) -> None:
        self.labeller = labeller
        self._prev: dict[tuple[Any, ...], tuple[float, float]] = {}

    def _mean(self, ident: tuple[Any, ...], count: float, total: float) -> float:
        before = self._prev.get(ident, (0.0, 0.0))
        self._prev[ident] = (count, total)
        done = count - before[0]
        return (total - before[1]) / done if done > 0 else NAN

    def convert(self, batch: Batch) -> Values:
        values = Values()
        self._functions(batch, values)
        self._python(batch, values)
        self._tcp(batch, values)
        self._block(batch, values)
        self._sched(batch, values)
        return values

    # -- CUDA / NCCL -------------------------------------------------------------------------
    def _fn_labels(self, key: Key) -> tuple[str, dict[str, str]] | None:
        if len(key) < 2 or not isinstance(key[0], int) or not isinstance(key[1], int):
            return None
        if not 0 <= key[1] < len(FUNCTIONS):
            return None
        proc = self.labeller.process(key[0])
        if proc is None:
            return None
        fn = FUNCTIONS[key[1]]
        return fn.family, {**proc, "fn": fn.name}

    def _functions(self, batch: Batch, values: Values) -> None:
        counters, gauges = values.counters, values.gauges
        returned = batch.get("ret")
        for key, value in batch.get("calls").items():
            found = self._fn_labels(key)
            if not found:
                continue
            family, labels = found
            counters[format_channel(f"ebpf.{family}.calls", labels)] = float(value)
            stats = returned.get(key)
            done = float(stats["count"]) if _is_stats(stats) else 0.0
            gauges[format_channel(f"ebpf.{family}.in_flight", labels)] = \
                max(float(value) - done, 0.0)
        for key, stats in returned.items():
            found = self._fn_labels(key)
            if not found or not _is_stats(stats):
                continue
            family, labels = found
            count, total = float(stats["count"]), float(stats["total"])
            counters[format_channel(f"ebpf.{family}.latency_ns_total", labels)] = total
            gauges[format_channel(f"ebpf.{family}.latency_ns_mean", labels)] = \
                self._mean(("fn", *key), count, total)
        for key, value in batch.get("maxlat").items():
            found = self._fn_labels(key)
            if found:
                family, labels = found
                gauges[format_channel(f"ebpf.{family}.latency_ns_max", labels)] = float(value)
        for key, buckets in batch.get("lat").items():
            found = self._fn_labels(key)
            if found:
                family, labels = found
                _hist_channels(f"ebpf.{family}.lat_hist", labels, buckets, counters)
        for key, value in batch.get("err").items():
            found = self._fn_labels(key)
            if found and len(key) > 2 and isinstance(key[2], int):
                family, labels = found
                counters[format_channel(f"ebpf.{family}.errors",
                                        {**labels, "code": error_label(key[2])})] = float(value)
        for name, metric in (("cpy", "ebpf.cuda.memcpy_bytes"), ("cpyn", "ebpf.cuda.memcpy_calls")):
            for key, value in batch.get(name).items():
                found = self._fn_labels(key)
                if found and len(key) > 2 and isinstance(key[2], int):
                    labels = {**found[1], "kind": copy_kind_label(key[2])}
                    counters[format_channel(metric, labels)] = float(value)
        for name, metric in (("alloc", "ebpf.cuda.alloc_bytes"), ("free", "ebpf.cuda.free_bytes")):
            for key, value in batch.get(name).items():
                found = self._fn_labels(key)
                if found:
                    counters[format_channel(metric, found[1])] = float(value)
        for key, value in batch.get("nccl").items():
            found = self._fn_labels(key)
            if not found or len(key) < 3 or not isinstance(key[2], int):
                continue
            dtype, size = nccl_dtype(key[2])
            labels = {**found[1], "dtype": dtype}
            if size is None:
                counters[format_channel("ebpf.nccl.elements", labels)] = float(value)
            else:
                counters[format_channel("ebpf.nccl.bytes", labels)] = float(value) * size

    # -- Python ------------------------------------------------------------------------------
    def _python(self, batch: Batch, values: Values) -> None:
        for key, value in batch.get("py").items():
            if not key or not isinstance(key[0], int):
                continue
            proc = self.labeller.process(key[0])
            if proc is None:
                continue
            labels = {**proc, "source": self.labeller.python_source(key[0])}
            values.counters[format_channel("ebpf.python.calls", labels)] = float(value)

    # -- kernel tracepoints --------------------------------------------------------------------
    def _tcp(self, batch: Batch, values: Values) -> None:
        for key, value in batch.get("tcp").items():
            if len(key) != 4:
                continue
            labels = {"saddr": str(key[0])[:64], "sport": str(key[1]),
                      "daddr": str(key[2])[:64], "dport": str(key[3])}
            values.counters[format_channel("ebpf.tcp.retransmits", labels)] = float(value)
        for key, value in batch.get("tcptask").items():
            if key and isinstance(key[0], int):
                values.counters[format_channel("ebpf.tcp.retransmits_by_task",
                                               self.labeller.task(key[0]))] = float(value)

    def _block(self, batch: Batch, values: Values) -> None:
        for key, stats in batch.get("blk").items():
            if not key or not isinstance(key[0], int) or not _is_stats(stats):
                continue
            labels = {"dev": self.labeller.device(key[0])}
            count, total = float(stats["count"]), float(stats["total"])
            values.counters[format_channel("ebpf.block.ios", labels)] = count
            values.counters[format_channel("ebpf.block.latency_ns_total", labels)] = total
            values.gauges[format_channel("ebpf.block.latency_ns_mean", labels)] = \
                self._mean(("blk", key[0]), count, total)
        for key, value in batch.get("blkmax").items():
            if key and isinstance(key[0], int):
                values.gauges[format_channel("ebpf.block.latency_ns_max",
                                             {"dev": self.labeller.device(key[0])})] = float(value)
        for key, buckets in batch.get("blkhist").items():
            if key and isinstance(key[0], int):
                _hist_channels("ebpf.block.lat_hist", {"dev": self.labeller.device(key[0])},
                               buckets, values.counters)

    def _sched(self, batch: Batch, values: Values) -> None:
        stats = batch.get("rq").get(())
        if _is_stats(stats):
            count, total = float(stats["count"]), float(stats["total"])
            values.counters["ebpf.sched.runq_waits"] = count
            values.counters["ebpf.sched.runq_latency_ns_total"] = total
            values.gauges["ebpf.sched.runq_latency_ns_mean"] = self._mean(("rq",), count, total)
        peak = batch.get("rqmax").get(())
        if peak is not None:
            values.gauges["ebpf.sched.runq_latency_ns_max"] = float(peak)
        buckets = batch.get("rqhist").get(())
        if buckets is not None:
            _hist_channels("ebpf.sched.runq_lat_hist", {}, buckets, values.counters)
