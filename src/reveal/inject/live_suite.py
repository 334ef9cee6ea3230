"""``reveal validate --live``: the fault suite against a running ``reveal watch``.

Per scenario (the same scenarios, workloads and faults as the recorded suite): the
reference workload starts; ``reveal watch`` starts beside it with a fresh state directory,
learns for ``baseline_s`` and then scores every window as it closes, sending its alert
events to a webhook served by this process. The faults are then injected one after
another (``gap_s`` of clean time between, at least :data:`MIN_GAP_S` so that an alert can
resolve), each recorded with its monotonic start and end as in the recorded suite. A
fault waits (at most :data:`QUIET_WAIT_S`) until every alert that fired has resolved, as
one injected into an open alert would only extend it; one that could not wait is listed.

Scoring is what an operator sees, not windows: an episode is **detected** when a
``firing`` or ``update`` event reaches the webhook between the fault's start and
``settle_s`` after its end; the **time to alert** is from the fault's start to the first
such event's arrival (collection, windowing, scoring, persistence and delivery included);
it is **attributed** when that event's subsystem is the fault's. A ``firing`` event that
arrives outside every such span is a **false alert**, counted per hour of clean time.

With ``via_alertmanager`` the watch sends its alerts to a real Alertmanager started for the
suite, whose webhook notifications are what is scored (an episode's first ``firing`` and
its ``resolved``; :mod:`reveal.inject.alertmanager` names its route's waits).

With ``clean_s`` the first scenario first runs that long with no fault after the learn,
the run an operator's pager sees most: its alert episodes (``firing`` events) are counted
on their own, and the watch's resident memory is read every :data:`RSS_EVERY_S`.
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reveal.catalog import default_catalog
from reveal.errors import RevealError
from reveal.frame import channel_metric
from reveal.inject import processes
from reveal.inject.alertmanager import GROUP_WAIT, LocalAlertmanager
from reveal.inject.cleanup import make_temp_dir
from reveal.inject.faults import FAULTS, FaultContext, fault_class, make_fault, run_episode
from reveal.inject.groundtruth import Episode, EventLog
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.scenario import WARMUP_S, Say, Scenario
from reveal.inject.veth_pair import NetnsPair
from reveal.inject.workloads import WorkloadRun, default_workload, unavailable_reason
from reveal.report.escape import markdown
from reveal.settings import set_arguments

#: Least clean time between two faults, seconds: the watch resolves an alert after
#: ``resolve_after_s`` without a flagged window, a window is 3 s long and the watch scores
#: up to ``score_every`` (5) windows at a time; a fault still waits for open alerts to
#: resolve (:data:`QUIET_WAIT_S`).
MIN_GAP_S = 20.0
#: Clean time between two faults unless told (``--gap-seconds``), seconds; ``--quick``
#: takes the least.
GAP_S = 30.0
RESOLVE_AFTER_S = 5.0


def live_gap(given_s: float | None, quick: bool) -> float:
    """Clean time between two faults of a live suite (seconds): ``given_s``
    (``--gap-seconds``), else :data:`GAP_S`, :data:`MIN_GAP_S` with ``--quick``; a gap too
    short for an alert to resolve is refused."""
    gap = given_s if given_s is not None else (MIN_GAP_S if quick else GAP_S)
    if gap < MIN_GAP_S:
        raise RevealError(f"--gap-seconds must be at least {MIN_GAP_S:g} with --live (an "
                          f"alert resolves {RESOLVE_AFTER_S:g} s after its last flagged window)")
    return gap
#: Longest wait for the watch to learn beyond ``baseline_s`` (start-up, imports, fit).
LEARN_SLACK_S = 300.0
#: Longest wait for open alerts to resolve before the next fault: a fault injected while
#: an alert is open would only extend it.
QUIET_WAIT_S = 120.0
#: How often the watch's resident memory is read during a clean span, seconds.
RSS_EVERY_S = 10.0
#: Memory growth over a clean span is judged from this long after its start (seconds):
#: the first minutes still hold what the fit allocated.
SETTLE_RSS_S = 300.0
#: How long a restarted watch may take to load its model and score again (seconds).
RESTART_WAIT_S = 120.0
#: Alert episodes a fault may leave once its settle has passed (its new steady state).
AFTERMATH_EPISODES = 1
#: seconds a fault begun before the learn (``--through-learn``) holds once the watch
#: scores, before it is undone
THROUGH_AFTER_S = 10.0
#: what the watch says once it scores with a span adopted at the operator's request
ADOPTED_TEXT = "adopted as normal at the operator's request"
#: how the watch names a channel of an unhealthy baseline at the end of its learn
UNHEALTHY_LINE = re.compile(r"unhealthy baseline: (\S+)")
TARGETS = {"recall": 0.95, "median_alert_s": 5.0, "p95_alert_s": 8.0,
           "attribution_accuracy": 0.90}


@dataclass
class Alert:
    """One event the watch sent, as received (``received_ns``: this host's monotonic ns)."""

    received_ns: int
    event: str
    id: str
    subsystem: str
    claim: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_alertmanager(body: Any, received_ns: int, open_ids: set[str]) -> list[Alert]:
    """The events in one notification of Alertmanager's webhook (``{"alerts": [{"status",
    "labels", "annotations"}, ...]}``), as the watch's own events: an episode's first
    ``firing`` and its ``resolved``. A group's later notifications repeat alerts already
    heard; only a change of state is kept. ``open_ids``: the episodes heard firing and not
    resolved yet (updated in place)."""
    events = []
    for alert in body.get("alerts") or []:
        labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
        episode = str(labels.get("episode", ""))
        status = str(alert.get("status", ""))
        if status == "firing" and episode not in open_ids:
            open_ids.add(episode)
        elif status == "resolved" and episode in open_ids:
            open_ids.discard(episode)
        else:
            continue
        events.append(Alert(received_ns, status, episode, str(labels.get("subsystem", "")),
                            str(notes.get("claim", ""))))
    return events


class Receiver:
    """A webhook on 127.0.0.1 that keeps every event with its arrival time: the watch's
    own events at ``url``, Alertmanager's notifications at ``alertmanager_url``."""

    def __init__(self) -> None:
        self.alerts: list[Alert] = []
        alerts = self.alerts
        open_ids: set[str] = set()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                received = time.monotonic_ns()
                try:
                    body = json.loads(self.rfile.read(length))
                    if self.path == "/alertmanager":
                        alerts.extend(from_alertmanager(body, received, open_ids))
                    else:
                        alerts.append(Alert(received, str(body.get("event", "")),
                                            str(body.get("id", "")),
                                            str(body.get("subsystem", "")),
                                            str(body.get("claim", ""))))
                    self.send_response(200)
                except (ValueError, AttributeError, TypeError):
                    self.send_response(400)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self.alertmanager_url = f"http://127.0.0.1:{self.server.server_address[1]}/alertmanager"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="reveal-validate-webhook")
        self.thread.start()

    def open_alerts(self) -> set[str]:
        """Ids of alerts that fired and have not resolved yet."""
        fired = {a.id for a in list(self.alerts) if a.event == "firing"}
        return fired - {a.id for a in list(self.alerts) if a.event == "resolved"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class LiveScenario:
    """What one scenario gave: the injected episodes, the alerts, the scored span."""

    name: str
    workload: str
    episodes: list[Episode]
    alerts: list[Alert]
    scored_from_ns: int
    scored_to_ns: int
    skipped: list[str] = field(default_factory=list)
    clean: CleanSpan | None = None
    through_learn: ThroughLearn | None = None


@dataclass
class ThroughLearn:
    """A fault begun before the watch's learn and undone :data:`THROUGH_AFTER_S` after
    the watch began to score: its episode, the channels the watch named an unhealthy
    baseline at the end of its learn (catalog ``healthy`` ranges) and, where it warned,
    when the watch adopted a span learned after the undo as the operator asked it
    (``adopted_ns``, monotonic ns; None: not asked, or the watch did not adopt)."""

    episode: Episode
    channels: list[str]
    adopted_ns: int | None = None

    def span(self, settle_s: float) -> tuple[int, int]:
        """What it covers, monotonic ns: from its start to its settle after its end, or
        after the adoption that followed it."""
        end = max(self.episode.end_ns, self.adopted_ns or 0)
        return self.episode.start_ns, end + int(settle_s * 1e9)

    def summary(self, alerts: list[Alert], from_ns: int, settle_s: float) -> dict[str, Any]:
        """Whether the watch warned of it, naming a channel of its subsystem, and the alert
        episodes that fired while it held after the learn (``from_ns``) or as it ended."""
        ep = self.episode
        subsystems = [default_catalog().lookup(channel_metric(c)).subsystem
                      for c in self.channels]
        _, until = self.span(settle_s)
        fired = [a for a in alerts if a.event == "firing" and from_ns <= a.received_ns <= until]
        resolved = {a.id: a.received_ns for a in alerts if a.event == "resolved"}
        adopted = self.adopted_ns
        open_at_adopt = [resolved.get(a.id) for a in fired
                         if adopted is not None and a.received_ns <= adopted
                         and resolved.get(a.id, adopted + 1) > adopted]
        return {"kind": ep.kind, "intensity": ep.intensity, "subsystem": ep.subsystem,
                "seconds": round((ep.end_ns - ep.start_ns) / 1e9, 1),
                "held_after_learn_s": round((ep.end_ns - from_ns) / 1e9, 1),
                "warned": bool(self.channels), "channels": self.channels,
                "named_subsystem": ep.subsystem in subsystems,
                "alert_episodes": len(fired),
                "claims": [a.claim for a in fired],
                "adopted": adopted is not None,
                "adopted_after_undo_s": (round((adopted - ep.end_ns) / 1e9, 1)
                                         if adopted is not None else None),
                # seconds from the adoption until every alert it found open resolved (0.0:
                # none was open; None: not adopted, or one was still open at the end)
                "resolved_after_adopt_s": (None if adopted is None
                                           or any(r is None for r in open_at_adopt)
                                           else round(max((r - adopted for r in open_at_adopt),
                                                          default=0) / 1e9, 1))}


def through_learn_fault(text: str) -> tuple[str, str]:
    """``KIND[:INTENSITY]`` (intensity ``high`` unless given) for ``--through-learn``:
    a fault kind that holds until undone, at one of its intensities."""
    kind, _, intensity = text.partition(":")
    if kind not in FAULTS:
        raise RevealError(f"--through-learn {text}: unknown fault {kind!r} (choose from "
                          f"{', '.join(FAULTS)})")
    cls = fault_class(kind)
    intensity = intensity or "high"
    if intensity not in cls.INTENSITIES:
        raise RevealError(f"--through-learn {text}: {kind} has no intensity {intensity!r} "
                          f"(choose from {', '.join(cls.INTENSITIES)})")
    if cls.self_ending:
        raise RevealError(f"--through-learn {text}: {kind} ends by itself; choose a fault "
                          "that holds until undone")
    return kind, intensity


def unhealthy_channels(log_text: str) -> list[str]:
    """The channels the watch's log names for an unhealthy baseline, each once, in order."""
    return list(dict.fromkeys(UNHEALTHY_LINE.findall(log_text)))


@dataclass
class CleanSpan:
    """A span with no fault after the learn: its bounds (monotonic ns) and the watch's
    resident memory (bytes) read every :data:`RSS_EVERY_S`."""

    from_ns: int
    to_ns: int
    rss_bytes: list[int]

    def summary(self, alerts: list[Alert]) -> dict[str, Any]:
        """Alert episodes that fired within the span, and the watch's memory over it."""
        fired = [a for a in alerts if a.event == "firing"
                 and self.from_ns <= a.received_ns <= self.to_ns]
        rss = self.rss_bytes or [0]
        # the first minutes still hold the fit's memory: flatness is judged after them
        settled = rss[min(len(rss) - 1, int(SETTLE_RSS_S / RSS_EVERY_S)):]
        return {"seconds": round((self.to_ns - self.from_ns) / 1e9, 1),
                "alert_episodes": len(fired),
                "alerts": [{**a.to_dict(), "since_start_s": (a.received_ns - self.from_ns) / 1e9}
                           for a in fired],
                "rss_bytes": {"start": rss[0], "end": rss[-1], "max": max(rss),
                              "growth": rss[-1] - rss[0], "every_s": RSS_EVERY_S,
                              "samples": len(self.rss_bytes),
                              "settled_after_s": SETTLE_RSS_S, "settled_start": settled[0],
                              "settled_max": max(settled),
                              "settled_growth": settled[-1] - settled[0]}}


def _watch_argv(state: Path, learn_s: float, interval_s: float, url: str,
                score_every: int, settings: Mapping[str, Any] | None = None,
                alertmanager: str | None = None) -> list[str]:
    """The watch's command line: its alerts to the webhook ``url``, or to Alertmanager's
    API at ``alertmanager`` (which routes them to the suite's webhook)."""
    sink = ["--alertmanager", alertmanager] if alertmanager else ["--alert-webhook", url]
    return [sys.executable, "-m", "reveal.cli", "watch", "--state", str(state),
            "--learn", f"{learn_s:g}s", "--allow-short-learn", "--interval", f"{interval_s:g}",
            "--resolve-after", f"{RESOLVE_AFTER_S:g}s", *sink,
            "--score-every", str(score_every), *set_arguments(settings)]


def _wait_scoring(log: Path, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    def scoring() -> bool:
        return proc.poll() is not None or (log.is_file() and "; scoring" in log.read_text(
            encoding="utf-8", errors="replace"))

    processes.wait_until(scoring, timeout_s)
    if proc.poll() is not None:
        raise RevealError(f"reveal watch exited with code {proc.returncode} (see {log})")
    if "; scoring" not in log.read_text(encoding="utf-8", errors="replace"):
        raise RevealError(f"reveal watch did not start scoring within {timeout_s:g} s "
                          f"(see {log})")


def _adopt_after_undo(state: Path, log: Path, watch: subprocess.Popen[bytes],
                      learn_s: float, say: Say) -> int | None:
    """As an operator answers an unhealthy-baseline warning once the fault is gone: wait
    until a whole learn (``learn_s``) has passed since the undo, then ask the watch to adopt
    that span (``reveal watch --adopt``) and wait until it scores with it. The monotonic ns
    it adopted at; None when it refused or failed (said, and the suite goes on)."""
    say(f"  as the operator would: adopting the {learn_s:g} s after the undo once they "
        "have passed (reveal watch --adopt)")
    time.sleep(learn_s)
    adopted_before = log.read_text(errors="replace").count(ADOPTED_TEXT)
    asked = subprocess.run([sys.executable, "-m", "reveal.cli", "watch", "--state", str(state),
                            "--adopt"], capture_output=True, text=True, timeout=60)
    if asked.returncode != 0:
        say(f"  the watch refused the adoption: {asked.stderr.strip()[-300:]}")
        return None

    def adopted() -> bool:
        return watch.poll() is not None or log.read_text(
            errors="replace").count(ADOPTED_TEXT) > adopted_before

    processes.wait_until(adopted, learn_s + LEARN_SLACK_S)
    if log.read_text(errors="replace").count(ADOPTED_TEXT) <= adopted_before:
        say(f"  the watch did not adopt (see {log})")
        return None
    return time.monotonic_ns()


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (bytes); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _clean_span(watch: subprocess.Popen[bytes], seconds: float, say: Say) -> CleanSpan:
    """``seconds`` with no fault, reading the watch's memory every :data:`RSS_EVERY_S`."""
    span = CleanSpan(time.monotonic_ns(), 0, [rss_bytes(watch.pid)])
    end = time.monotonic() + seconds
    next_say = time.monotonic() + 300.0
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(RSS_EVERY_S, left))
        if watch.poll() is not None:
            raise RevealError(f"reveal watch exited with code {watch.returncode} during the "
                              f"clean span")
        span.rss_bytes.append(rss_bytes(watch.pid))
        if time.monotonic() >= next_say:
            next_say += 300.0
            say(f"  clean span: {max(0.0, left) / 60:.0f} min left, watch RSS "
                f"{span.rss_bytes[-1] / 2**20:.0f} MiB")
    span.to_ns = time.monotonic_ns()
    return span


def run_live_scenario(scenario: Scenario, out_dir: Path, say: Say, gap_s: float,
                      settle_s: float, workload: str | None = None,
                      score_every: int = 5, clean_s: float = 0.0,
                      settings: Mapping[str, Any] | None = None,
                      via_alertmanager: bool = False,
                      through_learn: tuple[str, str] | None = None) -> LiveScenario:
    """Run ``scenario``'s faults, in order, against a watch that learned ``baseline_s``,
    after ``clean_s`` with no fault (0: none); ``settings``: the watch's analysis settings
    by dotted name; ``via_alertmanager``: the watch's alerts go through a real Alertmanager
    (:mod:`reveal.inject.alertmanager`) to the suite's webhook; ``through_learn``: a fault
    (kind, intensity) begun before the watch starts and undone :data:`THROUGH_AFTER_S`
    after it scores (:class:`ThroughLearn`)."""
    name = workload or default_workload(scenario.distributed)
    reason = unavailable_reason(name)
    if reason:
        raise RevealError(f"scenario {scenario.name}: {reason}")
    plans = [p for run in scenario.plans for p in run]
    gap = live_gap(gap_s, quick=False)  # too short a gap is refused, not lengthened
    faults_s = sum(p.duration_s * 3 + gap for p in plans)
    adopt_s = scenario.baseline_s + LEARN_SLACK_S if through_learn is not None else 0.0
    total = (WARMUP_S + scenario.baseline_s + LEARN_SLACK_S + adopt_s + clean_s + faults_s
             + settle_s + 60.0)
    here = out_dir / scenario.name
    here.mkdir(parents=True, exist_ok=True)
    workdir = make_temp_dir(f"live-{scenario.name}")
    netns = NetnsPair(tag=scenario.name[:6]).create() if scenario.distributed else None
    cgroup = JobCgroup().create()
    job = WorkloadRun(name, workdir, total, netns=netns, cgroup=cgroup)
    receiver = Receiver()
    manager: LocalAlertmanager | None = None
    watch: subprocess.Popen[bytes] | None = None
    episodes: list[Episode] = []
    skipped: list[str] = []
    clean: CleanSpan | None = None
    through: ThroughLearn | None = None
    held: dict[str, Episode] = {}
    held_stop = threading.Event()
    holder: threading.Thread | None = None
    try:
        if via_alertmanager:
            manager = LocalAlertmanager(receiver.alertmanager_url,
                                        log=here / "alertmanager.log")
            say(f"live scenario {scenario.name}: alerts through Alertmanager at "
                f"{manager.url}")
        say(f"live scenario {scenario.name}: starting workload {name}")
        job.start()
        time.sleep(WARMUP_S)
        if through_learn is not None:
            first = make_fault(*through_learn, FaultContext(workdir, netns))
            why = first.check()
            if why:
                skipped.append(f"{first.kind} through the learn: {why}")
            else:
                say(f"live scenario {scenario.name}: {first.kind} ({first.intensity}) "
                    "begins before the learn")
                holder = threading.Thread(target=lambda: held.update(episode=run_episode(
                    first, total, None, stop=held_stop)), name="through-learn", daemon=True)
                holder.start()
        log = here / "watch.log"
        # a fresh state directory: a model an earlier suite left there would be loaded, not
        # learned, and the suite would score that model
        shutil.rmtree(here / "state", ignore_errors=True)
        watch = processes.start(_watch_argv(here / "state", scenario.baseline_s,
                                            scenario.interval_s, receiver.url,
                                            score_every, settings,
                                            manager.url if manager else None), stdout=log)
        say(f"live scenario {scenario.name}: reveal watch learns for "
            f"{scenario.baseline_s:g} s")
        _wait_scoring(log, watch, scenario.baseline_s + LEARN_SLACK_S)
        scored_from = time.monotonic_ns()
        if holder is not None:
            time.sleep(THROUGH_AFTER_S)
            held_stop.set()
            holder.join()
            if "episode" not in held:
                raise RevealError(f"the fault begun before the learn failed (see {workdir})")
            through = ThroughLearn(held["episode"], unhealthy_channels(log.read_text(
                errors="replace")))
            say(f"live scenario {scenario.name}: {through.episode.kind} undone; the watch "
                f"warned of {len(through.channels)} unhealthy baseline channel(s)")
            if through.channels:  # the operator's answer to the warning
                through.adopted_ns = _adopt_after_undo(here / "state", log, watch,
                                                       scenario.baseline_s, say)
        if clean_s > 0:
            say(f"live scenario {scenario.name}: {clean_s:g} s with no fault")
            clean = _clean_span(watch, clean_s, say)
        time.sleep(gap)
        events = EventLog(here)
        restarts = 0

        def restart_watch() -> None:
            """Stop the watch (SIGTERM) and start it again on its state directory; return
            once it scores (with the saved model) again."""
            nonlocal watch, restarts
            assert watch is not None
            restarts += 1
            processes.stop(watch, grace_s=30.0)  # as systemd would wait for it
            again = here / f"watch-restart{restarts}.log"
            watch = processes.start(_watch_argv(here / "state", scenario.baseline_s,
                                                scenario.interval_s, receiver.url,
                                                score_every, settings,
                                                manager.url if manager else None),
                                    stdout=again)
            _wait_scoring(again, watch, RESTART_WAIT_S)

        context = FaultContext(workdir, netns, restart_watch=restart_watch)
        for i, plan in enumerate(plans, 1):
            fault = make_fault(plan.kind, plan.intensity, context)
            why = fault.check()
            if why:
                skipped.append(f"{plan.kind}: {why}")
                continue
            if not processes.wait_until(lambda: not receiver.open_alerts(), QUIET_WAIT_S, 0.2):
                skipped.append(f"{plan.kind} ({plan.intensity}): injected with an alert "
                               f"still open after {QUIET_WAIT_S:g} s")
            say(f"  {i}/{len(plans)}: {plan.kind} ({plan.intensity}) for "
                f"{plan.duration_s:g} s")
            episodes.append(run_episode(fault, plan.duration_s, events,
                                        max_s=3 * plan.duration_s))
            if not job.alive():
                raise RevealError(f"workload {name} stopped (see {job.log_path(0)})")
            if watch.poll() is not None:
                raise RevealError(f"reveal watch exited with code {watch.returncode} "
                                  f"(see {log})")
            time.sleep(gap)
        time.sleep(max(0.0, settle_s - gap))
        scored_to = time.monotonic_ns()
        return LiveScenario(scenario.name, name, episodes, list(receiver.alerts),
                            scored_from, scored_to, skipped, clean, through)
    finally:
        held_stop.set()
        if holder is not None:
            holder.join()
        if watch is not None and watch.poll() is None:
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(60)
            except subprocess.TimeoutExpired:
                watch.kill()
                watch.wait()
        receiver.close()
        if manager is not None:
            manager.close()
        job.stop()
        cgroup.close()
        if netns is not None:
            netns.close()
        shutil.rmtree(workdir, ignore_errors=True)


def aftermath(alerts: list[Alert], from_ns: int, until_ns: int) -> dict[str, Any]:
    """What followed a fault once its settle had passed (``from_ns``) until the next fault
    began or scoring ended (``until_ns``): the alert episodes that opened then, and, when
    an alert was still open at ``until_ns`` (the host not settled), since when (seconds
    from ``from_ns``; None when every alert had resolved)."""
    opened = [a for a in alerts if a.event == "firing" and from_ns < a.received_ns <= until_ns]
    fired = {a.id: a.received_ns for a in alerts
             if a.event == "firing" and a.received_ns <= until_ns}
    resolved = {a.id for a in alerts if a.event == "resolved" and a.received_ns <= until_ns}
    still = [t for i, t in fired.items() if i not in resolved]
    return {"aftermath_alerts": len(opened),
            "aftermath_claims": [a.claim for a in opened],
            "open_at_next_s": (max(0.0, (min(still) - from_ns) / 1e9) if still else None)}


def holding(alerts: list[Alert], start_ns: int, end_ns: int,
            until_ns: int) -> dict[str, float | None]:
    """How long the watch's alerts held a fault from ``start_ns`` to ``end_ns``:
    ``firing_share``, the share of the fault during which an alert was open (fired, not
    yet resolved), and ``resolved_after_s``, seconds from the fault's end until every
    alert open at its end had resolved (0.0: none was open; None: one was still open at
    ``until_ns``, the next fault or the end of scoring)."""
    fired = {a.id: a.received_ns for a in alerts if a.event == "firing"}
    resolved = {a.id: a.received_ns for a in alerts if a.event == "resolved"}
    spans = sorted((t, resolved.get(i, until_ns)) for i, t in fired.items()
                   if t < end_ns and resolved.get(i, until_ns) > start_ns)
    held, reach = 0, start_ns
    for lo, hi in spans:  # the union of the open spans within the fault
        lo, hi = max(lo, reach), min(hi, end_ns)
        if hi > lo:
            held += hi - lo
            reach = hi
    open_at_end = [resolved.get(i) for i, t in fired.items()
                   if t <= end_ns and resolved.get(i, until_ns + 1) > end_ns]
    after = (None if any(r is None or r > until_ns for r in open_at_end)
             else max((r - end_ns for r in open_at_end), default=0) / 1e9)
    return {"firing_share": held / (end_ns - start_ns) if end_ns > start_ns else None,
            "resolved_after_s": after}


def score_live(scenarios: list[LiveScenario], settle_s: float) -> dict[str, Any]:
    """Per-episode verdicts, totals and rows by (fault, intensity), and false alerts."""
    verdicts: list[dict[str, Any]] = []
    false_alerts: list[dict[str, Any]] = []
    clean_s = 0.0
    through: list[dict[str, Any]] = []
    for sc in scenarios:
        spans = [(e.start_ns, e.end_ns + int(settle_s * 1e9)) for e in sc.episodes]
        nexts = [*(e.start_ns for e in sc.episodes[1:]), sc.scored_to_ns]
        for ep, (lo, hi), until in zip(sc.episodes, spans, nexts, strict=True):
            hits = [a for a in sc.alerts if a.event in ("firing", "update")
                    and lo <= a.received_ns <= hi]
            first = min(hits, key=lambda a: a.received_ns) if hits else None
            verdicts.append({
                "scenario": sc.name, "kind": ep.kind, "intensity": ep.intensity,
                "subsystem": ep.subsystem, "duration_s": (ep.end_ns - ep.start_ns) / 1e9,
                "detected": first is not None,
                "alert_s": (first.received_ns - ep.start_ns) / 1e9 if first else None,
                "alerted_subsystem": first.subsystem if first else None,
                "attribution_ok": bool(first and first.subsystem == ep.subsystem),
                "claim": first.claim if first else None,
                **holding(sc.alerts, ep.start_ns, ep.end_ns, until),
                **aftermath(sc.alerts, hi, until)})
        if sc.through_learn is not None:  # its alerts are its own, not false ones
            through.append({"scenario": sc.name, **sc.through_learn.summary(
                sc.alerts, sc.scored_from_ns, settle_s)})
            spans.append(sc.through_learn.span(settle_s))
        for a in sc.alerts:
            if a.event == "firing" and not any(lo <= a.received_ns <= hi for lo, hi in spans):
                false_alerts.append({"scenario": sc.name, **a.to_dict(),
                                     "since_scoring_s": (a.received_ns - sc.scored_from_ns)
                                     / 1e9})
        covered = sum(min(hi, sc.scored_to_ns) - max(lo, sc.scored_from_ns)
                      for lo, hi in spans if hi > sc.scored_from_ns)
        clean_s += max(0.0, (sc.scored_to_ns - sc.scored_from_ns - covered) / 1e9)

    def block(group: list[dict[str, Any]]) -> dict[str, Any]:
        detected = [v for v in group if v["detected"]]
        times = sorted(v["alert_s"] for v in detected)
        return {"episodes": len(group), "detected": len(detected),
                "recall": len(detected) / len(group) if group else None,
                "median_alert_s": statistics.median(times) if times else None,
                "p95_alert_s": times[min(len(times) - 1, int(0.95 * len(times)))]
                if times else None,
                "attributed_ok": sum(v["attribution_ok"] for v in detected),
                "attribution_accuracy": (sum(v["attribution_ok"] for v in detected)
                                         / len(detected) if detected else None)}

    rows = [{"kind": k, "intensity": i, **block([v for v in verdicts
                                                 if (v["kind"], v["intensity"]) == (k, i)])}
            for k, i in sorted({(v["kind"], v["intensity"]) for v in verdicts})]
    total = block(verdicts)
    total["false_alerts"] = len(false_alerts)
    total["clean_s"] = round(clean_s, 1)
    total["false_alerts_per_hour"] = (len(false_alerts) * 3600.0 / clean_s
                                      if clean_s > 0 else None)
    total["aftermath_alerts_max"] = max((v["aftermath_alerts"] for v in verdicts), default=None)
    total["unsettled"] = sum(v["open_at_next_s"] is not None for v in verdicts)
    shares = [v["firing_share"] for v in verdicts if v["firing_share"] is not None]
    total["mean_firing_share"] = statistics.fmean(shares) if shares else None
    total["held_90"] = (sum(x >= 0.9 for x in shares) / len(shares)) if shares else None
    lags = [v["resolved_after_s"] for v in verdicts]
    total["max_resolved_after_s"] = (None if not lags or any(x is None for x in lags)
                                     else max(lags))
    spans = [sc.clean.summary(sc.alerts) | {"scenario": sc.name} for sc in scenarios
             if sc.clean is not None]
    return {"total": total, "rows": rows, "episodes": verdicts, "false_alerts": false_alerts,
            "clean_span": spans[0] if spans else None, "through_learn": through}


def met(total: dict[str, Any],
        through: list[dict[str, Any]] | None = None) -> dict[str, bool | None]:
    """Each live target against the totals (None where there is nothing to judge);
    ``through``: the faults begun before the learn, each to be warned of by a channel of
    its subsystem."""

    def judge(key: str, target: float, higher: bool) -> bool | None:
        value = total.get(key)
        if value is None:
            return None
        return value >= target if higher else value <= target

    return {"recall": judge("recall", TARGETS["recall"], True),
            "median_alert_s": judge("median_alert_s", TARGETS["median_alert_s"], False),
            "p95_alert_s": judge("p95_alert_s", TARGETS["p95_alert_s"], False),
            "attribution_accuracy": judge("attribution_accuracy",
                                          TARGETS["attribution_accuracy"], True),
            "aftermath": (None if total.get("aftermath_alerts_max") is None
                          else total["aftermath_alerts_max"] <= AFTERMATH_EPISODES
                          and total.get("unsettled", 0) == 0),
            "through_learn": (all(t["warned"] and t["named_subsystem"] for t in through)
                              if through else None)}


def render_live_markdown(result: dict[str, Any]) -> str:
    """The live result as Markdown: per fault, totals against targets, false alerts."""
    def sec(v: float | None) -> str:
        return "–" if v is None else f"{v:.1f}"

    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f} %"

    s = result["summary"]
    total = s["total"]
    lines = [f"# Reveal live validation on {markdown(result['host'])}", "",
             f"Started {result['started']}, {result['elapsed_s']:.0f} s. `reveal watch` "
             f"learned {result['settings']['baseline_s']:g} s of each scenario, then scored "
             "live; alerts were received at a webhook"
             + (f", through Alertmanager (group_wait {GROUP_WAIT})"
                if result["settings"].get("via_alertmanager") else "") + ".", "",
             "| Fault | Intensity | Episodes | Alerted | Median fault → alert (s) | "
             "p95 (s) | Right subsystem |", "|---|---|---|---|---|---|---|"]
    for r in s["rows"]:
        lines.append(f"| {r['kind']} | {r['intensity']} | {r['episodes']} | {r['detected']} | "
                     f"{sec(r['median_alert_s'])} | {sec(r['p95_alert_s'])} | "
                     f"{r['attributed_ok']}/{r['detected']} |")
    lines.append(f"| **all** | | {total['episodes']} | {total['detected']} | "
                 f"**{sec(total['median_alert_s'])}** | **{sec(total['p95_alert_s'])}** | "
                 f"**{total['attributed_ok']}/{total['detected']}** |")
    mark = {True: "met", False: "**not met**", None: "n/a"}
    m = result["met"]
    rate = total["false_alerts_per_hour"]
    lines += ["", "| Measure | Value | Target | |", "|---|---|---|---|",
              f"| Episodes alerted | {pct(total['recall'])} | ≥ 95 % | {mark[m['recall']]} |",
              f"| Median fault start → alert received | {sec(total['median_alert_s'])} s | "
              f"≤ 5 s | {mark[m['median_alert_s']]} |",
              f"| p95 fault start → alert received | {sec(total['p95_alert_s'])} s | ≤ 8 s | "
              f"{mark[m['p95_alert_s']]} |",
              f"| Alert names the injected subsystem | {pct(total['attribution_accuracy'])} | "
              f"≥ 90 % | {mark[m['attribution_accuracy']]} |",
              f"| False alerts (outside every fault and its {result['settings']['settle_s']:g} s "
              f"settle) | {total['false_alerts']} in {total['clean_s'] / 60:.1f} min of clean "
              f"time ({'–' if rate is None else f'{rate:.1f}'} per hour) | | |"]
    if "aftermath_alerts_max" in total:  # results written before it was measured lack it
        lines.append(
            f"| A fault's aftermath: alert episodes opened after its settle (most after one "
            f"fault); faults followed by an alert still open when the next began | "
            f"{'–' if total['aftermath_alerts_max'] is None else total['aftermath_alerts_max']}"
            f"; {total['unsettled']} | ≤ {AFTERMATH_EPISODES}; 0 | "
            f"{mark[m.get('aftermath')]} |")
    if total.get("mean_firing_share") is not None:  # measured since 2026-12-04
        lag = total["max_resolved_after_s"]
        lines.append(
            f"| An alert open through the fault: mean share of its time; faults held ≥ 90 %; "
            f"the longest wait from a fault's end to its alerts' resolution | "
            f"{pct(total['mean_firing_share'])}; {pct(total['held_90'])}; "
            f"{'one still open at the next fault' if lag is None else f'{lag:.1f} s'} | "
            f"≥ 90 % of each fault; ≤ 30 s | |")
    if s.get("clean_span"):
        c = s["clean_span"]
        r = c["rss_bytes"]
        mib = {k: r[k] / 2**20 for k in ("start", "end", "max", "settled_start",
                                          "settled_max", "settled_growth")}
        lines += ["", "## Clean span", "",
                  f"{c['seconds'] / 60:.1f} min of the reference workload with no fault, after "
                  f"the learn: **{c['alert_episodes']} alert episode(s)**. The watch's resident "
                  f"memory: {mib['start']:.0f} MiB at the start (the fit just ended), "
                  f"{mib['settled_start']:.0f} MiB {r['settled_after_s'] / 60:g} min in, "
                  f"{mib['end']:.0f} MiB at the end (growth since {r['settled_after_s'] / 60:g} "
                  f"min: {mib['settled_growth']:+.1f} MiB; at most {mib['settled_max']:.0f} MiB "
                  f"after it, {mib['max']:.0f} MiB in all)."]
    for t in s.get("through_learn") or []:
        named = ", ".join(f"`{markdown(c, 120)}`" for c in t["channels"]) or "none"
        lines += ["", "## A fault through the learn", "",
                  f"{t['kind']} ({t['intensity']}) began before the watch's learn and was "
                  f"undone {t['held_after_learn_s']:g} s after it ended ({t['seconds']:g} s in "
                  f"all). The watch warned of an unhealthy baseline: "
                  f"**{'yes' if t['warned'] else 'no'}**, naming {named}; a channel of its "
                  f"subsystem ({t['subsystem']}): "
                  f"**{mark[bool(t['warned'] and t['named_subsystem'])]}**. Alert episodes "
                  f"while it held after the learn, as it ended or until the adoption "
                  f"settled: {t['alert_episodes']}. "
                  + (f"Adopted {t['adopted_after_undo_s']:g} s after the undo "
                     "(`reveal watch --adopt`, as the operator answers the warning); every "
                     "alert then open resolved: "
                     + ("**no**, one was still open at the end"
                        if t["resolved_after_adopt_s"] is None else
                        f"**yes**, {t['resolved_after_adopt_s']:g} s after")
                     if t.get("adopted") else "Not adopted.")]
    misses = [v for v in s["episodes"] if not (v["detected"] and v["attribution_ok"])]
    if misses:
        lines += ["", "## Misses and misattributions", "",
                  "| Fault | Intensity | Verdict | Claim |", "|---|---|---|---|"]
        for v in misses:
            verdict = (f"alerted as {v['alerted_subsystem']}" if v["detected"]
                       else "no alert")
            lines.append(f"| {v['kind']} | {v['intensity']} | {verdict} | "
                         f"{markdown(v['claim'] or '–', 200)} |")
    if s["false_alerts"]:
        lines += ["", "## False alerts", "", "| Scenario | After scoring began (s) | "
                  "Subsystem | Claim |", "|---|---|---|---|"]
        for a in s["false_alerts"]:
            lines.append(f"| {a['scenario']} | {a['since_scoring_s']:.0f} | {a['subsystem']} | "
                         f"{markdown(a['claim'], 200)} |")
    if result["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {markdown(x, 300)}" for x in result["skipped"]]
    return "\n".join(lines) + "\n"
