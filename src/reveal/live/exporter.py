"""``/metrics`` for Prometheus (prometheus-client): what ``reveal watch`` sees and does.

Scores and thresholds of the last scored window (combined and per detector), active
anomalies by subsystem, alert counters per event and sink, the model's generation and
age, the channels the model's baseline held outside their healthy range, the collector's
own health, and a curated set of host channels named the Prometheus way (base units,
``_total`` for counters, ``_seconds`` and ``_bytes`` suffixes). Values are read from the
watch's state at scrape time; nothing is computed for a scrape that the watch does not
already hold, but the tick-lag quantiles.

Label values that come from channel names (cgroup, container, interface names) are chosen
by tenants and untrusted: control and invisible formatting characters become ``?`` and
long ones are cut (:func:`label_value`); prometheus-client escapes the rest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from reveal.errors import InputError
from reveal.frame import parse_channel
from reveal.live.snapshot import WatchSnapshot
from reveal.report.escape import plain

#: Characters a label value taken from a channel name keeps at most.
LABEL_LIMIT = 200


def label_value(text: str) -> str:
    """Untrusted text (a channel name) as a label value: printable, at most
    :data:`LABEL_LIMIT` characters."""
    return plain(text, LABEL_LIMIT)

_TICK_HZ = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0

#: (metric name, help, type, source metric, label taken from the channel -> our label,
#:  scale to base units); one per curated host channel
HOST_CHANNELS: list[tuple[str, str, str, str, tuple[str, str] | None, float]] = [
    ("reveal_host_cpu_seconds_total", "CPU time of all CPUs by mode", "counter",
     "cpu.{mode}", None, 1.0 / _TICK_HZ),
    ("reveal_host_context_switches_total", "Context switches", "counter", "cpu.ctxt", None,
     1.0),
    ("reveal_host_forks_total", "Processes created", "counter", "cpu.processes", None, 1.0),
    ("reveal_host_procs_running", "Runnable tasks", "gauge", "cpu.procs_running", None, 1.0),
    ("reveal_host_procs_blocked", "Tasks blocked on I/O", "gauge", "cpu.procs_blocked", None,
     1.0),
    ("reveal_host_load1", "Load average over 1 minute", "gauge", "loadavg.load1", None, 1.0),
    ("reveal_host_memory_total_bytes", "Memory size", "gauge", "mem.MemTotal", None, 1.0),
    ("reveal_host_memory_available_bytes", "Memory available", "gauge", "mem.MemAvailable",
     None, 1.0),
    ("reveal_host_memory_dirty_bytes", "Dirty page cache", "gauge", "mem.Dirty", None, 1.0),
    ("reveal_host_pressure_cpu_waiting_seconds_total", "Time some task waited for CPU (PSI)",
     "counter", "psi.cpu.some.total", None, 1e-6),
    ("reveal_host_pressure_memory_waiting_seconds_total",
     "Time some task waited for memory (PSI)", "counter", "psi.memory.some.total", None,
     1e-6),
    ("reveal_host_pressure_io_waiting_seconds_total", "Time some task waited for I/O (PSI)",
     "counter", "psi.io.some.total", None, 1e-6),
    ("reveal_host_disk_read_bytes_total", "Bytes read from disk", "counter",
     "disk.sectors_read", ("dev", "device"), 512.0),
    ("reveal_host_disk_written_bytes_total", "Bytes written to disk", "counter",
     "disk.sectors_written", ("dev", "device"), 512.0),
    ("reveal_host_disk_io_time_seconds_total", "Time the disk was busy", "counter",
     "disk.time_io_ms", ("dev", "device"), 1e-3),
    ("reveal_host_network_receive_bytes_total", "Bytes received", "counter", "net.rx_bytes",
     ("iface", "device"), 1.0),
    ("reveal_host_network_transmit_bytes_total", "Bytes sent", "counter", "net.tx_bytes",
     ("iface", "device"), 1.0),
    ("reveal_host_gpu_utilization_ratio", "GPU busy share", "gauge", "gpu.sm_util",
     ("gpu", "gpu"), 0.01),
    ("reveal_host_gpu_memory_used_bytes", "GPU memory used", "gauge", "gpu.mem_used_bytes",
     ("gpu", "gpu"), 1.0),
]

CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def host_metrics(channels: list[str], row: np.ndarray) -> list[Metric]:
    """The curated host channels of the newest sample (channels absent here are left out)."""
    index = {c: j for j, c in enumerate(channels)}
    out: list[Metric] = []
    for name, text, kind, source, label, scale in HOST_CHANNELS:
        family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
        if source == "cpu.{mode}":
            metric = family(name, text, labels=["mode"])
            for mode in CPU_MODES:
                j = index.get(f"cpu.{mode}")
                if j is not None and np.isfinite(row[j]):
                    metric.add_metric([mode], float(row[j]) * scale)
            if metric.samples:
                out.append(metric)
            continue
        if label is None:
            j = index.get(source)
            if j is not None and np.isfinite(row[j]):
                out.append(_single(family, name, text, float(row[j]) * scale))
            continue
        metric = family(name, text, labels=[label[1]])
        for c, j in index.items():
            if not c.startswith(source + "{"):
                continue
            base, labels = parse_channel(c)
            # the host's own channels only: one per device (a namespace's or container's
            # interfaces carry more labels and would repeat the device names)
            if base != source or set(labels) != {label[0]} or not np.isfinite(row[j]):
                continue
            metric.add_metric([labels[label[0]]], float(row[j]) * scale)
        if metric.samples:
            out.append(metric)
    return out


def _single(family: Callable[[str, str], Metric], name: str, documentation: str,
            value: float) -> Metric:
    """A metric family of one sample with no labels."""
    metric = family(name, documentation)
    metric.add_metric([], value)
    return metric


#: One-sample metrics read from a :class:`WatchSnapshot`: (family, name, help, value).
Single = tuple[Callable[[str, str], Metric], str, str, Callable[[WatchSnapshot], float]]
SCORING_METRICS: tuple[Single, ...] = (
    (CounterMetricFamily, "reveal_windows_scored", "Windows scored",
     attrgetter("windows_scored")),
    (CounterMetricFamily, "reveal_windows_flagged", "Windows flagged",
     attrgetter("windows_flagged")),
    (CounterMetricFamily, "reveal_windows_skipped",
     "Windows never scored (scoring fell too far behind)", attrgetter("windows_skipped")),
    (GaugeMetricFamily, "reveal_scoring_lag_seconds",
     "From the end of the last window scored to when its verdict was ready",
     attrgetter("scoring_lag_s")),
    (GaugeMetricFamily, "reveal_scoring_duration_seconds",
     "Wall time of the last scoring call", attrgetter("scoring_s")),
    (CounterMetricFamily, "reveal_scoring_calls", "Scoring calls",
     attrgetter("scoring_calls")),
    (CounterMetricFamily, "reveal_scoring_calls_early",
     "Scoring calls made before their batch was full, for a window holding a change that "
     "matters", attrgetter("scoring_calls_early")))
MODEL_METRICS: tuple[Single, ...] = (
    (GaugeMetricFamily, "reveal_learning", "1 while learning a model",
     lambda s: float(bool(s.learning))),
    (GaugeMetricFamily, "reveal_learn_remaining_seconds",
     "Data still to collect before the model is fitted", attrgetter("learn_remaining_s")),
    (GaugeMetricFamily, "reveal_model_channels", "Channels the model scores",
     attrgetter("model_channels")),
    (GaugeMetricFamily, "reveal_model_learn_windows",
     "Windows of the span the model was learned on", attrgetter("model_windows")),
    (GaugeMetricFamily, "reveal_model_learn_windows_left_out",
     "Windows of that span left out of the fit as bursts",
     attrgetter("model_windows_left_out")),
    (GaugeMetricFamily, "reveal_unmodelled_channels",
     "Channels with data that the model does not know (they join at the next fit)",
     lambda s: len(s.unmodelled)))


def _singles(s: WatchSnapshot, table: tuple[Single, ...]) -> Iterator[Metric]:
    """The one-sample metrics of ``table`` with their values in ``s``."""
    for family, name, documentation, value in table:
        yield _single(family, name, documentation, value(s))


class WatchCollector:
    """A prometheus-client collector over ``snapshot()`` (what the watch holds)."""

    def __init__(self, snapshot: Callable[[], WatchSnapshot]) -> None:
        self.snapshot = snapshot

    def describe(self) -> list[Metric]:
        return []  # collected fresh at each scrape

    def collect(self) -> Iterator[Metric]:
        s = self.snapshot()
        yield from self._scores(s)
        yield from self._alerts(s)
        yield from self._model(s)
        yield from self._collector(s)
        last = s.last_row
        if last is not None:
            yield from host_metrics(last[2], last[1])

    @staticmethod
    def _scores(s: WatchSnapshot) -> Iterator[Metric]:
        w = s.window
        score = GaugeMetricFamily("reveal_score", "Score of the last window scored "
                                  "(detector=combined: the ensemble's)", labels=["detector"])
        thr = GaugeMetricFamily("reveal_threshold", "Threshold on each score (from the "
                                "baseline)", labels=["detector"])
        if w is not None:
            score.add_metric(["combined"], w.combined)
            thr.add_metric(["combined"], w.threshold)
            for name, value in w.scores.items():
                score.add_metric([name], value)
                thr.add_metric([name], w.thresholds[name])
        yield score
        yield thr
        yield _single(GaugeMetricFamily, "reveal_window_flagged",
                      "1 when the last window scored is flagged (after persistence)",
                      float(bool(w is not None and w.flagged)))
        yield _single(GaugeMetricFamily, "reveal_window_end_timestamp_seconds",
                      "Wall-clock end of the last window scored", s.window_end_unix or 0.0)
        yield from _singles(s, SCORING_METRICS)

    @staticmethod
    def _alerts(s: WatchSnapshot) -> Iterator[Metric]:
        active = GaugeMetricFamily("reveal_active_anomalies", "Open alert episodes by "
                                   "subsystem", labels=["subsystem"])
        for subsystem, n in sorted(s.active.items()):
            active.add_metric([subsystem], n)
        yield active
        events = CounterMetricFamily("reveal_alerts", "Alert events raised",
                                     labels=["event"])
        for kind, n in s.alert_counts.items():
            events.add_metric([kind], n)
        yield events
        sent = CounterMetricFamily("reveal_alert_sink_sent", "Events delivered",
                                   labels=["sink"])
        failed = CounterMetricFamily("reveal_alert_sink_failures", "Failed delivery "
                                     "attempts", labels=["sink"])
        dropped = CounterMetricFamily("reveal_alert_sink_dropped", "Events given up (queue "
                                      "full or retried too long)", labels=["sink"])
        queued = GaugeMetricFamily("reveal_alert_sink_queue_length", "Events waiting",
                                   labels=["sink"])
        for sink in s.sinks:
            sent.add_metric([sink.name], sink.sent)
            failed.add_metric([sink.name], sink.failed)
            dropped.add_metric([sink.name], sink.dropped)
            queued.add_metric([sink.name], sink.queued())
        yield from (sent, failed, dropped, queued)

    @staticmethod
    def _model(s: WatchSnapshot) -> Iterator[Metric]:
        yield _single(GaugeMetricFamily, "reveal_model_generation",
                      "Models learned in this state directory (0: learning the first)",
                      s.generation)
        age = GaugeMetricFamily("reveal_model_age_seconds", "Time since the model in use "
                                "was learned")
        if s.model_age_s is not None:
            age.add_metric([], max(0.0, s.model_age_s))
        yield age
        yield from _singles(s, MODEL_METRICS)
        yield from _unhealthy(s)

    @staticmethod
    def _collector(s: WatchSnapshot) -> Iterator[Metric]:
        c = s.collector or {}
        for name, text, key in (
                ("reveal_collector_samples", "Samples taken", "samples"),
                ("reveal_collector_missed_ticks", "Ticks missed (a sample not taken on "
                 "time)", "missed_ticks"),
                ("reveal_collector_dropped_samples", "Samples not stored (storage "
                 "failing)", "dropped_samples")):
            yield _single(CounterMetricFamily, name, text, getattr(c, key))
        lag = GaugeMetricFamily("reveal_collector_tick_lag_seconds", "Tick start minus its "
                                "deadline over recent ticks", labels=["quantile"])
        for q, value in c.lag_quantiles.items():
            if value == value:
                lag.add_metric([q], value)
        yield lag
        yield _single(GaugeMetricFamily, "reveal_collector_channels",
                      "Channels recorded", c.channels)
        yield _single(GaugeMetricFamily, "reveal_collector_bytes_on_disk_bytes",
                      "Size of the run being recorded", c.bytes_on_disk)
        yield _single(CounterMetricFamily, "reveal_collector_cpu_seconds",
                      "CPU time of the watch process (collection and scoring)", c.cpu_s)


def _healthy_range(low: float | None, high: float | None) -> str:
    """A healthy range as a label value: ``<= 25``, ``>= 1``, ``1..5``."""
    if low is None:
        return f"<= {high:g}"
    if high is None:
        return f">= {low:g}"
    return f"{low:g}..{high:g}"


def _unhealthy(s: WatchSnapshot) -> Iterator[Metric]:
    """The channels the model's baseline held outside their healthy range: the typical
    level (in the range's ``unit``) and the share of the baseline's windows outside."""
    labels = ["channel", "metric", "unit", "healthy"]
    level = GaugeMetricFamily(
        "reveal_baseline_unhealthy", "Typical level (median over the baseline's windows, in "
        "the unit labelled) of a channel that lay outside its healthy range through much of "
        "the baseline the model in use was learned on: a fault learned as normal",
        labels=labels)
    share = GaugeMetricFamily(
        "reveal_baseline_unhealthy_share", "Share of the baseline's windows (0-1) in which "
        "that channel lay outside its healthy range", labels=labels)
    for finding in s.unhealthy:
        values = [label_value(finding.channel), label_value(parse_channel(finding.channel)[0]),
                  finding.unit, _healthy_range(finding.min, finding.max)]
        level.add_metric(values, finding.typical)
        share.add_metric(values, finding.share)
    yield level
    yield share


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; ``:PORT`` or ``PORT`` is loopback)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise InputError(f"--listen {text!r}: expected HOST:PORT") from None
    if not 0 <= number <= 65535:
        raise InputError(f"--listen {text!r}: port out of range")
    return host, number


def serve(listen: tuple[str, int], snapshot: Callable[[], WatchSnapshot]) -> Any:
    """Start the HTTP server on ``listen``; returns the server (``shutdown()`` to stop)."""
    registry = CollectorRegistry()
    registry.register(WatchCollector(snapshot))
    ProcessCollector(registry=registry)
    host, port = listen
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); another "
                         f"process holds it? choose --listen HOST:PORT") from None
    return server
