"""Alert episodes: open on a flagged window, update, resolve after a quiet period; the state
file keeps what each sink delivered so that a restart sends nothing twice; a reboot
resolves what was open. Channels the model does not know are reported."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from reveal.analysis.evidence import Reason, WindowEvidence
from reveal.frame import Telemetry
from reveal.live.alerts import EpisodeTracker
from reveal.live.scorer import LiveScorer, LiveWindow
from reveal.live.sinks import AlertmanagerSink, JsonLinesSink
from reveal.model import Reveal

sys.path.insert(0, str(Path(__file__).parent))
from test_model import _synthetic

S = 1_000_000_000


def window(k: int, flagged: bool, score: float = 5.0) -> LiveWindow:
    reason = Reason("derived.cpu_busy_pct{cpu=1}", "derived.cpu_busy_pct", "mean", "cpu",
                    0.6, 97.0, 4.0, 40.0)
    evidence = WindowEvidence(k, k * S, k * S + 3 * S, score, ["Z"], ["cpu"], {"cpu": 1.0},
                              [reason]) if flagged else None
    return LiveWindow(k, k * S, k * S + 3 * S, score if flagged else 0.1, 1.0, flagged,
                      flagged, {"Z": 1.0}, {"Z": 0.5}, ["Z"] if flagged else [], evidence,
                      "CPU busy rose." if flagged else None)


def tracker(path: Path, boot: str = "boot-a") -> EpisodeTracker:
    return EpisodeTracker(path, "host-a", resolve_after_s=3.0, wall_offset_ns=10 * S,
                          boot_id=boot)


def test_an_episode_opens_updates_and_resolves_after_a_quiet_period(tmp_path):
    t = tracker(tmp_path / "alerts.json")
    t.load()
    events = []
    for k in range(40):
        events += t.observe(window(k, 5 <= k < 25, score=5.0 + k))
    kinds = [e["event"] for e in events]
    assert kinds[0] == "firing" and kinds[-1] == "resolved" and "update" in kinds
    first, last = events[0], events[-1]
    assert first["id"] == last["id"] and first["host"] == "host-a"
    assert first["subsystem"] == "cpu" and first["claim"] == "CPU busy rose."
    assert first["reasons"][0] == {"channel": "derived.cpu_busy_pct{cpu=1}",
                                   "feature": "mean", "subsystem": "cpu", "value": 97.0,
                                   "baseline": 4.0, "unit": "%", "robust_z": 40.0,
                                   "contribution": 0.6}
    assert last["end"] is not None and last["peak_score"] == 5.0 + 24
    assert last["end"] == "1970-01-01T00:00:37.000Z"  # end of its last flagged window
    resolved_at = next(k for k in range(40) if k * S + 3 * S - 27 * S >= 3 * S)
    assert resolved_at == 27
    # a flagged window after the quiet period is a new episode
    more = t.observe(window(50, True))
    assert more[0]["event"] == "firing" and more[0]["id"] != first["id"]


def led_by(k: int, subsystem: str, score: float) -> LiveWindow:
    """A flagged window whose evidence is all ``subsystem``'s."""
    channel, what = {"storage": ("derived.disk_util_pct{dev=vda}", "Disk utilisation"),
                     "cpu": ("psi.cpu.some.total", "CPU pressure")}[subsystem]
    claim = f"{what} rose ({score:g})."
    reason = Reason(channel, channel.split("{")[0], "mean", subsystem, 1.0, 50.0, 0.0, 40.0)
    evidence = WindowEvidence(k, k * S, k * S + 3 * S, score, ["Z"], [subsystem],
                              {subsystem: 1.0}, [reason])
    return LiveWindow(k, k * S, k * S + 3 * S, score, 1.0, True, True, {"Z": 1.0},
                      {"Z": 0.5}, ["Z"], evidence, claim)


def test_a_change_of_subsystem_is_sent_at_once_with_a_claim_of_its_own(tmp_path):
    """An episode opened on leftover disk activity, then led by CPU pressure: once CPU
    weighs most, an update names it (and a CPU claim) within RELABEL_EVERY_S, not after
    UPDATE_EVERY_S; the claim never speaks of another subsystem than the one named."""
    from reveal.live.alerts import RELABEL_EVERY_S, UPDATE_EVERY_S

    t = tracker(tmp_path / "alerts.json")
    t.load()
    events = t.observe(led_by(0, "storage", 5.0)) + t.observe(led_by(1, "storage", 5.0))
    for k in range(2, 12):  # lower scores than the opening: no update for a higher peak
        events += t.observe(led_by(k, "cpu", 4.6 if k == 3 else 4.0))
    assert [e["event"] for e in events] == ["firing", "update"]
    firing, update = events
    assert firing["subsystem"] == "storage" and firing["claim"] == "Disk utilisation rose (5)."
    # the strongest CPU window's claim, not the first's or the latest's
    assert update["subsystem"] == "cpu" and update["claim"] == "CPU pressure rose (4.6)."
    assert update["reasons"][0]["channel"] == "psi.cpu.some.total"
    # CPU outweighs storage (10.0) from its third window (k = 4, weight 12.6)
    sent_at = (int(update["last_flagged"][17:19]) - 10 - 3)  # wall offset 10 s, window 3 s
    assert sent_at == 4 and RELABEL_EVERY_S <= sent_at < UPDATE_EVERY_S
    assert update["peak_score"] == 5.0


def test_an_alert_is_never_named_by_a_subsystem_its_claim_does_not_speak_of(tmp_path):
    """Memory outweighs the GPU over the episode (many small shares), but every window's
    claim speaks of the GPU (seen on a real H200: "memory: GPU kernel-active time went
    from 5 % to 99 %"): the alert is named by the heaviest subsystem that led a window."""
    t = tracker(tmp_path / "alerts.json")
    t.load()
    events = []
    for k in range(6):
        reason = Reason("gpu.kernel_active_pct{gpu=0}", "gpu.kernel_active_pct", "median",
                        "gpu", 0.3, 99.0, 5.0, 40.0)
        evidence = WindowEvidence(k, k * S, k * S + 3 * S, 6.0, ["Z"], ["gpu", "memory"],
                                  {"memory": 0.6, "gpu": 0.4}, [reason])
        events += t.observe(LiveWindow(k, k * S, k * S + 3 * S, 6.0, 1.0, True, True,
                                       {"Z": 1.0}, {"Z": 0.5}, ["Z"], evidence,
                                       "GPU kernel-active time rose."))
    assert events and all(e["subsystem"] == "gpu" for e in events)
    assert t.open()[0].weights["memory"] > t.open()[0].weights["gpu"]


def test_the_label_alertmanager_keeps_is_the_subsystem_the_firing_event_names(tmp_path):
    """A window with no claim opens the episode: it is named by the heaviest subsystem of
    its evidence, and Alertmanager's fixed label (``opened_subsystem``) says the same."""
    t = tracker(tmp_path / "alerts.json")
    t.load()
    reason = Reason("psi.cpu.some.total", "psi.cpu.some.total", "variance", "cpu", 0.2,
                    9.0, 1.0, 12.0)
    evidence = WindowEvidence(0, 0, 3 * S, 6.0, ["Z"], ["cpu", "storage"],
                              {"storage": 0.7, "cpu": 0.3}, [reason])
    events = t.observe(LiveWindow(0, 0, 3 * S, 6.0, 1.0, True, True, {"Z": 1.0},
                                  {"Z": 0.5}, ["Z"], evidence, None))
    assert [e["event"] for e in events] == ["firing"]
    assert events[0]["subsystem"] == events[0]["opened_subsystem"] == "storage"


def test_a_state_from_before_relabelling_sends_no_update_for_it(tmp_path):
    """An open episode saved without the subsystem last sent (an older watch) is taken as
    having sent its subsystem: the next window of that subsystem sends nothing."""
    path = tmp_path / "alerts.json"
    t = tracker(path)
    t.load()
    t.observe(led_by(0, "cpu", 5.0))
    saved = json.loads(path.read_text())
    for ep in saved["episodes"]:
        for key in ("sent_subsystem", "leads"):
            del ep[key]
    path.write_text(json.dumps(saved))
    again = tracker(path)
    again.load()
    assert again.observe(led_by(1, "cpu", 4.0)) == []
    assert again.open()[0].claim == "CPU pressure rose (5)."


def test_restart_sends_only_what_was_not_delivered_and_reboot_resolves(tmp_path):
    path = tmp_path / "alerts.json"
    t = tracker(path)
    t.load()
    firing = t.observe(window(0, True))[0]
    t.observe(window(1, True))
    t.delivered("webhook", firing)
    saved = json.loads(path.read_text())
    assert saved["episodes"][0]["delivered"] == {"webhook": ["firing"]}

    again = tracker(path)  # a restart on the same boot: the episode stays open
    assert again.load() == []
    assert again.owed("webhook") == []  # delivered: not sent again
    assert [e["event"] for e in again.owed("alertmanager")] == ["firing"]  # never delivered
    # the first window after the restart comes later than the quiet period: resolved
    events = again.observe(window(20, False))
    assert [e["event"] for e in events] == ["resolved"] and events[0]["id"] == firing["id"]
    again.delivered("webhook", events[0])
    assert again.owed("webhook") == []

    other = tracker(tmp_path / "b.json")
    other.load()
    open_one = other.observe(window(0, True))[0]
    other.delivered("webhook", open_one)
    rebooted = tracker(tmp_path / "b.json", boot="boot-b")
    owed = rebooted.load()
    assert [e["event"] for e in owed] == ["resolved"] and owed[0]["id"] == open_one["id"]
    assert [e["event"] for e in rebooted.owed("webhook")] == ["resolved"]


def test_json_lines_and_alertmanager_payloads(tmp_path):
    t = tracker(tmp_path / "alerts.json")
    t.load()
    event = t.observe(window(0, True, score=9.0))[0]
    delivered = []
    sink = JsonLinesSink(str(tmp_path / "alerts.jsonl"), lambda s, e: delivered.append(s))
    sink.submit(event)
    sink.close()
    assert json.loads((tmp_path / "alerts.jsonl").read_text()) == event
    assert delivered == ["jsonl"]
    am = AlertmanagerSink("http://127.0.0.1:9/api/v2/alerts")
    try:
        (alert,) = am.body(event)
        assert am.url == "http://127.0.0.1:9/api/v2/alerts"
    finally:
        am.close(timeout=0.1)
    assert alert["labels"] == {"alertname": "RevealAnomaly", "host": "host-a",
                               "subsystem": "cpu", "severity": "critical",
                               "episode": event["id"]}
    assert alert["annotations"]["claim"] == "CPU busy rose."
    assert "97 % (baseline 4 %)" in alert["annotations"]["reasons"]
    assert alert["startsAt"] == event["start"] and alert["endsAt"] > alert["startsAt"]


def test_channels_the_model_does_not_know_are_reported():
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(10, seed=2)
    extra = Telemetry(run.host, run.timestamps_ns,
                      np.column_stack([run.values, np.linspace(0, 5, run.n_samples)]),
                      [*run.channels, "mem.Shmem"], run.meta)
    scorer = LiveScorer(model, interval_s=0.1)
    assert scorer.unmodelled(run) == []
    assert scorer.unmodelled(extra) == ["mem.Shmem"]


def test_retention_removes_old_recordings_and_keeps_the_data_around_alerts(tmp_path):
    import subprocess

    from reveal.live.service import Watch, WatchOptions
    from reveal.store.run_reader import read_run

    state = tmp_path / "state"
    runs = state / "runs"
    for name in ("host-1", "host-2"):
        subprocess.run([sys.executable, "-m", "reveal.cli", "collect", "--duration", "2",
                        "--out", str(runs / name), "--quiet"], check=True,
                       capture_output=True)
    alerted = read_run(runs / "host-1")
    offset = int(json.loads((runs / "host-1" / "meta.json").read_text())["wall_offset_ns"])
    watch = Watch(WatchOptions(state=state, retain_s=0.0), lambda level, message: None)
    watch.tracker = EpisodeTracker(tmp_path / "alerts.json", "host", 3.0, offset, "boot")
    watch.tracker.observe(window(0, True))  # an episode at the start of host-1
    ep = watch.tracker.episodes[0]
    # 5 min before it, so that its margin ends half a second into host-1 (host-2 is later)
    ep.start_ns = ep.end_ns = int(alerted.timestamps_ns[5]) - 300 * S + S // 2
    watch._retention()
    assert not runs.exists() or not any(runs.iterdir())  # both older than --retain 0
    kept = read_run(state / "kept" / "host-1")  # a run directory reveal analyze reads
    assert kept.n_samples == alerted.n_samples
    assert not (state / "kept" / "host-2").exists()  # no alert there


def test_an_unwritable_state_file_does_not_stop_alerting(tmp_path):
    """The state directory gone (or full): events still flow, the failure is said once,
    and the state is written again once it can be."""
    heard: list[str] = []
    place = tmp_path / "gone"
    t = EpisodeTracker(place / "alerts.json", "host-a", resolve_after_s=3.0,
                       wall_offset_ns=10 * S, boot_id="boot-a", warn=heard.append)
    events = []
    for k in range(3):
        events += t.observe(window(k, True))
    assert events[0]["event"] == "firing"
    assert len(heard) == 1 and "cannot write the alert state" in heard[0]
    place.mkdir()
    for k in range(3, 40):
        events += t.observe(window(k, False))
    assert events[-1]["event"] == "resolved"
    assert heard[-1].endswith("alert state written again") and len(heard) == 2
    saved = json.loads((place / "alerts.json").read_text())
    assert saved["episodes"][0]["resolved"] is True
