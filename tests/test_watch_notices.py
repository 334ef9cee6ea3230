"""Notes, not alerts: a thing that appears on the host (an interface, a namespace, a
container) gets one ``notice`` event at the webhook, never an Alertmanager alert — first
on channel names, then through the watch's routing to a real Alertmanager, then with a real
watch and a real interface (root, iproute2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from reveal.live.buffer import SampleBuffer
from reveal.live.keeper import learn_settings
from reveal.live.notices import appeared, notice_event
from reveal.live.service import Watch, WatchOptions
from reveal.model import Reveal
from synthetic import ar1_host
from test_watch_service import (
    ALERTMANAGER,
    Receiver,
    free_port,
    get_json,
    start_server,
    stop,
    wait_for,
)

OWN = f"rvnote{os.getpid() % 100000:05d}"  # this test's interface (15 chars at most)


def test_things_are_grouped_by_label_and_each_channel_counts_for_each():
    channels = ["net.rx_bytes{iface=veth1,netns=ctr-a}", "net.tx_bytes{iface=veth1,netns=ctr-a}",
                "cgroup.cpu.usage_usec{cgroup=job-b}", "mem.MemFree"]
    things = appeared(channels)
    assert set(things) == {("iface", "veth1"), ("netns", "ctr-a"), ("cgroup", "job-b")}
    assert things[("iface", "veth1")] == channels[:2]
    event = notice_event("h1", "netns", "ctr-a", things[("netns", "ctr-a")], now_s=0.0)
    assert event["event"] == "notice" and event["severity"] == "info"
    assert event["subsystem"] == "network" and event["channels"] == 2
    assert event["claim"].startswith("A new network namespace appeared: ctr-a (2 channels")
    assert event["id"] != notice_event("h1", "netns", "ctr-a", [], now_s=0.0)["id"]


@pytest.fixture
def alertmanager(tmp_path: Path):
    """A real Alertmanager on a free loopback port (its base URL); skipped without one."""
    if ALERTMANAGER is None:
        pytest.skip("needs the Debian package prometheus-alertmanager")
    port = free_port()
    (tmp_path / "am").mkdir()
    (tmp_path / "am.yml").write_text("route:\n  receiver: none\nreceivers:\n- name: none\n")
    proc = start_server([ALERTMANAGER, f"--config.file={tmp_path / 'am.yml'}",
                         f"--storage.path={tmp_path / 'am'}",
                         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                        tmp_path / "am.log", f"http://127.0.0.1:{port}/api/v2/status")
    yield f"http://127.0.0.1:{port}"
    stop(proc)


def test_a_note_goes_to_the_webhook_and_file_and_an_alert_to_alertmanager_too(
        tmp_path: Path, alertmanager: str):
    """The watch's own routing, with its three sinks open: a new interface among the
    recorded channels is noted at the webhook and in the file but never reaches the real
    Alertmanager, while the anomaly scored next does, with its labels and annotations.
    Each sink delivers in order, so a note sent to Alertmanager would be there before it."""
    receiver = Receiver()
    said: list[tuple[str, str]] = []
    notes = tmp_path / "alerts.jsonl"
    watch = Watch(WatchOptions(state=tmp_path / "state", listen=None, sinks={
        "jsonl": str(notes), "webhook": f"{receiver.url}/hook", "alertmanager": alertmanager}),
        lambda level, message: said.append((level, message)))
    try:
        watch._open_state()
        model = Reveal(overrides=learn_settings(None)).fit(ar1_host(600, seed=1))
        model.save(watch.statedir.model)
        watch.keeper.load()
        watch._open_sinks()
        assert [s.name for s in watch.sinks] == ["jsonl", "webhook", "alertmanager"]
        assert not [m for level, m in said if level == "warning"], said  # Alertmanager answers

        # 100 s ending now (monotonic), CPU busy 45 points higher from 60 s to 80 s, and a
        # new interface's counter in the layout from the start
        run = ar1_host(100, seed=3, fault=(60, 80), start_s=time.monotonic() - 101)
        run.meta.update(mem_total_bytes=24 * 2**30, n_cpus=2)
        new = f"net.rx_bytes{{iface={OWN}}}"
        buffer = SampleBuffer(run.channels, capacity=run.n_samples)
        buffer.set_channels([*run.channels, new])
        rows = np.column_stack([run.values, np.cumsum(np.full(run.n_samples, 1e4))])
        buffer.append_block(run.timestamps_ns, rows)
        watch.buffer = buffer
        watch.keeper.begin(buffer, collector=None)  # scores with the loaded model
        assert watch.scorer is not None and buffer.layout_changes != watch._layouts_seen
        watch._check_channels()  # what the scoring loop does on a new layout
        assert watch.unmodelled == [new]
        assert watch.tracker is not None and watch.tracker.counts["notice"] == 1

        while windows := watch.scorer.score(buffer.read, buffer.total, buffer.oldest):
            for w in windows:
                watch.tracker.observe(w)  # as the scoring loop does: opens the episode
        episodes = watch.tracker.open()
        assert len(episodes) == 1 and episodes[0].subsystem == "cpu"
        episode = episodes[0].id

        written = [json.loads(line) for line in notes.read_text().splitlines()]  # all events
        _, hook, am = watch.sinks
        wait_for("the HTTP sinks to deliver", lambda: (hook.sent, am.sent) == (
            len(written), len(written) - 1), 30, every=0.1)  # every event; all but the note
        hooked = receiver.bodies("/hook")
        assert [(e["event"], e["id"]) for e in hooked][:2] == [("notice", hooked[0]["id"]),
                                                               ("firing", episode)]
        assert {e["event"] for e in hooked[2:]} <= {"update"}
        note, last = hooked[0], hooked[-1]  # the note; what Alertmanager holds now
        assert (note["label"], note["value"], note["subsystem"]) == ("iface", OWN, "network")
        assert note["examples"] == [new] and note["claim"].startswith(
            f"A new network interface appeared: {OWN} (1 channels")
        assert [(e["event"], e["id"]) for e in written] == [(e["event"], e["id"])
                                                            for e in hooked]

        alerts = get_json(f"{alertmanager}/api/v2/alerts")
        assert len(alerts) == 1, alerts  # the episode's alert, and no note
        labels, notes_ = alerts[0]["labels"], alerts[0]["annotations"]
        assert labels == {"alertname": "RevealAnomaly", "host": watch.host, "subsystem": "cpu",
                          "severity": episodes[0].severity, "episode": episode}
        assert notes_["claim"] == last["claim"]
        assert notes_["claim"].startswith("CPU busy percentage rose to")
        assert notes_["subsystem_now"] == "cpu"
        assert float(notes_["peak_score"]) == pytest.approx(last["peak_score"], rel=1e-2)
        assert float(notes_["peak_score"]) > last["threshold"]
        assert notes_["reasons"].splitlines()[0].startswith("derived.cpu_busy_pct ")
        assert alerts[0]["status"]["state"] == "active"
        assert OWN not in json.dumps(alerts)
    finally:
        watch.close()
        receiver.close()


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.slow
def test_a_new_interface_is_noted_once_and_never_alerted(tmp_path: Path):
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2")
    notes = tmp_path / "alerts.jsonl"
    log = tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(tmp_path / "state"),
             "--learn", "20s", "--allow-short-learn", "--listen", "none",
             "--threshold-factor", "1e6",  # nothing is an anomaly: only notes come
             "--alerts-file", str(notes)], stdout=subprocess.DEVNULL, stderr=handle)
    try:
        deadline = time.monotonic() + 180
        while "; scoring" not in log.read_text(errors="replace"):
            assert watch.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.5)
        for kind in ("dummy", "bridge"):  # a kernel may lack the dummy driver
            made = _ip("link", "add", OWN, "type", kind)
            if made.returncode == 0:
                break
        assert made.returncode == 0, made.stderr
        _ip("link", "set", OWN, "up")

        def mine() -> list[dict]:
            if not notes.exists():
                return []
            events = [json.loads(line) for line in notes.read_text().splitlines()]
            return [e for e in events if e.get("value") == OWN]

        deadline = time.monotonic() + 60
        while not mine() and time.monotonic() < deadline:
            time.sleep(0.5)
        found = mine()
        assert len(found) == 1, log.read_text()[-2000:]
        assert found[0]["event"] == "notice" and found[0]["label"] == "iface"
        assert OWN in found[0]["claim"] and found[0]["subsystem"] == "network"
        time.sleep(5)  # more rows of the same interface: no second note
        assert len(mine()) == 1
        # no alert names the interface (the host's own load may still page: a change that
        # matters is flagged whatever the threshold factor)
        events = [json.loads(line) for line in notes.read_text().splitlines()]
        assert not [e for e in events if e["event"] != "notice" and OWN in json.dumps(e)]
    finally:
        _ip("link", "del", OWN)
        watch.terminate()
        try:
            watch.wait(60)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
