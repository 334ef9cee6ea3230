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

Channel counts are bounded (:class:`Limits`, see ``docs/ebpf.md``): at most ``max_pids``
processes (and as many retransmitting tasks, ``max_flows`` TCP flows) get channels of their
own; the rest are summed into channels labelled ``pid=other`` (``saddr=other``, ...).
A key gets its own channels when first seen while a slot is free (the busiest of a batch
first); at each review (:meth:`BatchConverter.review`, the probe's refresh) keys that
exited are retired and the busiest of the others take the free slots. A promoted key's
counters start from zero and the ``other`` channels keep what it counted before, so every
channel stays monotonic and the channels of a metric still sum to the kernel's total.
Histograms keep at most ``hist_buckets`` buckets: ``le`` from ``hist_min_ns`` up in
powers of two, the last one ``+Inf``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable
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
OTHER = "other"
OWN, POOLED, DROPPED = 0, 1, 2


@dataclass(frozen=True)
class Limits:
    """Bounds on channel growth (see the module docstring)."""

    max_pids: int = 32        # processes (and TCP-retransmitting tasks) with own channels
    max_flows: int = 64       # TCP flows with own channels
    hist_buckets: int = 24    # buckets per histogram, the last one +Inf
    hist_min_ns: int = 1024   # upper bound of the first bucket (values below fall in it)

    def __post_init__(self) -> None:
        if self.max_pids < 0 or self.max_flows < 0 or self.hist_buckets < 2 \
                or self.hist_min_ns < 1:
            raise ValueError(f"bad eBPF limits: {self}")

    def bucket(self, upper: int) -> str:
        """The ``le`` label of a log2 bucket whose exclusive upper bound is ``upper``."""
        low = 1 << max(self.hist_min_ns - 1, 0).bit_length()  # a power of two
        high = low << (self.hist_buckets - 2)
        if upper <= low:
            return str(low)
        if upper > high:
            return "+Inf"
        return str(1 << (upper - 1).bit_length())


class Cap:
    """Which keys of one family (pids, flows) get channels of their own: at most
    ``limit``; the others are pooled, retired ones dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.own: set[Hashable] = set()
        self.seen: set[Hashable] = set()
        self.retired: set[Hashable] = set()
        self.activity: dict[Hashable, float] = {}

    def route(self, key: Hashable) -> int:
        if key in self.own:
            return OWN
        return DROPPED if key in self.retired else POOLED

    def admit(self, activity: dict[Hashable, float]) -> None:
        """Note the latest activity; new keys take free slots, busiest first."""
        self.activity.update(activity)
        new = sorted((k for k in activity if k not in self.seen), key=lambda k: -activity[k])
        for key in new:
            self.seen.add(key)
            if len(self.own) < self.limit:
                self.own.add(key)

    def review(self, alive: Callable[[Hashable], bool]
               ) -> tuple[list[Hashable], list[Hashable], list[Hashable]]:
        """Retire keys that are gone, promote the busiest pooled ones into free slots;
        returns (promoted, retired own keys, retired pooled keys)."""
        pooled = [k for k in self.seen if k not in self.own and k not in self.retired]
        retired = [k for k in self.own if not alive(k)]
        self.own.difference_update(retired)
        gone = [k for k in pooled if not alive(k)]
        self.retired.update(retired, gone)
        for key in (*retired, *gone):
            self.activity.pop(key, None)
        pooled = [k for k in pooled if alive(k)]
        pooled.sort(key=lambda k: -self.activity.get(k, 0.0))
        promoted = pooled[:max(self.limit - len(self.own), 0)]
        self.own.update(promoted)
        return promoted, retired, gone


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
    lookup, not a formatting.

    ``caps`` (families ``proc``, ``task``, ``flow``) outlive one run: the probe passes the
    same ones to the converter of the next bpftrace run, so keys keep their channels."""

    def __init__(self, labeller: Labeller, untimed: frozenset[int] = frozenset(),
                 limits: Limits | None = None, caps: dict[str, Cap] | None = None) -> None:
        self.labeller = labeller
        self.untimed = untimed  # function ids counted at entry only (no return probe)
        self.limits = limits = limits or Limits()
        self.caps = caps if caps is not None else new_caps(limits)
        self._prev: dict[tuple[Any, ...], tuple[float, float]] = {}
        self._names: dict[tuple[Any, ...], str | None] = {}
        # counters of pooled keys: the last raw value per (family, key) and slot, the
        # offsets of promoted keys, and what the pooled channels keep of promoted keys
        self._last: dict[tuple[str, Hashable], dict[Hashable, float]] = defaultdict(dict)
        self._offset: dict[tuple[str, Hashable, Hashable], float] = {}
        self._frozen: dict[tuple[str, Hashable], float] = defaultdict(float)
        self._pooled_name: dict[tuple[str, Hashable], tuple[bool, str]] = {}
        #: own channel names of each (family, key), dropped when the key retires
        self.names_of: dict[tuple[str, Hashable], set[str]] = defaultdict(set)
        self._hidden: dict[str, float] = {}
        self._means: dict[str, str] = {}

    def _mean(self, ident: tuple[Any, ...], count: float, total: float) -> float:
        before = self._prev.get(ident, (0.0, 0.0))
        self._prev[ident] = (count, total)
        done = count - before[0]
        return (total - before[1]) / done if done > 0 else NAN

    def convert(self, batch: Batch) -> Values:
        values = Values()
        self._hidden, self._means = {}, {}
        self._admit(batch)
        self._functions(batch, values)
        self._python(batch, values)
        self._tcp(batch, values)
        self._block(batch, values)
        self._sched(batch, values)
        for (family, slot), kept in self._frozen.items():
            hidden, name = self._pooled_name[(family, slot)]
            target = self._hidden if hidden else values.counters
            target[name] = target.get(name, 0.0) + kept
        for mean, total in self._means.items():
            values.gauges[mean] = self._mean(("mean", mean), self._hidden.get(mean, 0.0),
                                             values.counters.get(total, 0.0))
        return values

    # -- bounds --------------------------------------------------------------------------------
    def _admit(self, batch: Batch) -> None:
        """New keys of this batch take free slots, busiest first (calls, retransmits)."""
        procs: dict[Hashable, float] = defaultdict(float)
        for table in (batch.get("calls"), batch.get("py")):
            for key, value in table.items():
                if key and isinstance(key[0], int) and self.labeller.process(key[0]):
                    procs[key[0]] += float(value)
        self.caps["proc"].admit(procs)
        tasks = {key[0]: float(v) for key, v in batch.get("tcptask").items()
                 if key and isinstance(key[0], int)}
        self.caps["task"].admit(tasks)
        flows = {key: float(v) for key, v in batch.get("tcp").items() if len(key) == 4}
        self.caps["flow"].admit(flows)

    def review(self, alive: Callable[[str, Hashable], bool]) -> list[str]:
        """Retire keys that are gone and promote pooled ones (the probe's refresh);
        returns the own channel names of retired keys."""
        gone: list[str] = []
        for family, cap in self.caps.items():
            promoted, retired, pooled_gone = cap.review(
                lambda key, family=family: alive(family, key))
            # promoted: the pooled channels keep what the key counted so far, its own
            # channels count from zero; an exited pooled key's counts stay pooled the same
            # way, and its kernel entries are dropped from now on
            for key in (*promoted, *pooled_gone):
                for slot, value in self._last.get((family, key), {}).items():
                    self._offset[(family, key, slot)] = value
                    self._frozen[(family, slot)] += value
            for key in (*retired, *pooled_gone):
                gone.extend(self.names_of.pop((family, key), ()))
                self._last.pop((family, key), None)
                for slot in [s for s in self._offset if s[0] == family and s[1] == key]:
                    del self._offset[slot]
        return gone

    def _put(self, out: dict[str, float], family: str, key: Hashable, slot: Hashable,
             value: float, own: Callable[[], str | None], pooled: Callable[[], str],
             hidden: bool = False) -> str | None:
        """Add counter ``value`` of ``key`` to its own channel or to the pooled one;
        returns the channel name written (None when dropped)."""
        route = self.caps[family].route(key)
        if route == DROPPED:
            return None
        self._last[(family, key)][slot] = value
        if route == OWN:
            name = own()
            if name is None:
                return None
            if not hidden:
                self.names_of[(family, key)].add(name)
            value -= self._offset.get((family, key, slot), 0.0)
        else:
            name = pooled()
            self._pooled_name[(family, slot)] = (hidden, name)
        out[name] = out.get(name, 0.0) + value
        return name

    def _gauge(self, out: dict[str, float], family: str, key: Hashable, value: float,
               own: Callable[[], str | None], pooled: Callable[[], str],
               combine: Callable[[float, float], float]) -> None:
        """A per-interval value: own channel, or combined into the pooled one."""
        route = self.caps[family].route(key)
        if route == DROPPED:
            return
        name = own() if route == OWN else pooled()
        if name is None:
            return
        if route == OWN:
            self.names_of[(family, key)].add(name)
            out[name] = value
        else:
            out[name] = combine(out[name], value) if name in out else value

    # -- names -------------------------------------------------------------------------------
    def _fn(self, leaf: str, key: Key, extra: tuple[str, str] | None = None) -> str | None:
        """Channel ``ebpf.<family>.<leaf>`` of a (pid, function id, ...) key, or None when
        the key is malformed or its process is not selected."""
        ident = ("fn", leaf, key[:2], extra)
        if ident in self._names:
            return self._names[ident]
        name = None
        if _fn_key(key):
            proc = self.labeller.process(int(key[0]))
            if proc is not None:
                fn = FUNCTIONS[int(key[1])]
                labels = {**proc, "fn": fn.name}
                if extra is not None:
                    labels[extra[0]] = extra[1]
                name = format_channel(f"ebpf.{fn.family}.{leaf}", labels)
        self._names[ident] = name
        return name

    def _fn_pooled(self, leaf: str, fid: int, extra: tuple[str, str] | None = None) -> str:
        """The ``pid=other`` channel of function ``fid``."""
        ident = ("fn", leaf, OTHER, fid, extra)
        name = self._names.get(ident)
        if name is None:
            fn = FUNCTIONS[fid]
            labels = {"pid": OTHER, "fn": fn.name}
            if extra is not None:
                labels[extra[0]] = extra[1]
            name = self._names[ident] = format_channel(f"ebpf.{fn.family}.{leaf}", labels)
        return name

    def _fn_put(self, out: dict[str, float], leaf: str, key: Key, value: float,
                extra: tuple[str, str] | None = None, raw: Any = None,
                hidden: bool = False) -> str | None:
        """A counter of a (pid, function id, ...) key, own or pooled (``raw``: the kernel
        key part that ``extra`` labels, so that offsets follow raw keys)."""
        if not _fn_key(key) or self.labeller.process(int(key[0])) is None:
            return None
        slot = (leaf, key[1], extra if raw is None else raw, hidden)
        return self._put(out, "proc", key[0], slot, value,
                         lambda: self._fn(leaf, key, extra),
                         lambda: self._fn_pooled(leaf, int(key[1]), extra), hidden)

    def _fn_gauge(self, out: dict[str, float], leaf: str, key: Key, value: float,
                  combine: Callable[[float, float], float]) -> None:
        if not _fn_key(key) or self.labeller.process(int(key[0])) is None:
            return
        self._gauge(out, "proc", key[0], value, lambda: self._fn(leaf, key),
                    lambda: self._fn_pooled(leaf, int(key[1])), combine)

    def _named(self, ident: tuple[Any, ...], metric: str,
               labels: Callable[[], dict[str, str]]) -> str:
        name = self._names.get(ident)
        if name is None:
            name = self._names[ident] = format_channel(metric, labels())
        return name

    def _buckets(self, buckets: Any) -> dict[str, float]:
        """Counts per bounded ``le`` label (see :class:`Limits`) of a log2 histogram."""
        out: dict[str, float] = {}
        if not isinstance(buckets, list):
            return out
        for bucket in buckets:
            count = bucket.get("count", 0)
            if count:
                le = self.limits.bucket(int(bucket.get("max", 0)) + 1)
                out[le] = out.get(le, 0.0) + float(count)
        return out

    def _hist(self, name_of: Callable[[str], str | None], buckets: Any,
              out: dict[str, float]) -> None:
        """Per-bucket counts; label ``le`` = the bucket's exclusive upper bound (ns)."""
        for le, count in self._buckets(buckets).items():
            name = name_of(le)
            if name is not None:
                out[name] = count

    # -- CUDA / NCCL -------------------------------------------------------------------------
    def _functions(self, batch: Batch, values: Values) -> None:
        counters, gauges = values.counters, values.gauges
        returned = batch.get("ret")
        for key, value in batch.get("calls").items():
            if self._fn_put(counters, "calls", key, float(value)) is None:
                continue
            if key[1] in self.untimed:
                continue
            stats = returned.get(key)
            done = float(stats["count"]) if _is_stats(stats) else 0.0
            self._fn_gauge(gauges, "in_flight", key, max(float(value) - done, 0.0),
                           lambda a, b: a + b)
        for key, stats in returned.items():
            if not _is_stats(stats):
                continue
            total = self._fn_put(counters, "latency_ns_total", key, float(stats["total"]))
            if total is None:
                continue
            mean = self._fn_put(self._hidden, "latency_ns_mean", key, float(stats["count"]),
                                hidden=True)
            if mean is not None:
                self._means[mean] = total
        for key, value in batch.get("maxlat").items():
            self._fn_gauge(gauges, "latency_ns_max", key, float(value), max)
        for key, buckets in batch.get("lat").items():
            for le, count in self._buckets(buckets).items():
                self._fn_put(counters, "lat_hist", key, count, ("le", le))
        self._coded(batch.get("err"), "errors", "code", error_label, counters)
        self._coded(batch.get("cpy"), "memcpy_bytes", "kind", copy_kind_label, counters)
        self._coded(batch.get("cpyn"), "memcpy_calls", "kind", copy_kind_label, counters)
        for map_name, leaf in (("alloc", "alloc_bytes"), ("free", "free_bytes")):
            for key, value in batch.get(map_name).items():
                self._fn_put(counters, leaf, key, float(value))
        for key, value in batch.get("nccl").items():
            if len(key) < 3 or not isinstance(key[2], int):
                continue
            dtype, size = nccl_dtype(key[2])
            self._fn_put(counters, "elements" if size is None else "bytes", key,
                         float(value) * (size or 1), ("dtype", dtype), raw=key[2])

    def _coded(self, table: dict[Key, Any], leaf: str, label: str,
               text: Callable[[int], str], out: dict[str, float]) -> None:
        """A (pid, function, code) map: one channel per code, labelled ``label=text(code)``."""
        for key, value in table.items():
            if len(key) > 2 and isinstance(key[2], int):
                self._fn_put(out, leaf, key, float(value), (label, text(key[2])), raw=key[2])

    # -- Python ------------------------------------------------------------------------------
    def _python(self, batch: Batch, values: Values) -> None:
        for key, value in batch.get("py").items():
            if not key or not isinstance(key[0], int):
                continue
            pid = key[0]
            proc = self.labeller.process(pid)
            if proc is None:
                continue
            source = self.labeller.python_source(pid)

            def own(pid: int = pid, proc: dict[str, str] = proc, source: str = source) -> str:
                return self._named(("py", pid), "ebpf.python.calls",
                                   lambda: {**proc, "source": source})

            def pooled(source: str = source) -> str:
                return self._named(("py", OTHER, source), "ebpf.python.calls",
                                   lambda: {"pid": OTHER, "source": source})

            self._put(values.counters, "proc", pid, ("py", source), float(value), own, pooled)

    # -- kernel tracepoints --------------------------------------------------------------------
    def _tcp(self, batch: Batch, values: Values) -> None:
        pooled_flow = {"saddr": OTHER, "sport": OTHER, "daddr": OTHER, "dport": OTHER}
        for key, value in batch.get("tcp").items():
            if len(key) == 4:
                self._put(values.counters, "flow", key, "tcp", float(value),
                          lambda key=key: self._named(("tcp", key), "ebpf.tcp.retransmits",
                                                      lambda: {
                              "saddr": str(key[0])[:64], "sport": str(key[1]),
                              "daddr": str(key[2])[:64], "dport": str(key[3])}),
                          lambda: self._named(("tcp", OTHER), "ebpf.tcp.retransmits",
                                              lambda: pooled_flow))
        for key, value in batch.get("tcptask").items():
            if key and isinstance(key[0], int):
                self._put(values.counters, "task", key[0], "tcptask", float(value),
                          lambda key=key: self._named(
                              ("tcptask", key), "ebpf.tcp.retransmits_by_task",
                              lambda: self.labeller.task(int(key[0]))),
                          lambda: self._named(("tcptask", OTHER),
                                              "ebpf.tcp.retransmits_by_task",
                                              lambda: {"pid": OTHER}))

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


def new_caps(limits: Limits) -> dict[str, Cap]:
    """Fresh caps of the three bounded key families."""
    return {"proc": Cap(limits.max_pids), "task": Cap(limits.max_pids),
            "flow": Cap(limits.max_flows)}


def _fn_key(key: Key) -> bool:
    """True for a (pid, function id, ...) key naming a traced function."""
    return len(key) >= 2 and isinstance(key[0], int) and isinstance(key[1], int) \
        and 0 <= key[1] < len(FUNCTIONS)
