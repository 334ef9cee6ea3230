"""The watch's ``/metrics``, served by the real exporter over HTTP and read back with
prometheus-client's own text parser: names, types, labels and values as Prometheus sees
them, from a typed snapshot."""

from __future__ import annotations

import os
import urllib.request

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reveal.analysis.baseline_health import UnhealthyChannel
from reveal.live.exporter import serve
from reveal.live.scorer import LiveWindow
from reveal.live.sinks import JsonLinesSink
from reveal.live.snapshot import CollectorHealth, WatchSnapshot


@pytest.fixture
def scraped(tmp_path):
    """One scrape of an exporter serving a snapshot with every part filled."""
    sink = JsonLinesSink(str(tmp_path / "alerts.jsonl"))
    sink.sent, sink.failed, sink.dropped = 3, 1, 0
    window = LiveWindow(41, 0, 3 * 10**9, 7.5, 2.0, True, True, {"zscore": 4.0},
                        {"zscore": 3.0}, ["zscore"])
    channels = ["cpu.user", "cpu.idle", "mem.MemAvailable", "disk.sectors_read{dev=vda}",
                "net.rx_bytes{iface=eth0}"]
    row = np.array([1000.0, 5000.0, 8 * 2.0**30, 2048.0, 12345.0])
    snapshot = WatchSnapshot(
        window=window, window_end_unix=1.8e9, windows_scored=42, windows_flagged=5,
        scoring_calls=9, scoring_calls_early=2, scoring_s=0.03, active={"cpu": 1},
        alert_counts={"firing": 1}, sinks=[sink], generation=2, model_age_s=120.0,
        model_channels=700, model_windows=598, model_windows_left_out=63,
        unmodelled=["a", "b"],
        collector=CollectorHealth(samples=600, missed_ticks=1, channels=920,
                                  lag_quantiles={"0.5": 0.001, "0.99": 0.004, "1": 0.02}),
        last_row=(0, row, channels))
    try:
        return _scrape(snapshot)
    finally:
        sink.close()


def _value(family, **labels) -> float:
    return next(s.value for s in family.samples
                if all(s.labels.get(k) == v for k, v in labels.items())
                and not s.name.endswith("_created"))


def test_scores_and_counts_parse_with_their_types(scraped):
    assert scraped["reveal_score"].type == "gauge"
    assert _value(scraped["reveal_score"], detector="combined") == 7.5
    assert _value(scraped["reveal_score"], detector="zscore") == 4.0
    assert _value(scraped["reveal_threshold"], detector="zscore") == 3.0
    assert _value(scraped["reveal_window_flagged"]) == 1.0
    # counters: the parser drops the _total suffix from the family name
    assert scraped["reveal_windows_scored"].type == "counter"
    assert _value(scraped["reveal_windows_scored"]) == 42
    assert _value(scraped["reveal_scoring_calls_early"]) == 2
    assert _value(scraped["reveal_active_anomalies"], subsystem="cpu") == 1
    assert _value(scraped["reveal_alerts"], event="firing") == 1
    assert _value(scraped["reveal_alert_sink_sent"], sink="jsonl") == 3
    assert _value(scraped["reveal_alert_sink_failures"], sink="jsonl") == 1
    assert _value(scraped["reveal_model_generation"]) == 2
    assert _value(scraped["reveal_unmodelled_channels"]) == 2
    assert _value(scraped["reveal_model_learn_windows"]) == 598
    assert _value(scraped["reveal_model_learn_windows_left_out"]) == 63
    assert _value(scraped["reveal_collector_tick_lag_seconds"], quantile="0.99") == 0.004
    assert _value(scraped["reveal_collector_channels"]) == 920


def test_host_channels_are_named_the_prometheus_way(scraped):
    cpu = scraped["reveal_host_cpu_seconds"]
    assert cpu.type == "counter"
    assert _value(cpu, mode="user") == pytest.approx(1000.0 / os.sysconf("SC_CLK_TCK"))
    assert _value(scraped["reveal_host_memory_available_bytes"]) == 8 * 2.0**30
    assert _value(scraped["reveal_host_disk_read_bytes"], device="vda") == 2048 * 512
    assert _value(scraped["reveal_host_network_receive_bytes"], device="eth0") == 12345
    assert "process_cpu_seconds" in scraped  # the process collector beside ours


def _scrape(snapshot: WatchSnapshot) -> dict:
    server = serve(("127.0.0.1", 0), lambda: snapshot)
    try:
        port = server.server_port
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        server.shutdown()
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def test_an_unhealthy_baseline_is_a_gauge_with_tenant_text_made_safe():
    hostile = 'derived.cgroup_throttled_pct{cgroup=job"\n\u202eevil\\}'
    findings = [
        UnhealthyChannel("derived.cgroup_throttled_pct{cgroup=/job}", 78.0, 0.96, 60, 25.0,
                         None, "%", "unhealthy baseline: ..."),
        UnhealthyChannel(hostile, 40.0, 0.5, 30, 25.0, None, "%", "unhealthy baseline: ..."),
        UnhealthyChannel("link.speed", 1.0, 1.0, 60, None, 10.0, "Gbit/s", "...")]
    scraped = _scrape(WatchSnapshot(unhealthy=findings))
    level, share = scraped["reveal_baseline_unhealthy"], scraped["reveal_baseline_unhealthy_share"]
    assert level.type == "gauge" and share.type == "gauge"
    job = {"channel": "derived.cgroup_throttled_pct{cgroup=/job}",
           "metric": "derived.cgroup_throttled_pct", "unit": "%", "healthy": "<= 25"}
    assert _value(level, **job) == 78.0 and _value(share, **job) == 0.96
    assert _value(level, channel="link.speed", healthy=">= 10", unit="Gbit/s") == 1.0
    (odd,) = [s for s in level.samples if s.labels["channel"].endswith("\\}")]
    assert odd.value == 40.0 and odd.labels["channel"].isprintable()
    assert odd.labels["channel"] == 'derived.cgroup_throttled_pct{cgroup=job"??evil\\}'
    # a healthy learn: the families are there, with no sample
    healthy = _scrape(WatchSnapshot())
    assert healthy["reveal_baseline_unhealthy"].samples == []
