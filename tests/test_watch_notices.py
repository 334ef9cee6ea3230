"""Notes, not alerts: a thing that appears on the host (an interface, a namespace, a
container) gets one ``notice`` event at the webhook, never an Alertmanager alert — first
on channel names, then with a real watch and a real interface (root, iproute2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reveal.live.notices import appeared, notice_event
from reveal.live.sinks import AlertmanagerSink, JsonLinesSink, WebhookSink

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


def test_alertmanager_takes_no_notes_the_webhook_and_file_do():
    assert not AlertmanagerSink.takes_notices
    assert WebhookSink.takes_notices and JsonLinesSink.takes_notices


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


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
        assert not [e for e in json.loads("[" + ",".join(notes.read_text().splitlines()) + "]")
                    if e["event"] == "firing"]
    finally:
        _ip("link", "del", OWN)
        watch.terminate()
        try:
            watch.wait(60)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
