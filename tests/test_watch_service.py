"""``reveal watch`` as a real process on this host: scraped by a real Prometheus, alerting a
real Alertmanager and a webhook (an HTTP server in the test), SIGKILLed mid-episode and
restarted. The anomaly is real: a busy loop the test starts and stops.

Needs the Debian packages ``prometheus`` and ``prometheus-alertmanager`` (skipped without
them). Every server runs on a free loopback port with its own temporary directory.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def wait_for(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = check()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Receiver:
    """An HTTP server that keeps every JSON body POSTed to it, by path."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, object]] = []
        received = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path: str) -> list:
        return [body for p, body in list(self.posts) if p == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_server(argv: list[str], log: Path, ready_url: str) -> subprocess.Popen:
    handle = open(log, "wb")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT)
    try:
        wait_for(f"{argv[0]} to answer", lambda: urllib.request.urlopen(ready_url, timeout=2),
                 60)
    except AssertionError:
        proc.kill()
        raise AssertionError(f"{argv[0]} did not start: {log.read_text()[-2000:]}") from None
    return proc


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class WatchProcess:
    def __init__(self, state: Path, args: list[str], log: Path) -> None:
        self.log = log
        self.handle = open(log, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(state), *args],
            stdout=subprocess.DEVNULL, stderr=self.handle)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


def start_alertmanager(root: Path, port: int) -> subprocess.Popen:
    """A real Alertmanager on ``port`` with ``root/am.yml`` (written by the caller)."""
    return start_server([ALERTMANAGER, f"--config.file={root / 'am.yml'}",
                         f"--storage.path={root / 'am'}",
                         f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
                        root / "am.log", f"http://127.0.0.1:{port}/api/v2/status")


def start_prometheus(root: Path, port: int, metrics_port: int) -> subprocess.Popen:
    """A real Prometheus on ``port`` scraping ``127.0.0.1:metrics_port`` every second."""
    (root / "prom").mkdir(exist_ok=True)
    (root / "prom.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
        f"- job_name: reveal\n  static_configs:\n  - targets: ['127.0.0.1:{metrics_port}']\n")
    return start_server([PROMETHEUS, f"--config.file={root / 'prom.yml'}",
                         f"--storage.tsdb.path={root / 'prom'}",
                         f"--web.listen-address=127.0.0.1:{port}"],
                        root / "prom.log", f"http://127.0.0.1:{port}/-/ready")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    if PROMETHEUS is None or ALERTMANAGER is None:
        pytest.skip("needs the Debian packages prometheus and prometheus-alertmanager")
    root = tmp_path_factory.mktemp("watch")
    receiver = Receiver()
    metrics_port, prom_port, am_port = free_port(), free_port(), free_port()
    (root / "am").mkdir()
    (root / "am.yml").write_text(
        "route:\n  receiver: hook\n  group_by: ['episode']\n  group_wait: 1s\n"
        "  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n- name: hook\n"
        f"  webhook_configs:\n  - url: {receiver.url}/am\n    send_resolved: true\n")
    am = start_alertmanager(root, am_port)
    try:
        prom = start_prometheus(root, prom_port, metrics_port)
    except BaseException:
        stop(am)
        raise
    yield {"root": root, "receiver": receiver, "metrics_port": metrics_port,
           "prom": f"http://127.0.0.1:{prom_port}", "am": f"http://127.0.0.1:{am_port}"}
    stop(prom)
    stop(am)
    receiver.close()


def promql(base: str, expr: str) -> list:
    query = urllib.parse.urlencode({"query": expr})
    data = get_json(f"{base}/api/v1/query?{query}")
    assert data["status"] == "success", data
    return data["data"]["result"]


def hog() -> subprocess.Popen:
    """A busy loop on one CPU (until killed)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


@pytest.mark.alone  # a busy loop is the fault: on a host other tests keep busy it is no change
def test_watch_learns_exports_alerts_survives_sigkill_and_resolves(servers):
    root, receiver = servers["root"], servers["receiver"]
    state = root / "state"
    args = ["--learn", "20s", "--allow-short-learn", "--resolve-after", "3s",
            "--listen", f"127.0.0.1:{servers['metrics_port']}",
            "--alert-webhook", f"{receiver.url}/hook", "--alertmanager", servers["am"],
            "--alerts-file", str(root / "alerts.jsonl")]
    watch = WatchProcess(state, args, root / "watch.log")
    busy = None
    try:
        wait_for("the model to be learned", lambda: "scoring" in watch.text(), 120)
        assert "learning a model" in watch.text()
        maps = Path(f"/proc/{watch.proc.pid}/maps").read_text()
        assert "/pandas/" not in maps and "/sklearn/" in maps  # left out; the rest loaded
        model = state / "model.reveal"
        learned = model.stat().st_mtime_ns

        # Prometheus scrapes the exporter: the scores come back through PromQL
        result = wait_for("Prometheus to hold the scores", lambda: promql(
            servers["prom"], 'reveal_score{detector="combined"}'), 60)
        assert float(result[0]["value"][1]) >= 0
        thresholds = promql(servers["prom"], "reveal_threshold")
        assert {r["metric"]["detector"] for r in thresholds} >= {"combined", "Z", "IF"}
        assert promql(servers["prom"], "reveal_model_generation")[0]["value"][1] == "1"
        assert promql(servers["prom"], "reveal_host_cpu_seconds_total")
        assert promql(servers["prom"], "reveal_collector_missed_ticks_total")
        # every panel of the shipped dashboard has data on this server
        from reveal.live.unit import dashboard_json

        wait_for("two scrapes for rate()", lambda: float(promql(
            servers["prom"], "count_over_time(reveal_score[1m])")[0]["value"][1]) >= 5, 30)
        for panel in json.loads(dashboard_json())["panels"]:
            for target in panel["targets"]:
                expr = target["expr"].replace("$instance", ".*")
                assert promql(servers["prom"], expr), (panel["title"], expr)

        # a real anomaly: a busy loop; then an episode open while it runs (a model learned
        # in 20 s on a shared host may have opened one before: the busy loop keeps it open)
        busy = hog()
        metrics = f"http://127.0.0.1:{servers['metrics_port']}/metrics"

        def open_episode():
            text = urllib.request.urlopen(metrics, timeout=2).read().decode()
            if "reveal_window_flagged 1.0" not in text:
                return None
            events = receiver.bodies("/hook")
            done = {e["id"] for e in events if e["event"] == "resolved"}
            return [e for e in events if e["event"] == "firing" and e["id"] not in done]

        firing = wait_for("an open episode at the webhook while the loop runs",
                          open_episode, 90, every=0.2)[-1]
        episode = firing["id"]
        assert firing["host"] == socket.gethostname() and firing["claim"]
        assert firing["reasons"] and {"channel", "value", "baseline", "unit"} <= set(
            firing["reasons"][0])
        assert firing["peak_score"] > firing["threshold"]
        active = wait_for("the alert in Alertmanager", lambda: [
            a for a in get_json(f"{servers['am']}/api/v2/alerts")
            if a["labels"].get("episode") == episode], 30)
        assert active[0]["labels"]["alertname"] == "RevealAnomaly"
        assert {"host", "subsystem", "severity"} <= set(active[0]["labels"])
        assert active[0]["annotations"]["claim"]
        assert promql(servers["prom"], "reveal_active_anomalies") is not None

        # SIGKILL in the middle of the episode; the fault ends while it is down
        watch.proc.send_signal(signal.SIGKILL)
        watch.proc.wait(10)
        busy.kill()
        busy.wait()
        busy = None
        before = len(watch.text())
        watch = WatchProcess(state, args, root / "watch.log")
        restarted = wait_for("the restarted watch to score",
                             lambda: "scoring" in watch.text()[before:], 60)
        assert restarted
        log = watch.text()[before:]
        assert "model loaded" in log and "learning a model" not in log
        assert model.stat().st_mtime_ns == learned  # not learned again

        wait_for("the webhook to get the resolution", lambda: [
            e for e in receiver.bodies("/hook")
            if e["id"] == episode and e["event"] == "resolved"], 60)
        wait_for("Alertmanager to notify the resolution", lambda: [
            b for b in receiver.bodies("/am") if b["status"] == "resolved"
            and any(a["labels"].get("episode") == episode for a in b["alerts"])], 60)
        resolved = next(e for e in receiver.bodies("/hook")
                        if e["id"] == episode and e["event"] == "resolved")
        assert resolved["end"] is not None and _unix(resolved["end"]) >= _unix(resolved["start"])
        time.sleep(3)  # anything sent twice would have arrived by now
        events = receiver.bodies("/hook")
        for kind in ("firing", "resolved"):
            ids = [e["id"] for e in events if e["event"] == kind]
            assert len(ids) == len(set(ids)), f"an episode {kind} twice: {ids}"
        lines = [json.loads(x) for x in (root / "alerts.jsonl").read_text().splitlines()]
        assert next(e["event"] for e in lines if e["id"] == episode) == "firing"
        assert "resolved" in [e["event"] for e in lines if e["id"] == episode]

        # SIGTERM: a clean stop, the run closed
        watch.proc.send_signal(signal.SIGTERM)
        assert watch.proc.wait(60) == 0, watch.text()[-2000:]
        runs = sorted((state / "runs").iterdir())
        assert len(runs) == 2
        assert json.loads((runs[-1] / "meta.json").read_text())["closed"] is True
    finally:
        if busy is not None:
            busy.kill()
        if watch.proc.poll() is None:
            watch.proc.kill()
        watch.proc.wait()


def _unix(stamp: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_a_dead_webhook_never_stalls_and_its_queue_stays_bounded():
    from reveal.live.sinks import WebhookSink

    dead = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    sink = WebhookSink(dead, max_queue=10, backoff_s=0.05, max_backoff_s=0.2)
    t0 = time.monotonic()
    for i in range(1000):
        sink.submit({"event": "firing", "id": f"e{i}"})
    assert time.monotonic() - t0 < 1.0  # submit never waits for the network
    assert sink.queued() <= 10
    wait_for("failed attempts", lambda: sink.failed >= 2, 10, every=0.05)
    assert sink.dropped >= 1000 - 11  # the oldest gave way, counted
    sink.close(timeout=0.5)


def test_closing_a_webhook_retries_what_is_in_flight_and_counts_what_it_could_not_send():
    """The last event (a resolution at shutdown) is retried through close's time when its
    first POST fails; a target that never answers has it counted and named, not lost."""
    from reveal.live.sinks import WebhookSink

    received: list[dict] = []

    class FlakyHandler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            refuse = not getattr(self.server, "refused", False)
            self.server.refused = True  # type: ignore[attr-defined]
            self.send_response(503 if refuse else 200)
            self.end_headers()
            if not refuse:
                received.append(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        delivered: list[str] = []
        sink = WebhookSink(f"http://127.0.0.1:{server.server_address[1]}/hook",
                           on_delivered=lambda _name, event: delivered.append(event["id"]),
                           backoff_s=0.2)
        sink.submit({"event": "resolved", "id": "last"})
        sink.close(timeout=5.0)
        assert [b["id"] for b in received] == ["last"] and delivered == ["last"]
        assert sink.failed == 1 and sink.dropped == 0
    finally:
        server.shutdown()
        server.server_close()

    warnings: list[str] = []
    dead = WebhookSink(f"http://127.0.0.1:{free_port()}/hook", backoff_s=0.1,
                       notify=lambda level, text: warnings.append(f"{level}: {text}"))
    dead.submit({"event": "resolved", "id": "lost"})
    t0 = time.monotonic()
    dead.close(timeout=1.0)
    assert time.monotonic() - t0 < 3.0
    assert dead.dropped == 1 and dead.failed >= 2
    assert any("1 alert event(s) not delivered" in w for w in warnings)


@pytest.mark.alone  # the model it loads is the first test's, which runs alone
def test_watch_goes_on_scoring_with_dead_sinks(servers, tmp_path):
    """Unreachable Alertmanager and webhook: one warning each, scoring goes on."""
    model = servers["root"] / "state" / "model.reveal"
    if not model.exists():
        pytest.skip("needs the model of the first test")
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(model, state / "model.reveal")
    port = free_port()
    watch = WatchProcess(state, [
        "--listen", f"127.0.0.1:{port}", "--threshold-factor", "0.001", "--score-every", "2",
        "--alertmanager", f"http://127.0.0.1:{free_port()}",
        "--alert-webhook", f"http://127.0.0.1:{free_port()}/hook"], tmp_path / "w.log")
    busy = hog()  # a real anomaly, so that windows are flagged and alerts are sent
    try:
        def scored():
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                          timeout=2).read().decode()
            values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                          if line and not line.startswith("#"))
            n = float(values.get("reveal_windows_scored_total", 0))
            failures = float(values.get('reveal_alert_sink_failures_total{sink="webhook"}', 0))
            return n >= 8 and failures >= 1 and values

        values = wait_for("windows scored while the sinks fail", scored, 90)
        assert float(values["reveal_windows_flagged_total"]) >= 1
        queued = float(values['reveal_alert_sink_queue_length{sink="alertmanager"}'])
        assert queued <= 1000
        log = watch.text()
        assert "does not answer" in log  # Alertmanager unreachable: said once, at start
        assert log.count("alert sink webhook:") == 1
        watch.proc.send_signal(signal.SIGTERM)
        assert watch.proc.wait(60) == 0
    finally:
        busy.kill()
        busy.wait()
        if watch.proc.poll() is None:
            watch.proc.kill()
        watch.proc.wait()


def run_watch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reveal.cli", "watch", *args],
                          capture_output=True, text=True, timeout=120)


def test_bad_inputs_are_one_line_errors(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("")
    cases = []
    cases.append((run_watch("--state", str(a_file / "sub"), "--listen", "none"),
                  "state directory is not writable"))
    cases.append((run_watch("--state", str(tmp_path / "s1"), "--learn", "30s",
                            "--listen", "none"), "at least 60 windows"))
    damaged = tmp_path / "s2"
    damaged.mkdir()
    (damaged / "model.reveal").write_bytes(b"REVEAL-MODEL\n{not json\n")
    cases.append((run_watch("--state", str(damaged), "--listen", "none"), "--relearn"))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        cases.append((run_watch("--state", str(tmp_path / "s3"), "--listen",
                                f"127.0.0.1:{port}", "--learn", "2m"), "cannot listen"))
    cases.append((run_watch("--state", str(tmp_path / "s4"), "--alertmanager", "ftp://x",
                            "--listen", "none"), "http://"))
    cases.append((run_watch("--state", str(tmp_path / "s6"), "--learn", "10m",
                            "--refit-every", "5m", "--listen", "none"),
                  "shorter than --learn"))
    cases.append((run_watch("--state", str(tmp_path / "s7"), "--adopt"),
                  "no reveal watch runs on this state directory"))
    cases.append((run_watch("--state", str(tmp_path / "s7"), "--adopt", "soon"),
                  "expected a duration"))
    for proc, needle in cases:
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert needle in lines[-1] and lines[-1].startswith("reveal watch: error:"), lines
        assert "Traceback" not in proc.stderr
    # a second watch on the same state directory
    state = tmp_path / "s5"
    first = subprocess.Popen([sys.executable, "-m", "reveal.cli", "watch", "--state",
                              str(state), "--listen", "none", "--learn", "2m"],
                             stderr=subprocess.PIPE, text=True)
    try:
        wait_for("the first watch to hold its state directory",
                 lambda: (state / "lock").exists() and (state / "lock").read_text(), 30)
        second = run_watch("--state", str(state), "--listen", "none", "--learn", "2m")
        assert second.returncode == 2 and "another reveal watch" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0


def test_a_model_of_another_release_is_kept_aside_and_a_new_one_learned(tmp_path):
    """An upgrade (a new image on an old state directory) must not stop the watch: a model
    written in another format is renamed, said once, and the watch learns a new one."""
    state = tmp_path / "state"
    state.mkdir()
    old = (b'REVEAL-MODEL\n{"format": "reveal-model", "format_version": 0, '
           b'"reveal_version": "0.0"}\nold payload')
    (state / "model.reveal").write_bytes(old)
    watch = subprocess.Popen([sys.executable, "-m", "reveal.cli", "watch", "--state",
                              str(state), "--listen", "none", "--learn", "2m"],
                             stderr=subprocess.PIPE, text=True)
    try:
        kept = wait_for("the old model to be set aside", lambda: list(
            state.glob("model.reveal.unreadable-*")), 60)
        time.sleep(1)
        assert watch.poll() is None  # still running: learning
    finally:
        watch.send_signal(signal.SIGTERM)
        _, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err[-2000:]
    assert len(kept) == 1 and kept[0].read_bytes() == old  # nothing lost
    said = [line for line in err.splitlines() if kept[0].name in line]
    assert len(said) == 1 and "format 0 (written by Reveal 0.0)" in said[0], err[-2000:]
    assert "a new model is learned from the first 120 s" in said[0]
    assert "learning a model" in err and "Traceback" not in err


@pytest.mark.alone  # the refit waits for a quiet span: other tests' load is no quiet span
def test_a_refit_on_a_quiet_span_adopts_channels_that_appeared(tmp_path):
    """``--refit-every``: a cgroup made after the learn is reported as unknown, recorded,
    and part of the model once the watch learns again on a span with no flagged window."""
    from reveal.collect.cgroup import cgroup_label, cgroup_mounts
    from reveal.inject.naming import owned_name
    from reveal.model import Reveal
    from runs import rmdir_patiently

    if os.geteuid() != 0:
        pytest.skip("needs root to create a cgroup")
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    kind = next((k for k in ("cpu", "v2") if k in mounts and Path(mounts[k]).is_dir()), None)
    if kind is None:
        pytest.skip("no cpu or v2 cgroup hierarchy here")
    root = Path(mounts[kind])
    name = owned_name(f"refit-{os.urandom(3).hex()}")
    state = tmp_path / "state"
    args = ["--learn", "20s", "--allow-short-learn", "--refit-every", "20s", "--listen", "none",
            "--threshold-factor", "1e6",  # nothing flagged: every span is quiet
            "--probe-option", f"cgroup.patterns={name}"]
    if kind != "cpu":
        args += ["--probe-option", f"cgroup.cgroup_root={root}"]
    watch = WatchProcess(state, args, tmp_path / "watch.log")
    made = root / name
    try:
        wait_for("the model to be learned", lambda: "; scoring" in watch.text(), 120)
        made.mkdir()
        wait_for("the new cgroup reported as unknown to the model",
                 lambda: "appeared that the model does not know" in watch.text(), 60)
        wait_for("a refit", lambda: "model refitted" in watch.text(), 180)
    finally:
        watch.proc.send_signal(signal.SIGTERM)
        watch.proc.wait(60)
        rmdir_patiently(made)
    assert watch.proc.returncode == 0, watch.text()
    info = json.loads((state / "watch.json").read_text())
    assert info["generation"] >= 2
    fitted = Reveal.load(state / "model.reveal").fitted_
    # how much of the span the fit left out as bursts is on record beside the model
    assert info["windows"] == fitted.baseline_windows > 0
    assert info["windows_left_out"] == fitted.ensemble.baseline_trimmed_
    label = cgroup_label(name)
    assert any(f"cgroup={label}" in c for c in fitted.baseline_channels), watch.text()


@pytest.mark.alone  # no alert before the memory is taken: other tests' memory is a change
def test_the_operator_adopts_a_held_change_and_its_alert_resolves(tmp_path):
    """1 GiB of anonymous memory taken after the learn and held: it is alerted and stays
    alerted while held (a fault that holds is no new normal by itself). ``reveal watch
    --adopt 20s`` asks the running watch to learn from the latest 20 s, all of them with
    the memory held: the alert resolves while the memory is still held, and nothing fires
    again."""
    alerts, state = tmp_path / "alerts.jsonl", tmp_path / "state"
    watch = WatchProcess(state, ["--learn", "20s", "--allow-short-learn", "--listen", "none",
                                 "--resolve-after", "5s", "--alerts-file", str(alerts)],
                         tmp_path / "watch.log")
    holder = None

    def events(status: str) -> list[dict]:
        if not alerts.exists():
            return []
        return [e for e in map(json.loads, alerts.read_text().splitlines())
                if e.get("status") == status]

    try:
        wait_for("the model to be learned", lambda: "; scoring" in watch.text(), 120)
        time.sleep(5)
        assert not events("firing"), watch.text()[-2000:]
        holder = subprocess.Popen([sys.executable, "-c",
                                   "import time; held = b'x' * (1 << 30); time.sleep(600)"])
        wait_for("the held memory alerted", lambda: events("firing"), 60)
        time.sleep(25)  # the latest 20 s hold the memory throughout
        assert not events("resolved"), watch.text()[-2000:]  # held: still firing
        asked = run_watch("--state", str(state), "--adopt", "20s")
        assert asked.returncode == 0, asked.stderr
        assert "adopt the latest 20 s as normal" in asked.stderr
        wait_for("the adoption", lambda: "adopted as normal at the operator's request"
                 in watch.text(), 120)
        wait_for("the alert resolved", lambda: events("resolved"), 60)
        assert holder.poll() is None  # resolved while the memory is still held
        fired = len(events("firing"))
        time.sleep(15)
        assert len(events("firing")) == fired, watch.text()[-2000:]
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        watch.proc.send_signal(signal.SIGTERM)
        watch.proc.wait(60)
    assert watch.proc.returncode == 0, watch.text()[-2000:]
    assert json.loads((state / "watch.json").read_text())["adopted_on_request"] is True
    assert not (state / "adopt.request").exists()


def test_systemd_unit_and_dashboard_are_printed(tmp_path):
    unit = run_watch("--state", str(tmp_path / "s"), "--alertmanager",
                     "http://127.0.0.1:9093", "--systemd-unit")
    assert unit.returncode == 0
    assert "ExecStart=" in unit.stdout and "watch --state" in unit.stdout
    assert "--alertmanager http://127.0.0.1:9093" in unit.stdout
    assert "--systemd-unit" not in unit.stdout.split("ExecStart=")[1].splitlines()[0]
    dashboard = json.loads(run_watch("--grafana-dashboard").stdout)
    assert dashboard["panels"] and all(p["targets"] for p in dashboard["panels"])
    assert os.path.exists(tmp_path) and not (tmp_path / "s").exists()  # nothing created
