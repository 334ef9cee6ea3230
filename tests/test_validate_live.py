"""``reveal validate --live``: faults against a running ``reveal watch``, scored on the
alerts its webhook receives — first the scoring on built episodes and alerts, then the
quick suite end to end (root: the collector's probes and the faults' cleanup)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from reveal.cli import build_parser, main
from reveal.commands.validate import suite_options
from reveal.errors import RevealError
from reveal.inject import processes
from reveal.inject.alertmanager import LocalAlertmanager, find_alertmanager
from reveal.inject.groundtruth import Episode, load_episodes
from reveal.inject.live_suite import (
    Alert,
    CleanSpan,
    LiveScenario,
    Receiver,
    ThroughLearn,
    from_alertmanager,
    met,
    render_live_markdown,
    score_live,
    unhealthy_channels,
)

S = 1_000_000_000


def _episode(start_s: float, end_s: float, kind: str = "cpu_contention",
             subsystem: str = "cpu") -> Episode:
    return Episode(int(start_s * S), int(end_s * S), kind, subsystem, "high", {})


def test_alerts_are_matched_to_faults_timed_from_the_fault_start_and_the_rest_counted_false(
        ) -> None:
    episodes = [_episode(100, 110), _episode(200, 208, "disk_burst", "storage"),
                _episode(300, 310)]
    alerts = [Alert(int(103.5 * S), "firing", "a1", "cpu", "CPU busy rose to 98 %"),
              Alert(int(120 * S), "resolved", "a1", "cpu", ""),
              Alert(int(212 * S), "firing", "a2", "memory", "dirty pages rose"),  # in settle
              Alert(int(250 * S), "firing", "a3", "network", "nothing was injected"),
              Alert(int(400 * S), "update", "a4", "cpu", "")]  # no fault, not a new alert
    scenario = LiveScenario("single", "torch_train", episodes, alerts, 60 * S, 460 * S)
    result = score_live([scenario], settle_s=10.0)
    first, second, third = result["episodes"]
    assert first["detected"] and first["alert_s"] == pytest.approx(3.5)
    assert first["attribution_ok"]
    assert second["detected"] and second["alert_s"] == pytest.approx(12.0)
    assert not second["attribution_ok"] and second["alerted_subsystem"] == "memory"
    assert not third["detected"] and third["alert_s"] is None
    total = result["total"]
    assert (total["episodes"], total["detected"], total["attributed_ok"]) == (3, 2, 1)
    assert total["median_alert_s"] == pytest.approx(7.75)
    assert [a["id"] for a in result["false_alerts"]] == ["a3"]
    clean_s = 400 - (20 + 18 + 20)  # scored span minus each fault and its settle
    assert total["clean_s"] == pytest.approx(clean_s)
    assert total["false_alerts_per_hour"] == pytest.approx(3600 / clean_s)
    rows = {(r["kind"], r["intensity"]): r for r in result["rows"]}
    assert rows[("cpu_contention", "high")]["episodes"] == 2


def test_a_faults_aftermath_counts_the_episodes_after_its_settle_and_what_stayed_open(
        ) -> None:
    """Fault 1 settles (its alert resolves) but one more episode opens after its settle and
    resolves: one aftermath episode, settled. Fault 2's aftermath opens twice, the second
    still open when fault 3 begins: two episodes, unsettled. Fault 3 leaves nothing."""
    episodes = [_episode(100, 110), _episode(200, 208), _episode(300, 310)]
    alerts = [Alert(int(103 * S), "firing", "a1", "cpu", "CPU busy rose"),
              Alert(int(115 * S), "resolved", "a1", "cpu", ""),
              Alert(int(140 * S), "firing", "a2", "memory", "memory used rose to 4.85 %"),
              Alert(int(150 * S), "resolved", "a2", "memory", ""),
              Alert(int(203 * S), "firing", "b1", "cpu", ""),
              Alert(int(230 * S), "firing", "b2", "memory", ""),
              Alert(int(240 * S), "resolved", "b2", "memory", ""),
              Alert(int(260 * S), "firing", "b3", "memory", "residue"),
              Alert(int(305 * S), "update", "b3", "cpu", ""),
              Alert(int(330 * S), "resolved", "b3", "cpu", ""),
              Alert(int(330 * S), "resolved", "b1", "cpu", "")]
    scenario = LiveScenario("single", "torch_train", episodes, alerts, 60 * S, 400 * S)
    result = score_live([scenario], settle_s=10.0)
    first, second, third = result["episodes"]
    assert first["aftermath_alerts"] == 1 and first["open_at_next_s"] is None
    assert first["aftermath_claims"] == ["memory used rose to 4.85 %"]
    assert second["aftermath_alerts"] == 2
    assert second["open_at_next_s"] == pytest.approx(0.0)  # b1 never resolved before 300 s
    assert third["aftermath_alerts"] == 0 and third["open_at_next_s"] is None
    total = result["total"]
    assert total["aftermath_alerts_max"] == 2 and total["unsettled"] == 1
    assert met(total)["aftermath"] is False
    calm = score_live([LiveScenario("single", "torch_train", episodes[:1], alerts[:2],
                                    60 * S, 200 * S)], settle_s=10.0)["total"]
    assert met(calm)["aftermath"] is True


def test_how_long_the_alerts_held_each_fault_and_how_soon_they_resolved_after() -> None:
    """Fault 1 (100–110 s): its alert fires at 103 s and resolves at 115 s, 70 % of the
    fault held, resolved 5 s after it. Fault 2 (200–208 s): b1 fires at 203 s and is still
    open when fault 3 begins, 62.5 %, not resolved. Fault 3 (300–310 s): b1 and b3, both
    opened before it, hold all of it and resolve at 330 s, 20 s after it. Events other
    than firing and resolved change nothing."""
    episodes = [_episode(100, 110), _episode(200, 208), _episode(300, 310)]
    alerts = [Alert(int(103 * S), "firing", "a1", "cpu", ""),
              Alert(int(115 * S), "resolved", "a1", "cpu", ""),
              Alert(int(203 * S), "firing", "b1", "cpu", ""),
              Alert(int(260 * S), "firing", "b3", "memory", ""),
              Alert(int(305 * S), "update", "b3", "cpu", ""),
              Alert(int(330 * S), "resolved", "b3", "cpu", ""),
              Alert(int(330 * S), "resolved", "b1", "cpu", "")]
    result = score_live([LiveScenario("single", "torch_train", episodes, alerts, 60 * S,
                                      400 * S)], settle_s=10.0)
    first, second, third = result["episodes"]
    assert first["firing_share"] == pytest.approx(0.7)
    assert first["resolved_after_s"] == pytest.approx(5.0)
    assert second["firing_share"] == pytest.approx(0.625)
    assert second["resolved_after_s"] is None
    assert third["firing_share"] == pytest.approx(1.0)
    assert third["resolved_after_s"] == pytest.approx(20.0)
    total = result["total"]
    assert total["mean_firing_share"] == pytest.approx((0.7 + 0.625 + 1.0) / 3)
    assert total["held_90"] == pytest.approx(1 / 3)
    assert total["max_resolved_after_s"] is None  # fault 2's alert outlasted it
    quiet = score_live([LiveScenario("single", "torch_train", episodes[:1], alerts[:2],
                                     60 * S, 200 * S)], settle_s=10.0)
    assert quiet["total"]["max_resolved_after_s"] == pytest.approx(5.0)
    missed = score_live([LiveScenario("single", "torch_train", episodes[:1], [], 60 * S,
                                      200 * S)], settle_s=10.0)["episodes"][0]
    assert missed["firing_share"] == 0.0 and missed["resolved_after_s"] == 0.0


def test_the_clean_span_counts_its_own_alert_episodes_and_the_watch_memory() -> None:
    alerts = [Alert(int(70 * S), "firing", "c1", "cpu", "CPU busy rose to <b>90 %</b>"),
              Alert(int(80 * S), "resolved", "c1", "cpu", ""),
              Alert(int(90 * S), "update", "c1", "cpu", ""),
              Alert(int(450 * S), "firing", "c2", "storage", "after the span")]
    mib = 2**20
    rss = [400 * mib] + [280 * mib] * 30 + [300 * mib, 285 * mib]  # the fit's memory first
    clean = CleanSpan(60 * S, 380 * S, rss)
    scenario = LiveScenario("single", "torch_train", [_episode(400, 410)], alerts, 60 * S,
                            500 * S, clean=clean)
    span = score_live([scenario], settle_s=10.0)["clean_span"]
    assert span["seconds"] == pytest.approx(320.0)
    assert span["alert_episodes"] == 1 and span["alerts"][0]["id"] == "c1"
    assert span["alerts"][0]["since_start_s"] == pytest.approx(10.0)
    r = span["rss_bytes"]
    assert r["growth"] == -115 * mib and r["max"] == 400 * mib
    assert r["settled_start"] == 280 * mib and r["settled_growth"] == 5 * mib
    assert r["settled_max"] == 300 * mib
    result = {"host": "h", "started": "t", "elapsed_s": 1.0, "skipped": [],
              "settings": {"baseline_s": 600.0, "settle_s": 10.0},
              "summary": score_live([scenario], settle_s=10.0),
              "met": {k: None for k in ("recall", "median_alert_s", "p95_alert_s",
                                        "attribution_accuracy")}}
    text = render_live_markdown(result)
    assert "5.3 min of the reference workload with no fault" in text
    assert "**1 alert episode(s)**" in text and "growth since 5 min: +5.0 MiB" in text
    assert "<b>" not in text  # a claim is escaped wherever shown


@pytest.mark.parametrize("argv", [["--live", "--reanalyse", "."], ["--score-every", "5"],
                                  ["--live", "--score-every", "0"],
                                  ["--clean-seconds", "60"], ["--via-alertmanager"],
                                  ["--benign", "--live", "--via-alertmanager"],
                                  ["--through-learn", "cgroup_throttle"],
                                  ["--live", "--through-learn", "writeback_storm"],
                                  ["--live", "--through-learn", "cron_burst"],
                                  ["--live", "--through-learn", "cgroup_throttle:mid"]])
def test_live_option_errors_are_one_line(argv: list[str], tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", *argv, "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--live" in err[0] or "--score-every" in err[0]
                              or "--through-learn" in err[0]), err


def test_alertmanagers_notifications_are_heard_as_the_watchs_own_events() -> None:
    """A group's notifications repeat the alerts already heard: only an episode's first
    firing and its resolution are kept, with the opening subsystem and the claim."""
    def note(*alerts: tuple[str, str]) -> dict:
        return {"status": "firing", "alerts": [
            {"status": status, "labels": {"episode": episode, "subsystem": "cpu"},
             "annotations": {"claim": f"claim of {episode}"}} for episode, status in alerts]}

    heard: set[str] = set()
    first = from_alertmanager(note(("e1", "firing")), 1, heard)
    assert [(a.event, a.id, a.subsystem, a.claim) for a in first] == [
        ("firing", "e1", "cpu", "claim of e1")]
    again = from_alertmanager(note(("e1", "firing"), ("e2", "firing")), 2, heard)
    assert [(a.event, a.id) for a in again] == [("firing", "e2")]  # e1 heard already
    assert [(a.event, a.id, a.received_ns) for a in from_alertmanager(
        note(("e1", "resolved"), ("e2", "firing")), 3, heard)] == [("resolved", "e1", 3)]
    assert from_alertmanager(note(("e1", "resolved")), 4, heard) == []  # resolved once
    assert heard == {"e2"} and from_alertmanager({}, 5, heard) == []


@pytest.mark.skipif(find_alertmanager() is None,
                    reason="needs the Debian package prometheus-alertmanager")
def test_an_alert_the_watch_sends_reaches_the_suite_through_a_real_alertmanager() -> None:
    """``--via-alertmanager``'s path with the real parts: the watch's Alertmanager sink
    posts an episode to a real Alertmanager started with the suite's route, which notifies
    the suite's webhook once when it fires and once when it resolves."""
    from reveal.live.alerts import iso
    from reveal.live.sinks import AlertmanagerSink

    receiver = Receiver()
    manager = None
    sink = None
    try:
        manager = LocalAlertmanager(receiver.alertmanager_url)
        sink = AlertmanagerSink.open(manager.url)
        event = {"event": "firing", "id": "rv-test-1", "host": "h<1>", "subsystem": "memory",
                 "opened_subsystem": "cpu", "severity": "warning", "claim": "CPU busy rose",
                 "reasons": [], "peak_score": 5.0, "start": iso(time.time()), "end": None}
        sink.submit(event)
        assert processes.wait_until(lambda: receiver.open_alerts() == {"rv-test-1"}, 30, 0.1)
        sink.submit({**event, "event": "resolved", "end": iso(time.time())})
        assert processes.wait_until(lambda: not receiver.open_alerts(), 30, 0.1)
        time.sleep(2.5)  # a repeat of either would have arrived by now (group_interval 1 s)
        heard = [(a.event, a.id, a.subsystem, a.claim) for a in receiver.alerts]
        assert heard == [("firing", "rv-test-1", "cpu", "CPU busy rose"),
                         ("resolved", "rv-test-1", "cpu", "CPU busy rose")]
    finally:
        if sink is not None:
            sink.close()
        if manager is not None:
            manager.close()
        receiver.close()
    assert not manager.root.exists() and manager.proc.poll() is not None


@pytest.mark.parametrize(("argv", "learn_s"), [
    (["--live"], 600.0),  # the watch's own default learn, as an operator runs it
    (["--live", "--baseline-seconds", "90"], 90.0),
    (["--live", "--quick"], 45.0),
    ([], 60.0),  # batch: a 60 s baseline before every faulted run
])
def test_the_live_suite_learns_as_the_watch_does_unless_told(argv: list[str],
                                                              learn_s: float) -> None:
    parser = build_parser()
    options = suite_options(parser.parse_args(["validate", *argv]))
    assert options.baseline_s == learn_s


@pytest.mark.parametrize(("argv", "gap_s"), [
    (["--live"], 30.0),  # room for an alert to resolve before the next fault
    (["--live", "--quick"], 20.0),  # the least
    (["--live", "--gap-seconds", "25"], 25.0),  # as told
    (["--quick"], 15.0),  # batch: the runs are scored as recorded
    ([], 20.0),
])
def test_the_live_suite_spaces_its_faults_for_alerts_to_resolve(argv: list[str],
                                                                gap_s: float) -> None:
    options = suite_options(build_parser().parse_args(["validate", *argv]))
    assert options.gap_s == gap_s


def test_a_live_gap_too_short_for_an_alert_to_resolve_is_refused() -> None:
    with pytest.raises(RevealError, match="at least 20 with --live"):
        suite_options(build_parser().parse_args(["validate", "--live", "--gap-seconds", "15"]))


@pytest.mark.slow
@pytest.mark.alone  # its live watch counts alert episodes: other tests' load would be one
def test_quick_live_suite_alerts_on_the_cpu_fault(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root (the collector's perf/eBPF probes, fault cleanup)")
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng not installed")
    if find_alertmanager() is None:
        pytest.skip("needs the Debian package prometheus-alertmanager")
    # through a real Alertmanager, as an operator is paged (the benign live suite's test
    # takes the watch's own webhook)
    assert main(["validate", "--quick", "--live", "--via-alertmanager", "--quiet", "--out",
                 str(tmp_path)]) == 0
    result = json.loads((tmp_path / "validate.json").read_text())
    assert result["mode"] == "live" and result["quick"] is True
    assert result["settings"]["via_alertmanager"] is True
    assert (tmp_path / "live" / "single" / "alertmanager.log").is_file()
    # the watch delivered its alerts to Alertmanager only: every episode it opened went
    # there, firing, and none to a webhook of its own
    state = json.loads((tmp_path / "live" / "single" / "state" / "alerts.json").read_text())
    assert state["episodes"] and all(
        set(e["delivered"]) == {"alertmanager"} and "firing" in e["delivered"]["alertmanager"]
        for e in state["episodes"]), state["episodes"]
    verdicts = {v["kind"]: v for v in result["summary"]["episodes"]}
    assert set(verdicts) == {"cpu_contention", "disk_burst"}
    cpu = verdicts["cpu_contention"]
    assert cpu["detected"], cpu
    assert 0 < cpu["alert_s"] < cpu["duration_s"] + result["settings"]["settle_s"]
    assert set(result["met"]) == {"recall", "median_alert_s", "p95_alert_s",
                                  "attribution_accuracy", "aftermath", "through_learn"}
    # no fault through the learn was asked for: none run, nothing judged
    assert result["summary"]["through_learn"] == [] and result["met"]["through_learn"] is None
    # each fault's aftermath, against the faults as injected (events.jsonl, in order): at
    # most one alert episode opened after its settle, one claim each, and an alert still
    # open when the next fault began was open within that span
    injected = load_episodes(tmp_path / "live" / "single")
    episodes = result["summary"]["episodes"]
    assert [e.kind for e in injected] == [v["kind"] for v in episodes]
    settle_ns = int(result["settings"]["settle_s"] * 1e9)
    for ep, after, v in zip(injected, [*injected[1:], None], episodes, strict=True):
        assert ep.start_ns < ep.end_ns and v["duration_s"] == pytest.approx(
            (ep.end_ns - ep.start_ns) / 1e9)
        assert v["aftermath_alerts"] <= 1, v
        assert len(v["aftermath_claims"]) == v["aftermath_alerts"]
        if after is not None:
            assert ep.end_ns + settle_ns < after.start_ns  # an aftermath before the next
            span_s = (after.start_ns - ep.end_ns - settle_ns) / 1e9
            assert v["open_at_next_s"] is None or 0 <= v["open_at_next_s"] <= span_s, v
    total = result["summary"]["total"]
    assert total["aftermath_alerts_max"] == max(v["aftermath_alerts"] for v in episodes) <= 1
    assert total["unsettled"] == sum(v["open_at_next_s"] is not None for v in episodes)
    assert result["met"]["aftermath"] is (total["unsettled"] == 0)
    assert (tmp_path / "live" / "single" / "watch.log").is_file()
    assert (tmp_path / "live" / "single" / "events.jsonl").is_file()
    assert (tmp_path / "validate.md").read_text().startswith("# Reveal live validation")
    assert "fault → alert" in capsys.readouterr().out


def test_a_fault_through_the_learn_is_scored_by_the_watchs_warning_not_as_false_alerts(
        ) -> None:
    """A fault begun before the learn: warned of by a channel of its subsystem (read from
    the warning line the watch writes), and the alerts while it held after the learn or as
    it ended are its own, not false alerts; one after its settle is false."""
    import dataclasses

    from reveal.analysis.baseline_health import UnhealthyChannel, _message

    finding = UnhealthyChannel("cgroup.cpu.stat.nr_throttled{cgroup=rvinj-1-job}", 9.0, 0.98,
                               60, 1.0, None, "periods/s", "")
    line = "reveal watch: warning: " + _message(finding, "periods throttled")
    other = dataclasses.replace(finding, channel="psi.memory.some.total")
    log = "\n".join([line, "reveal watch: warning: " + _message(other, ""), line])
    channels = unhealthy_channels(log)
    assert channels == ["cgroup.cpu.stat.nr_throttled{cgroup=rvinj-1-job}",
                        "psi.memory.some.total"]
    through = ThroughLearn(Episode(10 * S, 75 * S, "cgroup_throttle", "cpu", "high", {}),
                           channels)
    alerts = [Alert(int(66 * S), "firing", "t1", "cpu", "throttled <b>periods</b>"),
              Alert(int(80 * S), "firing", "t2", "cpu", "as it ended"),
              Alert(int(120 * S), "firing", "f1", "memory", "later")]
    scenario = LiveScenario("single", "torch_train", [_episode(200, 210)], alerts, 65 * S,
                            300 * S, through_learn=through)
    summary = score_live([scenario], settle_s=10.0)
    [t] = summary["through_learn"]
    assert t["warned"] and t["named_subsystem"] and t["channels"] == channels
    assert (t["seconds"], t["held_after_learn_s"], t["alert_episodes"]) == (65.0, 10.0, 2)
    assert [a["id"] for a in summary["false_alerts"]] == ["f1"]
    assert summary["total"]["clean_s"] == pytest.approx(235 - 20 - 20)
    assert met(summary["total"], summary["through_learn"])["through_learn"] is True
    quiet = dataclasses.replace(through, channels=["psi.memory.some.total"])
    unnamed = score_live([dataclasses.replace(scenario, through_learn=quiet)], 10.0)
    assert unnamed["through_learn"][0]["warned"]
    assert not unnamed["through_learn"][0]["named_subsystem"]
    assert met(unnamed["total"], unnamed["through_learn"])["through_learn"] is False
    assert met(summary["total"])["through_learn"] is None  # no such fault: nothing judged
    result = {"host": "h", "started": "t", "elapsed_s": 1.0, "skipped": [],
              "settings": {"baseline_s": 60.0, "settle_s": 10.0}, "summary": summary,
              "met": met(summary["total"], summary["through_learn"])}
    text = render_live_markdown(result)
    assert "## A fault through the learn" in text
    assert "cgroup_throttle (high) began before the watch's learn" in text
    assert "warned of an unhealthy baseline: **yes**" in text and "(cpu): **met**" in text
    assert "rvinj-1-job" in text and "<b>" not in text
    assert t["adopted"] is False and t["resolved_after_adopt_s"] is None
    assert "Not adopted." in text
    # adopted as the operator answers the warning, 25 s after the undo: what fired until
    # its settle is the fault's own, and an alert open at the adoption resolves after it
    adopted = dataclasses.replace(through, adopted_ns=100 * S)
    closes = [*alerts, Alert(int(125 * S), "resolved", "t2", "cpu", ""),
              Alert(int(90 * S), "resolved", "t1", "cpu", "")]
    after = score_live([dataclasses.replace(scenario, through_learn=adopted,
                                            alerts=closes)], 10.0)
    [a] = after["through_learn"]
    assert (a["adopted"], a["adopted_after_undo_s"], a["resolved_after_adopt_s"]) \
        == (True, 25.0, 25.0)
    assert [x["id"] for x in after["false_alerts"]] == ["f1"]  # 120 s: past its settle
    text = render_live_markdown({**result, "summary": after})
    assert "Adopted 25 s after the undo" in text and "**yes**, 25 s after" in text
    never = score_live([dataclasses.replace(scenario, through_learn=adopted)], 10.0)
    assert never["through_learn"][0]["resolved_after_adopt_s"] is None  # t2 never resolved
