"""Reading a fleet from a real Prometheus server (Debian's ``prometheus``) started by the
test on its own port, over a TSDB made by ``promtool tsdb create-blocks-from openmetrics``
from synthetic node_exporter and ``reveal watch`` series of several hosts."""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pytest

from reveal.errors import RevealError
from reveal.store.node_exporter_map import SECTOR_BYTES, TICK_HZ, map_series
from reveal.store.prometheus_source import chunks, parse_time, read_fleet, step_grid

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus and promtool are not installed (apt-get install prometheus)")

HOSTS = ("gpu-a:9100", "gpu-b:9100", "gpu-c:9100")
N = 900  # samples per series, one a second


@dataclass
class Written:
    url: str
    start: int  # Unix seconds of the first sample
    series: dict[tuple[str, str], np.ndarray]  # (host, series text) -> values written


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _synthetic(start: int) -> tuple[str, dict[tuple[str, str], np.ndarray]]:
    """OpenMetrics text of three hosts (node_exporter names; the last also ``reveal_host_*``
    names under another label) and the values written per (host, series)."""
    rng = np.random.default_rng(7)
    times = start + np.arange(N)
    written: dict[tuple[str, str], np.ndarray] = {}
    lines: list[str] = []

    def add(host: str, name: str, labels: str, values: np.ndarray) -> None:
        key = f'{name}{{instance="{host}",job="node",rack="r1"{labels}}}'
        written[(host, f"{name}{{{labels.lstrip(',')}}}")] = values
        lines.extend(f"{key} {v!r} {t}" for v, t in zip(values.tolist(), times.tolist(),
                                                          strict=True))

    for h, host in enumerate(HOSTS):
        for cpu in ("0", "1"):
            for mode in ("user", "system", "idle"):
                add(host, "node_cpu_seconds_total", f',cpu="{cpu}",mode="{mode}"',
                    np.cumsum(rng.uniform(0.1, 0.5, N)).round(2) + 1000 * h)
        add(host, "node_memory_MemAvailable_bytes", "",
            (8e9 + rng.normal(0, 1e7, N)).round())
        add(host, "node_memory_HugePages_Total", "", np.full(N, 512.0 * (h == 1)))
        add(host, "node_network_receive_bytes_total", ',device="eth0"',
            np.cumsum(rng.integers(1000, 9000, N)).astype(float))
        add(host, "node_disk_read_bytes_total", ',device="vda"',
            np.cumsum(rng.integers(0, 64, N) * 512).astype(float))
        add(host, "node_pressure_cpu_waiting_seconds_total", "",
            np.cumsum(rng.uniform(0, 0.01, N)).round(6))
        add(host, "custom_temperature_celsius", "", rng.normal(60, 2, N).round(3))
        add(host, "custom_requests_total", "", np.cumsum(np.ones(N)))
    last = HOSTS[-1]
    for mode in ("user", "idle"):
        add(last, "reveal_host_cpu_seconds_total", f',mode="{mode}"',
            np.cumsum(rng.uniform(0.2, 0.9, N)).round(2))
    add(last, "reveal_host_memory_available_bytes", "", np.full(N, 7e9))
    lines.sort(key=lambda line: line.split(" ", 1)[0])  # one series after another
    return "\n".join(lines) + "\n# EOF\n", written


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    root = tmp_path_factory.mktemp("prometheus")
    start = int(time.time()) // 60 * 60 - 3 * 3600  # recent: inside any retention
    text, written = _synthetic(start)
    (root / "fleet.om").write_text(text)
    data = root / "data"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                    str(root / "fleet.om"), str(data)], check=True, capture_output=True)
    (root / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n")
    port = _free_port()
    log = open(root / "prometheus.log", "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(["prometheus", f"--config.file={root / 'prometheus.yml'}",
                             f"--storage.tsdb.path={data}",
                             "--storage.tsdb.retention.time=100y",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start: {(root / 'prometheus.log').read_text()}")
            time.sleep(0.2)
        yield Written(url, start, written)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _read(server: Written, **kwargs: object) -> dict[str, object]:
    end = server.start + N - 1
    hosts = read_fleet(server.url, ['{job="node"}'], server.start, end, 1.0, **kwargs)
    return {h.host: h for h in hosts}


def test_fleet_read_back_equals_what_was_written(server: Written) -> None:
    hosts = _read(server)
    assert list(hosts) == sorted(HOSTS)
    grid = (server.start + np.arange(N)) * 1_000_000_000
    for name, tel in hosts.items():
        assert np.array_equal(tel.timestamps_ns, grid)
        assert tel.wall_offset_ns == 0 and tel.interval_s == 1.0
        assert tel.meta["source"] == "prometheus"
        w = server.series
        for cpu in ("0", "1"):
            got = tel.column(f"cpu.user{{cpu={cpu}}}")
            sent = w[(name, f'node_cpu_seconds_total{{cpu="{cpu}",mode="user"}}')]
            np.testing.assert_allclose(got, sent * TICK_HZ, rtol=1e-12)
        both = sum(w[(name, f'node_cpu_seconds_total{{cpu="{c}",mode="system"}}')]
                   for c in ("0", "1"))
        np.testing.assert_allclose(tel.column("cpu.system"), both * TICK_HZ, rtol=1e-12)
        np.testing.assert_array_equal(tel.column("mem.MemAvailable"),
                                      w[(name, "node_memory_MemAvailable_bytes{}")])
        np.testing.assert_array_equal(tel.column("mem.HugePages_Total"),
                                      w[(name, "node_memory_HugePages_Total{}")])
        np.testing.assert_array_equal(tel.column("net.rx_bytes{iface=eth0}"),
                                      w[(name, 'node_network_receive_bytes_total'
                                               '{device="eth0"}')])
        np.testing.assert_array_equal(tel.column("disk.sectors_read{dev=vda}"),
                                      w[(name, 'node_disk_read_bytes_total{device="vda"}')]
                                      / SECTOR_BYTES)
        np.testing.assert_allclose(tel.column("psi.cpu.some.total"),
                                   w[(name, "node_pressure_cpu_waiting_seconds_total{}")]
                                   * 1e6, rtol=1e-12)
        # an unknown gauge keeps its name (labels but host and job); an unknown counter
        # cannot be rated by the catalog and is left out, and said so
        np.testing.assert_array_equal(tel.column("custom_temperature_celsius{rack=r1}"),
                                      w[(name, "custom_temperature_celsius{}")])
        assert not any(c.startswith("custom_requests") for c in tel.channels)
        assert tel.meta["prometheus"]["dropped"]["unrated_counters"] >= 1
    # the host whose HugePages differ is the one written so
    assert hosts["gpu-b:9100"].column("mem.HugePages_Total")[0] == 512
    assert hosts["gpu-a:9100"].column("mem.HugePages_Total")[0] == 0


def test_reveal_exporter_names_are_read_natively(server: Written) -> None:
    tel = _read(server)[HOSTS[-1]]
    series = server.series
    # a channel read directly (reveal_host_cpu_seconds_total{mode}) wins over the sum of
    # node_exporter's per-CPU series
    sent = series[(HOSTS[-1], 'reveal_host_cpu_seconds_total{mode="idle"}')]
    np.testing.assert_allclose(tel.column("cpu.idle"), sent * TICK_HZ, rtol=1e-12)
    np.testing.assert_allclose(tel.column("cpu.idle{cpu=0}"),
                               series[(HOSTS[-1], 'node_cpu_seconds_total{cpu="0",mode="idle"}')]
                               * TICK_HZ, rtol=1e-12)
    # two names for one channel: one is kept whole, the other counted, never mixed
    assert tel.meta["prometheus"]["dropped"]["duplicates"] == 1
    available = tel.column("mem.MemAvailable")
    assert (np.array_equal(available, series[(HOSTS[-1], "node_memory_MemAvailable_bytes{}")])
            or np.array_equal(available,
                              series[(HOSTS[-1], "reveal_host_memory_available_bytes{}")]))


def test_a_query_split_into_time_chunks_gives_the_same_fleet(server: Written) -> None:
    whole = _read(server)
    split = _read(server, max_points=97)
    assert whole.keys() == split.keys()
    assert split[HOSTS[0]].meta["prometheus"]["queries"] == math.ceil(N / 97)
    for name in whole:
        a, b = whole[name], split[name]
        assert a.channels == b.channels
        assert np.array_equal(a.timestamps_ns, b.timestamps_ns)
        assert np.array_equal(a.values, b.values, equal_nan=True)


def test_hosts_grouped_by_a_chosen_label(server: Written) -> None:
    hosts = read_fleet(server.url, ["node_memory_MemAvailable_bytes"], server.start,
                       server.start + 59, 1.0, host_label="rack")
    assert [h.host for h in hosts] == ["r1"]
    # three instances now land on one host: the same channel from each is a duplicate
    assert hosts[0].meta["prometheus"]["dropped"]["duplicates"] == 2


def test_a_coarser_step_samples_the_grid(server: Written) -> None:
    hosts = read_fleet(server.url, ["node_memory_MemAvailable_bytes"], server.start,
                       server.start + N - 1, 10.0)
    tel = {h.host: h for h in hosts}[HOSTS[0]]
    assert np.array_equal(np.diff(tel.timestamps_ns), np.full(len(tel.timestamps_ns) - 1,
                                                               10_000_000_000))
    sent = server.series[(HOSTS[0], "node_memory_MemAvailable_bytes{}")]
    np.testing.assert_array_equal(tel.column("mem.MemAvailable"), sent[::10])


def _one_line(exc: pytest.ExceptionInfo[RevealError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_unreachable_server_is_one_line() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(RevealError) as exc:
        read_fleet(url, ["up"], "-10m", "now", 15)
    text = _one_line(exc)
    assert url in text and "unreachable" in text


def test_bad_selector_gives_prometheus_reason(server: Written) -> None:
    with pytest.raises(RevealError) as exc:
        read_fleet(server.url, ['{job="node"'], server.start, server.start + 10, 1.0)
    text = _one_line(exc)
    assert server.url in text and "parse error" in text and "HTTP 400" in text


def test_no_series_matched_names_selector_and_range(server: Written) -> None:
    with pytest.raises(RevealError) as exc:
        read_fleet(server.url, ['{job="nobody"}'], server.start, server.start + 10, 1.0)
    text = _one_line(exc)
    assert 'job="nobody"' in text and server.url in text and "time range" in text


def test_too_many_points_in_one_query_is_refused_by_the_server(server: Written) -> None:
    # our chunking keeps requests under the limit; forced past it, the server's refusal
    # comes back as one line
    with pytest.raises(RevealError) as exc:
        read_fleet(server.url, ['{job="node"}'], server.start, server.start + 20_000, 1.0,
                   max_points=20_001)
    assert "11,000" in _one_line(exc)


def test_time_parsing() -> None:
    now = 1_800_000_000.0
    assert parse_time("2027-01-15T08:00:00Z") == datetime(2027, 1, 15, 8,
                                                         tzinfo=UTC).timestamp()
    assert parse_time("2027-01-15T09:00:00+01:00") == parse_time("2027-01-15T08:00:00Z")
    assert parse_time("1800000000.5") == 1_800_000_000.5
    assert parse_time("-1h", now=now) == now - 3600
    assert parse_time("now-30m", now=now) == now - 1800
    assert parse_time("now", now=now) == now
    for bad in ("yesterday", "2027-01-15T08:00:00", "-1y", "nan"):
        with pytest.raises(RevealError):
            parse_time(bad)


def test_chunks_cover_the_grid_once() -> None:
    grid = step_grid(100.0, 100.0 + 25 * 15, 15.0)
    pieces = chunks(100.0, 100.0 + 25 * 15, 15.0, max_points=7)
    covered = np.concatenate([step_grid(lo, hi, 15.0) for lo, hi in pieces])
    assert np.array_equal(covered, grid)
    assert all(len(step_grid(lo, hi, 15.0)) <= 7 for lo, hi in pieces)


def test_every_exported_host_channel_maps_back_to_its_source() -> None:
    from reveal.live.exporter import HOST_CHANNELS

    for name, _, _, source, label, scale in HOST_CHANNELS:
        labels = {"mode": "user"} if "{mode}" in source else {}
        if label is not None:
            labels[label[1]] = "x"
        mapped = map_series(name, labels)
        assert mapped is not None, name
        assert mapped.metric == source.replace("{mode}", "user")
        assert math.isclose(mapped.scale * scale, 1.0, rel_tol=1e-9), name
        if label is not None:
            assert mapped.labels == {label[0]: "x"}


def test_node_exporter_names_map_to_catalog_channels() -> None:
    from reveal.catalog import default_catalog

    catalog = default_catalog()
    cases = {
        ("node_memory_HugePages_Free", ()): "mem.HugePages_Free",
        ("node_network_transmit_drop_total", (("device", "eth0"),)): "net.tx_drop",
        ("node_disk_io_time_seconds_total", (("device", "nvme0n1"),)): "disk.time_io_ms",
        ("node_pressure_memory_stalled_seconds_total", ()): "psi.memory.full.total",
        ("node_netstat_Tcp_RetransSegs", ()): "snmp.Tcp.RetransSegs",
        ("node_netstat_TcpExt_TCPTimeouts", ()): "netstat.TcpExt.TCPTimeouts",
        ("node_vmstat_pgmajfault", ()): "vmstat.pgmajfault",
        ("node_load1", ()): "loadavg.load1",
    }
    for (name, labels), metric in cases.items():
        mapped = map_series(name, dict(labels))
        assert mapped is not None and mapped.metric == metric, name
        assert metric in catalog, metric
    # a CPU mode the catalog has no channel for is left out
    assert map_series("node_cpu_seconds_total", {"cpu": "0", "mode": "bogus"}) is None


def test_untrusted_label_values_stay_inside_the_label() -> None:
    mapped = map_series("node_network_receive_bytes_total", {"device": "eth0,evil=1}"})
    assert mapped is not None
    from reveal.frame import format_channel, parse_channel

    metric, labels = parse_channel(format_channel(mapped.metric, mapped.labels))
    assert metric == "net.rx_bytes" and list(labels) == ["iface"]
