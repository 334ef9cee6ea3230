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

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
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


@lru_cache(maxsize=1 << 16)
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


@dataclass
class Values:
    """Channel values from one batch: cumulative counters and per-interval gauges."""

    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)


class BatchConverter:
    """Turns batches of one bpftrace run into channel values. Keeps the previous totals (for
    per-interval means) and every channel name it built: a key seen before costs a dict
    lookup, not a formatting."""

    def __init__(self, labeller: Labeller, untimed: frozenset[int] = frozenset()) -> None:
        self.labeller = labeller
        self.untimed = untimed  # function ids counted at entry only (no return probe)
        self._prev: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._names: dict[tuple[Any, ...], str | None] = {}

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

    # -- names -------------------------------------------------------------------------------
    def _fn(self, leaf: str, key: Key, extra: tuple[str, str] | None = None) -> str | None:
        """Channel ``ebpf.<family>.<leaf>`` of a (pid, function id, ...) key, or None when
        the key is malformed or its process is not selected."""
        ident = ("fn", leaf, key[:2], extra)
        if ident in self._names:
            return self._names[ident]
        name = None
        if len(key) >= 2 and isinstance(key[0], int) and isinstance(key[1], int) \
                and 0 <= key[1] < len(FUNCTIONS):
            proc = self.labeller.process(key[0])
            if proc is not None:
                fn = FUNCTIONS[key[1]]
                labels = {**proc, "fn": fn.name}
                if extra is not None:
                    labels[extra[0]] = extra[1]
                name = format_channel(f"ebpf.{fn.family}.{leaf}", labels)
        self._names[ident] = name
        return name

    def _named(self, ident: tuple[Any, ...], metric: str,
               labels: Callable[[], dict[str, str]]) -> str:
        name = self._names.get(ident)
        if name is None:
            name = self._names[ident] = format_channel(metric, labels())
        return name

    def _hist(self, name_of: Callable[[str], str | None], buckets: Any,
              out: dict[str, float]) -> None:
        """Per-bucket counts; label ``le`` = the bucket's exclusive upper bound (ns)."""
        if not isinstance(buckets, list):
            return
        for bucket in buckets:
            count = bucket.get("count", 0)
            if count:
                name = name_of(str(int(bucket.get("max", 0)) + 1))
                if name is not None:
                    out[name] = float(count)

    # -- CUDA / NCCL -------------------------------------------------------------------------
    def _functions(self, batch: Batch, values: Values) -> None:
        counters, gauges = values.counters, values.gauges
        returned = batch.get("ret")
        for key, value in batch.get("calls").items():
            name = self._fn("calls", key)
            if name is None:
                continue
            counters[name] = float(value)
            if key[1] in self.untimed:
                continue
            stats = returned.get(key)
            done = float(stats["count"]) if _is_stats(stats) else 0.0
            in_flight = self._fn("in_flight", key)
            if in_flight is not None:
                gauges[in_flight] = max(float(value) - done, 0.0)
        for key, stats in returned.items():
            name = self._fn("latency_ns_total", key)
            if name is None or not _is_stats(stats):
                continue
            count, total = float(stats["count"]), float(stats["total"])
            counters[name] = total
            mean = self._fn("latency_ns_mean", key)
            if mean is not None:
                gauges[mean] = self._mean(("fn", *key), count, total)
        for key, value in batch.get("maxlat").items():
            name = self._fn("latency_ns_max", key)
            if name is not None:
                gauges[name] = float(value)
        for key, buckets in batch.get("lat").items():
            self._hist(lambda le, key=key: self._fn("lat_hist", key, ("le", le)), buckets,
                       counters)
        self._coded(batch.get("err"), "errors", "code", error_label, counters)
        self._coded(batch.get("cpy"), "memcpy_bytes", "kind", copy_kind_label, counters)
        self._coded(batch.get("cpyn"), "memcpy_calls", "kind", copy_kind_label, counters)
        for map_name, leaf in (("alloc", "alloc_bytes"), ("free", "free_bytes")):
            for key, value in batch.get(map_name).items():
                name = self._fn(leaf, key)
                if name is not None:
                    counters[name] = float(value)
        for key, value in batch.get("nccl").items():
            if len(key) < 3 or not isinstance(key[2], int):
                continue
            dtype, size = nccl_dtype(key[2])
            name = self._fn("elements" if size is None else "bytes", key, ("dtype", dtype))
            if name is not None:
                counters[name] = float(value) * (size or 1)

    def _coded(self, table: dict[Key, Any], leaf: str, label: str,
               text: Callable[[int], str], out: dict[str, float]) -> None:
        """A (pid, function, code) map: one channel per code, labelled ``label=text(code)``."""
        for key, value in table.items():
            if len(key) > 2 and isinstance(key[2], int):
                name = self._fn(leaf, key, (label, text(key[2])))
                if name is not None:
                    out[name] = out.get(name, 0.0) + float(value)

    # -- Python ------------------------------------------------------------------------------
    def _python(self, batch: Batch, values: Values) -> None:
        for key, value in batch.get("py").items():
            if not key or not isinstance(key[0], int):
                continue
            ident = ("py", key[0])
            if ident not in self._names:
                proc = self.labeller.process(key[0])
                self._names[ident] = None if proc is None else format_channel(
                    "ebpf.python.calls",
                    {**proc, "source": self.labeller.python_source(key[0])})
            name = self._names[ident]
            if name is not None:
                values.counters[name] = float(value)

    # -- kernel tracepoints --------------------------------------------------------------------
    def _tcp(self, batch: Batch, values: Values) -> None:
        for key, value in batch.get("tcp").items():
            if len(key) == 4:
                name = self._named(("tcp", key), "ebpf.tcp.retransmits", lambda key=key: {
                    "saddr": str(key[0])[:64], "sport": str(key[1]),
                    "daddr": str(key[2])[:64], "dport": str(key[3])})
                values.counters[name] = float(value)
        for key, value in batch.get("tcptask").items():
            if key and isinstance(key[0], int):
                name = self._named(("tcptask", key), "ebpf.tcp.retransmits_by_task",
                                   lambda key=key: self.labeller.task(int(key[0])))
                values.counters[name] = float(value)

    def _dev(self, leaf: str, dev: int, extra: tuple[str, str] | None = None) -> str:
        def labels() -> dict[str, str]:
            out = {"dev": self.labeller.device(dev)}
            if extra is not None:
                out[extra[0]] = extra[1]
            return out
        return self._named(("blk", leaf, dev, extra), f"ebpf.block.{leaf}", labels)

    def _block(self, batch: Batch, values: Values) -> None:
        for key, stats in batch.get("blk").items():
            if not key or not isinstance(key[0], int) or not _is_stats(stats):
                continue
            dev = key[0]
            count, total = float(stats["count"]), float(stats["total"])
            values.counters[self._dev("ios", dev)] = count
            values.counters[self._dev("latency_ns_total", dev)] = total
            values.gauges[self._dev("latency_ns_mean", dev)] = \
                self._mean(("blk", dev), count, total)
        for key, value in batch.get("blkmax").items():
            if key and isinstance(key[0], int):
                values.gauges[self._dev("latency_ns_max", key[0])] = float(value)
        for key, buckets in batch.get("blkhist").items():
            if key and isinstance(key[0], int):
                self._hist(lambda le, dev=key[0]: self._dev("lat_hist", dev, ("le", le)),
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
        self._hist(lambda le: self._named(("rq", le), "ebpf.sched.runq_lat_hist",
                                          lambda: {"le": le}),
                   batch.get("rqhist").get(()), values.counters)
