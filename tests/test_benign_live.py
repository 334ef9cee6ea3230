"""``reveal validate --benign --live``: benign activity beside a running ``reveal watch``,
scored on its alert episodes — first the scoring on built episodes and alerts, then the
quick suite end to end (root: the collector's probes and the activities' cleanup)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reveal.cli import main
from reveal.inject.benign.live import render_markdown, score_live_benign
from reveal.inject.groundtruth import Episode
from reveal.inject.live_suite import Alert, LiveScenario

S = 1_000_000_000


def test_alert_episodes_are_counted_over_the_whole_span_and_matched_to_kinds() -> None:
    episodes = [Episode(100 * S, 110 * S, "cron_burst", "software", "default", {}),
                Episode(150 * S, 155 * S, "new_interface", "network", "default", {}),
                Episode(200 * S, 220 * S, "checkpoint", "storage", "default", {})]
    alerts = [Alert(105 * S, "firing", "a1", "cpu", "Processes created rose to <i>900/s</i>"),
              Alert(112 * S, "update", "a1", "cpu", ""),
              Alert(118 * S, "resolved", "a1", "cpu", ""),
              Alert(151 * S, "notice", "n1", "network", "A new network interface appeared: "
                    "rvb<x> (4 channels, recorded, not scored until the next fit)"),
              Alert(180 * S, "firing", "a2", "memory", "between two kinds"),
              Alert(500 * S, "firing", "a3", "cpu", "after the span")]
    scenario = LiveScenario("benign", "torch_train", episodes, alerts, 60 * S, 300 * S)
    summary = score_live_benign(scenario, settle_s=10.0)
    total = summary["total"]
    assert total["alert_episodes"] == 2  # a1 and a2; a3 fired after the scored span
    assert (total["kinds"], total["kinds_alerted"]) == (3, 1)
    assert (total["informational_kinds"], total["informational_alerted"]) == (1, 0)
    cron, interface, checkpoint = summary["rows"]
    assert cron["alerted"] and cron["alert_s"] == pytest.approx(5.0)
    assert cron["alerted_subsystem"] == "cpu" and interface["informational"]
    assert not interface["alerted"] and not checkpoint["alerted"]
    assert interface["notices"] and not cron["notices"]
    assert (total["informational_noted"], total["notices"]) == (1, 1)
    assert [a["id"] for a in summary["alerts"]] == ["a1", "a2"]
    result = {"host": "h<b>", "quick": False, "started": "t", "elapsed_s": 1.0,
              "workloads": {"benign": "torch_train"}, "skipped": [],
              "settings": {"baseline_s": 600.0, "gap_s": 30.0}, "summary": summary,
              "met": {"alert_episodes": False}}
    text = render_markdown(result)
    assert "| Alert episodes over 4.0 min of scoring, all 3 kinds | 2 | ≤ 1 | **not met** |" \
        in text
    assert "<i>" not in text and "<b>" not in text and "<x>" not in text  # escaped


@pytest.mark.parametrize("argv, says", [
    (["--benign", "--gap-seconds", "40"], "--gap-seconds applies to --benign with --live"),
    (["--benign", "--live", "--gap-seconds", "5"], "at least 20"),
    (["--benign", "--live", "--score-every", "0"], "--score-every"),
    (["--benign", "--live", "--reanalyse", "."], "cannot --reanalyse"),
    (["--benign", "--clean-seconds", "60"], "--clean-seconds does not apply"),
    (["--benign", "--faults", "cron_burst,watch_restart"], "live watch only")])
def test_benign_live_option_errors_are_one_line(argv, says, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["validate", *argv, "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


@pytest.mark.slow
@pytest.mark.alone  # its live watch counts alert episodes: other tests' load would be one
def test_quick_benign_suite_on_a_live_watch(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root (the collector's probes, the activities' cleanup)")
    assert main(["validate", "--benign", "--live", "--quick", "--quiet", "--faults",
                 "cron_burst,watch_restart,new_interface", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "benign_live.json").read_text())
    assert result["mode"] == "live" and result["settings"]["baseline_s"] == 60.0
    rows = result["summary"]["rows"]
    assert [r["kind"] for r in rows] == ["cron_burst", "watch_restart", "new_interface"]
    assert all(r["activity_s"] > 0 for r in rows)
    # the watch was restarted on its state: it loaded the model it had learned and scored
    first = (tmp_path / "live" / "benign" / "watch.log").read_text()
    again = (tmp_path / "live" / "benign" / "watch-restart1.log").read_text()
    assert "learned in" in first and "learned in" not in again and "; scoring" in again
    assert "new_interface" in (tmp_path / "live" / "benign" / "events.jsonl").read_text()
    summary = result["summary"]
    total = summary["total"]
    # the target, on what ran: at most one alert episode over every kind together
    assert total["alert_episodes"] <= 1, summary["alerts"]
    assert result["met"]["alert_episodes"] is True
    # an alert episode is one the watch opened and delivered to the webhook (its own
    # state says so), counted once however many events it sent
    state = json.loads((tmp_path / "live" / "benign" / "state" / "alerts.json").read_text())
    delivered = {e["id"] for e in state["episodes"]
                 if "firing" in e["delivered"].get("webhook", [])}
    fired = [a["id"] for a in summary["alerts"]]
    assert {a["event"] for a in summary["alerts"]} <= {"firing"}
    assert len(fired) == len(set(fired)) == total["alert_episodes"]
    assert set(fired) == delivered
    assert all(a["since_scoring_s"] >= 0 for a in summary["alerts"])
    # a kind is alerted when an alert came while it ran or settled: the time is from its
    # start, within that span
    settle = result["settings"]["settle_s"]
    for r in rows:
        assert r["alerted"] == (r["alert_s"] is not None) == (r["alerted_subsystem"] is not None)
        assert r["alert_s"] is None or 0 <= r["alert_s"] <= r["activity_s"] + settle, r
    assert [r["informational"] for r in rows] == [False, False, True]
    assert (total["kinds"], total["informational_kinds"]) == (3, 1)
    assert total["kinds_alerted"] == [r["alerted"] for r in rows].count(True)
    interface = rows[2]
    assert not interface["alerted"] and total["informational_alerted"] == 0  # a note only
    assert all(n.startswith("A new network interface appeared: ") for n in interface["notices"])
    assert total["informational_noted"] == int(bool(interface["notices"]))
    events = (tmp_path / "live" / "benign" / "events.jsonl").read_text().splitlines()
    assert {json.loads(e)["kind"] for e in events} >= {"cron_burst", "watch_restart"}
    assert (tmp_path / "benign_live.md").read_text().startswith("# Benign-change suite on a "
                                                                 "live watch")
    assert "Alert episodes over" in capsys.readouterr().out
