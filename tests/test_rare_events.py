"""Rare events: an error or fault count judged by how rare it was in the baseline."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.analysis.rare_events import is_rare_event, least_counts
from reveal.frame import Telemetry
from reveal.model import Reveal, report_run

S = 1_000_000_000


def _host(seed: int, seconds: float, kills_at: tuple[float, ...] = (),
          timeouts_per_s: float = 0.3, burst: tuple[float, float, float] | None = None,
          ) -> Telemetry:
    """A host at 10 samples/s: CPU ticks, available memory, the OOM-kill counter and TCP
    retransmission timeouts at ``timeouts_per_s`` (``burst``: from, to, extra per s)."""
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    t = np.arange(n) * 0.1
    ticks = np.cumsum((40 + rng.normal(0, 2, n)) / 10.0)
    available = 8e9 + rng.normal(0, 1e6, n)
    kills = np.zeros(n)
    for at in kills_at:
        kills[t >= at] += 1
    timeouts = np.cumsum(rng.poisson(timeouts_per_s / 10, n)).astype(float)
    if burst is not None:
        start, end, extra = burst
        timeouts += np.cumsum(((t >= start) & (t < end)) * rng.poisson(extra / 10, n))
    ts = (np.arange(n) * 0.1 * S).astype(np.int64) + 100 * S
    return Telemetry("host", ts, np.column_stack([ticks, available, kills, timeouts]),
                     ["cpu.user", "mem.MemAvailable", "vmstat.oom_kill",
                      "netstat.TcpExt.TCPTimeouts"],
                     {"interval_s": 0.1, "n_cpus": 2, "mem_total_bytes": 16e9})


@pytest.fixture(scope="module")
def baseline() -> Telemetry:
    return _host(1, 600)


def _flagged_at(report) -> np.ndarray:  # type: ignore[no-untyped-def]
    start = (np.asarray(report.windows.start_ns) - 100 * S) / S
    return start[np.asarray(report.windows.flagged, dtype=bool)]


def test_which_channels_count_rare_events() -> None:
    assert is_rare_event("vmstat.oom_kill")
    assert is_rare_event("netstat.TcpExt.TCPTimeouts")
    assert is_rare_event("cgroup.memory.events.oom_kill")
    assert not is_rare_event("vmstat.pgmajfault")  # work done: a page read from disk
    assert not is_rare_event("snmp.Tcp.RetransSegs")  # a sign of its own, with its tail
    assert is_rare_event("net.rx_drop")
    assert not is_rare_event("cpu.user")
    # the ordinary life of a networked host (catalog rare = false): judged by cost
    for metric in ("snmp.Tcp.OutRsts", "snmp.Tcp.AttemptFails", "snmp.Udp.NoPorts",
                   "netstat.TcpExt.TCPAbortOnClose", "cgroup.memory.stat.pgmajfault"):
        assert not is_rare_event(metric), metric
    assert is_rare_event("netstat.TcpExt.ListenDrops")
    assert not is_rare_event("softnet.time_squeeze")  # a side effect of the traffic


def test_the_least_count_is_past_the_envelope_and_the_count_model() -> None:
    never, poisson, bursty = least_counts([(0.0, 0.0, 0.0), (0.9, 0.9, 5.0),
                                           (0.9, 9.0, 30.0)], 1.0, 1e-6)
    assert never == 1.0  # one event where the baseline had none
    assert 9.0 <= poisson <= 12.0  # Poisson(0.9) reaches 9 with a chance below 1e-6
    assert bursty > 30.0  # past the baseline's own largest burst...
    assert bursty > poisson  # ...and the over-dispersed law's tail
    assert least_counts([(0.0, 0.0, 0.0)], 3.0, 1e-6)[0] == 3.0  # the floor holds


def test_one_oom_kill_on_a_host_that_never_had_one_is_flagged_and_named(
        baseline: Telemetry) -> None:
    report = report_run(_host(3, 120, kills_at=(60.0,)), baseline)
    at = _flagged_at(report)
    assert at.size and np.all((at > 55.0) & (at <= 60.0)), at  # windows that hold it
    first = report.anomalies[0]
    assert first.reasons[0].channel == "vmstat.oom_kill"
    assert first.reasons[0].subsystem == "memory"
    assert first.claim.startswith("Out-of-memory kills went from none to 1")


def test_a_burst_of_timeouts_past_the_baseline_is_flagged_clean_runs_are_not(
        baseline: Telemetry) -> None:
    burst = report_run(_host(4, 120, burst=(40.0, 70.0, 3.0)), baseline)
    at = _flagged_at(burst)
    assert at.size >= 5 and np.all((at > 37.0) & (at < 70.0)), at
    assert burst.anomalies[0].reasons[0].channel == "netstat.TcpExt.TCPTimeouts"
    for seed in (5, 6, 7):  # the baseline's own rate: nothing
        assert _flagged_at(report_run(_host(seed, 300), baseline)).size == 0


def test_the_setting_turns_it_off_and_a_model_from_before_scores_as_before(
        baseline: Telemetry) -> None:
    run = _host(3, 120, kills_at=(60.0,))
    off = Reveal(overrides={"detect.rare_events": False}).fit(baseline).report(run)
    assert _flagged_at(off).size == 0
    model = Reveal().fit(baseline)
    model.scoring_fitted().event_envelopes = None  # as a model saved before it
    assert _flagged_at(model.report(run)).size == 0


@pytest.mark.parametrize(("setting", "value"), [("detect.rare_event_p", 2.0),
                                                ("detect.rare_event_p", 0.0),
                                                ("detect.rare_event_least", 0.0),
                                                ("detect.lasting_s", -1.0),
                                                ("detect.lasting_min_spans", 0),
                                                ("detect.settle_s", -5.0)])
def test_a_setting_of_the_decision_that_means_nothing_is_refused_by_name(
        baseline: Telemetry, setting: str, value: float) -> None:
    from reveal.errors import InputError

    with pytest.raises(InputError, match=setting.replace(".", r"\.")):
        Reveal(overrides={setting: value}).fit(baseline)
