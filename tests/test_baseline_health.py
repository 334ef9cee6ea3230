"""The baseline's own health (``reveal.analysis.baseline_health``): a channel whose level lay
outside its healthy range (the catalog's ``healthy``) through much of the baseline is
named at fit time, kept in the model file, worded in the report and said by the watch.

The check is unit-tested on constructed frames (NaNs, constants, missing channels, levels
per another metric); then on real recordings of this host: a cgroup the test owns, its
busy loop held to a tenth of a CPU by a CFS quota through the whole recording, is named
throttled; a cgroup with a quota it never reaches is not; and a real ``reveal watch``
learning over the throttled cgroup warns of it and exports the gauge.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reveal.analysis.baseline_health import UnhealthyChannel, baseline_health, window_levels
from reveal.catalog import Catalog, Healthy, MetricInfo
from reveal.cli import main
from reveal.collect.cgroup import cgroup_label, cgroup_mounts
from reveal.frame import Telemetry
from reveal.model import Reveal
from reveal.report.build import build_report
from reveal.report.schema import Report
from runs import collecting, rmdir_patiently
from synthetic import ar1_host

THROTTLED = "derived.cgroup_throttled_pct"
ROWS = 30  # samples per window (3 s of 0.1 s)


def _derived(columns: dict[str, np.ndarray], interval_s: float = 0.1) -> Telemetry:
    """A derived recording (rates and ratios as derive leaves them) of ``columns``."""
    n = len(next(iter(columns.values())))
    ts = np.arange(n, dtype=np.int64) * np.int64(round(interval_s * 1e9))
    return Telemetry("h", ts, np.column_stack(list(columns.values())), list(columns), {})


def _starts(tel: Telemetry, stride: int = 10) -> np.ndarray:
    return tel.timestamps_ns[: tel.n_samples - ROWS + 1: stride]


def _check(tel: Telemetry, **kw) -> dict[str, UnhealthyChannel]:
    return {f.channel: f for f in baseline_health(tel, _starts(tel), ROWS, **kw)}


# -- the check on constructed frames --------------------------------------------------------

def test_a_level_outside_its_range_through_the_baseline_is_named_with_its_value() -> None:
    job, ok = f"{THROTTLED}{{cgroup=/job}}", f"{THROTTLED}{{cgroup=/ok}}"
    rng = np.random.default_rng(0)
    found = _check(_derived({job: 78.0 + rng.normal(0, 2, 600), ok: np.full(600, 2.0),
                             "derived.cpu_busy_pct": np.full(600, 95.0)}))
    assert list(found) == [job]  # the healthy cgroup and a channel with no range: nothing
    finding = found[job]
    assert finding.typical == pytest.approx(78.0, abs=1.0) and finding.share == 1.0
    assert (finding.max, finding.min, finding.unit) == (25.0, None, "%")
    assert finding.windows == len(_starts(_derived({job: np.zeros(600)})))
    assert finding.message.startswith(f"unhealthy baseline: {job} (share of container "
                                      f"CPU-quota periods throttled) was 78")
    assert "(≤ 25 %) in 100 % of the baseline's time" in finding.message
    assert finding.message.endswith("a fault present during the learn is learned as normal")


def test_nan_windows_are_healthy_time_and_the_typical_level_is_over_those_with_one() -> None:
    half = np.where(np.arange(600) < 300, np.nan, 90.0)  # the cgroup exists half the time
    fifth = np.where(np.arange(600) < 480, np.nan, 90.0)
    empty = np.full(600, np.nan)
    found = _check(_derived({f"{THROTTLED}{{cgroup=a}}": half,
                             f"{THROTTLED}{{cgroup=b}}": fifth,
                             f"{THROTTLED}{{cgroup=c}}": empty}))
    assert list(found) == [f"{THROTTLED}{{cgroup=a}}"]
    a = found[f"{THROTTLED}{{cgroup=a}}"]
    assert a.typical == 90.0 and 0.45 < a.share < 0.55
    assert a.windows < len(_starts(_derived({"x": half})))


def test_a_constant_on_the_bound_is_healthy_one_past_it_is_not() -> None:
    on, past = f"{THROTTLED}{{cgroup=on}}", f"{THROTTLED}{{cgroup=past}}"
    found = _check(_derived({on: np.full(300, 25.0), past: np.full(300, 25.5)}))
    assert list(found) == [past] and found[past].typical == 25.5


def test_the_share_of_time_decides_and_the_setting_sets_it() -> None:
    level = np.where(np.arange(600) < 120, 60.0, 0.0)  # throttled the first fifth
    tel = _derived({f"{THROTTLED}{{cgroup=j}}": level})
    assert _check(tel) == {}  # a fifth of the time: below the default quarter
    (finding,) = _check(tel, share=0.1).values()
    assert finding.typical == 0.0 and 0.15 < finding.share < 0.25
    assert "was 0 % in a typical window" in finding.message
    assert _check(tel, share=None) == {} and _check(_derived({"x": level}), share=0.0) == {}


def test_missing_channels_and_a_missing_denominator_leave_nothing_to_check() -> None:
    tel = _derived({"derived.cpu_busy_pct": np.full(300, 99.0),
                    "snmp.Tcp.RetransSegs": np.full(300, 50.0)})  # no OutSegs to divide by
    names, levels = window_levels(tel, _starts(tel), ROWS)
    assert names == [] and levels.shape == (len(_starts(tel)), 0)
    assert _check(tel) == {}
    assert baseline_health(tel, np.zeros(0, dtype=np.int64), ROWS) == []


def test_a_share_of_another_metric_is_judged_only_where_that_one_has_enough() -> None:
    quiet = _derived({"snmp.Tcp.OutSegs": np.full(300, 50.0),  # below 100 segments/s
                      "snmp.Tcp.RetransSegs": np.full(300, 5.0)})
    assert _check(quiet) == {}
    names, levels = window_levels(quiet, _starts(quiet), ROWS)
    assert names == ["snmp.Tcp.RetransSegs"] and np.isnan(levels).all()
    busy = _derived({"snmp.Tcp.OutSegs{netns=a}": np.full(300, 1000.0),
                     "snmp.Tcp.RetransSegs{netns=a}": np.full(300, 20.0),
                     "snmp.Tcp.OutSegs{netns=b}": np.full(300, 1000.0),
                     "snmp.Tcp.RetransSegs{netns=b}": np.full(300, 5.0)})
    (finding,) = _check(busy).values()  # 2 % of namespace a's segments; b's 0.5 % is fine
    assert finding.channel == "snmp.Tcp.RetransSegs{netns=a}"
    assert finding.typical == pytest.approx(2.0) and finding.unit == "% of segments sent"
    assert "was 2 % of segments sent in a typical window" in finding.message


def test_a_rare_event_is_named_from_its_first_window_and_pressure_in_percent() -> None:
    oom = np.zeros(1200)
    oom[700] = 10.0  # one kill in 120 s: 10 kills/s over one 0.1 s sample
    stall = np.full(1200, 400_000.0)  # µs stalled per second: 40 % of the time
    found = _check(_derived({"vmstat.oom_kill": oom, "psi.memory.some.total": stall}))
    kill, memory = found["vmstat.oom_kill"], found["psi.memory.some.total"]
    assert kill.typical == 0.0 and 0 < kill.share < 0.05 and kill.unit == "kills/s"
    assert memory.typical == pytest.approx(40.0) and memory.unit == "% of time"
    assert list(found) == ["psi.memory.some.total", "vmstat.oom_kill"]  # worst first


def test_a_lower_bound_from_a_catalog_of_ones_own() -> None:
    catalog = Catalog([MetricInfo("link.speed", "network", "gauge", "Gbit/s",
                                  healthy=Healthy(min=10.0)),
                       MetricInfo("link.both", "network", "gauge", "ms",
                                  healthy=Healthy(min=1.0, max=5.0))])
    tel = _derived({"link.speed": np.full(300, 1.0), "link.both": np.full(300, 3.0)})
    (finding,) = _check(tel, catalog=catalog).values()
    assert (finding.channel, finding.min, finding.max) == ("link.speed", 10.0, None)
    assert "(≥ 10 Gbit/s)" in finding.message


# -- the fitted model, its file and its report ----------------------------------------------

def _throttled_baseline(seconds: float = 120.0) -> Telemetry:
    """Synthetic host telemetry plus a cgroup's CFS counters (raw, as recorded): throttled
    in about 80 % of its periods all along."""
    host = ar1_host(seconds, seed=5)
    rng = np.random.default_rng(5)
    periods = np.cumsum(np.ones(host.n_samples))
    throttled = np.cumsum(rng.random(host.n_samples) < 0.8).astype(np.float64)
    channels = [*host.channels, "cgroup.cpu.nr_periods{cgroup=job}",
                "cgroup.cpu.nr_throttled{cgroup=job}"]
    return Telemetry(host.host, host.timestamps_ns,
                     np.column_stack([host.values, periods, throttled]), channels,
                     dict(host.meta))


def test_the_model_keeps_its_findings_through_its_file_and_words_them(tmp_path) -> None:
    model = Reveal().fit(_throttled_baseline())
    (finding,) = model.fitted_.health
    assert finding.channel == f"{THROTTLED}{{cgroup=job}}" and finding.typical > 70
    assert finding.message in model.fitted_.warnings
    loaded = Reveal.load(model.save(tmp_path / "m.reveal"))
    assert loaded.fitted_.health == model.fitted_.health
    report = loaded.report(ar1_host(30, seed=6))
    assert finding.message in report.warnings
    payload = json.loads(json.dumps(report.to_dict(with_windows=False)))
    assert payload["baseline"]["unhealthy"] == [finding.to_dict()]
    assert Report.from_dict(payload).baseline["unhealthy"][0]["channel"] == finding.channel


def test_a_model_file_saved_before_the_check_loads_and_reports_none(tmp_path) -> None:
    model = Reveal().fit(ar1_host(60, seed=7))
    del model.fitted_.__dict__["health"]  # as pickled before the field existed
    loaded = Reveal.load(model.save(tmp_path / "old.reveal"))
    assert "health" not in loaded.fitted_.__dict__ and loaded.fitted_.health == ()
    analysis = loaded.score_windows(ar1_host(30, seed=8))
    assert build_report(loaded.fitted_, analysis).baseline["unhealthy"] == []


# -- real recordings of this host -----------------------------------------------------------

def _cpu_root() -> tuple[Path, str]:
    """A cgroup hierarchy with the CPU controller (v1 ``cpu``, else the v2 root) and its
    kind, or skip."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    if "cpu" in mounts:
        return Path(mounts["cpu"]), "v1"
    if "v2" in mounts and "cpu" in (Path(mounts["v2"]) / "cgroup.subtree_control").read_text():
        return Path(mounts["v2"]), "v2"
    pytest.skip("no cgroup hierarchy with the CPU controller here")


def _set_quota(path: Path, kind: str, cpus: float) -> None:
    quota = int(cpus * 100_000)
    if kind == "v2":
        (path / "cpu.max").write_text(f"{quota} 100000\n")
    else:
        (path / "cpu.cfs_period_us").write_text("100000\n")
        (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")


@pytest.fixture()
def job_cgroup() -> Iterator:
    """job(cpus, busy) makes a cgroup of its own with a CPU quota of ``cpus`` and starts a
    process in it: a busy loop, or one that wakes for a moment every 20 ms; both go away
    at the end."""
    root, kind = _cpu_root()
    made: list[tuple[Path, subprocess.Popen]] = []

    def job(cpus: float, busy: bool) -> str:
        name = f"reveal-health-{uuid.uuid4().hex[:8]}"
        path = root / name
        path.mkdir()
        code = ("while True: pass" if busy else
                "import time\nwhile True:\n    sum(range(20000))\n    time.sleep(0.02)")
        child = subprocess.Popen([sys.executable, "-c", code])
        made.append((path, child))
        _set_quota(path, kind, cpus)
        (path / "cgroup.procs").write_text(f"{child.pid}\n")
        return name

    yield job
    for path, child in made:
        child.kill()
        child.wait()
        rmdir_patiently(path)


def _recorded(out: Path, name: str, *probes: str) -> Reveal:
    """A 15 s recording of this host (``probes``, or the default ones) with the cgroup
    ``name`` recorded, and a model fitted on it."""
    args = ["--duration", "15", "--probe-option", f"cgroup.patterns={name}"]
    with collecting(out, *args, *(["--probes", ",".join(probes)] if probes else [])):
        pass
    return Reveal().fit(out)


@pytest.mark.alone  # its throttled cgroup is recorded beside no other test's load
@pytest.mark.root
def test_a_cgroup_throttled_through_a_real_recording_is_named(job_cgroup, tmp_path,
                                                              capsys) -> None:
    name = job_cgroup(0.1, busy=True)  # a busy loop held to a tenth of a CPU
    model = _recorded(tmp_path / "run", name, "cgroup", "pressure", "cpu")
    channel = f"{THROTTLED}{{cgroup={cgroup_label(name)}}}"
    found = {f.channel: f for f in model.fitted_.health}
    assert channel in found, [f.message for f in model.fitted_.health]
    finding = found[channel]
    print(finding.message)
    assert finding.typical > 25.0 and finding.share > 0.25 and finding.max == 25.0
    # reveal analyze with it as the baseline warns and keeps the finding in its JSON
    out = tmp_path / "report.json"
    run = str(tmp_path / "run")
    assert main(["analyze", run, "--baseline", run, "--json", str(out), "--quiet"]) == 0
    assert f"Warning: Unhealthy baseline: {channel}" in capsys.readouterr().out
    unhealthy = json.loads(out.read_text())["baseline"]["unhealthy"]
    assert any(u["channel"] == channel and u["typical"] > 25.0 for u in unhealthy)


@pytest.mark.root
def test_a_clean_recording_names_no_throttling_of_a_cgroup_under_its_quota(
        job_cgroup, tmp_path) -> None:
    name = job_cgroup(2.0, busy=False)  # wakes briefly every 20 ms, quota of two CPUs
    model = _recorded(tmp_path / "run", name)  # every default probe
    channel = f"{THROTTLED}{{cgroup={cgroup_label(name)}}}"
    assert channel in model.fitted_.baseline_channels  # its quota's periods were counted
    print([f.message for f in model.fitted_.health])
    assert channel not in {f.channel for f in model.fitted_.health}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.root
@pytest.mark.slow
def test_the_watch_warns_of_an_unhealthy_learn_and_exports_it(job_cgroup, tmp_path) -> None:
    name = job_cgroup(0.1, busy=True)
    port, log = _free_port(), tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(tmp_path / "state"),
             "--learn", "15s", "--allow-short-learn", "--probes", "cgroup,pressure,cpu",
             "--probe-option", f"cgroup.patterns={name}", "--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=handle)
        try:
            deadline = time.monotonic() + 90
            while "; scoring" not in log.read_text() and time.monotonic() < deadline:
                assert watch.poll() is None, log.read_text()
                time.sleep(0.5)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                          timeout=5).read().decode()
        finally:
            watch.terminate()
            watch.wait(30)
    said = log.read_text()
    channel = f"{THROTTLED}{{cgroup={cgroup_label(name)}}}"
    assert f"unhealthy baseline: {channel}" in said, said[-3000:]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = [s for s in families["reveal_baseline_unhealthy"].samples
               if s.labels["channel"] == channel]
    assert len(samples) == 1 and samples[0].value > 25.0
    assert samples[0].labels["metric"] == THROTTLED and samples[0].labels["healthy"] == "<= 25"
    (share,) = [s for s in families["reveal_baseline_unhealthy_share"].samples
                if s.labels["channel"] == channel]
    assert 0.25 < share.value <= 1.0
