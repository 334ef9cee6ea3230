"""``reveal validate --benign --live``: the benign-change suite beside a running watch.

The reference workload runs; ``reveal watch`` learns beside it for ``baseline_s`` (600 s,
the watch's own default learn) and then scores live, its alert events going to a webhook
(:mod:`reveal.inject.live_suite`). Every benign kind is then run in turn, ``gap_s`` apart,
each recorded in ``events.jsonl`` like a fault. Scored as an operator's pager sees it:

- **alert episodes**: the distinct alerts that fired (``firing`` events) from the start of
  scoring to the end, wherever they fell (target: at most 1 over all kinds together);
- per kind, whether an alert fired or was updated while it ran or within ``settle_s``
  after, with the alert's subsystem and claim, and the notes (``notice`` events,
  :mod:`reveal.live.notices`) the watch sent meanwhile; informational kinds (a container
  appeared, a new interface) are reported on their own, as an operator wants a note there
  rather than an alarm.
"""

from __future__ import annotations

import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from reveal.inject.benign import BENIGN, is_informational
from reveal.inject.benign.suite import SCENARIO, BenignOptions, build_scenario, write_pair
from reveal.inject.live_suite import GAP_S, LiveScenario, run_live_scenario
from reveal.inject.scenario import Say
from reveal.live.service import DEFAULT_LEARN_S
from reveal.report.escape import markdown

SCHEMA = "reveal-validate-benign-live"
#: Live target: at most this many alert episodes over every benign kind together.
TARGETS = {"alert_episodes": 1}
RESULT_JSON, RESULT_MD = "benign_live.json", "benign_live.md"
LEARN_S = DEFAULT_LEARN_S  # the watch's default learn
QUICK_LEARN_S = 60.0  # --quick: the shortest learn the watch takes (with a warning)
SETTLE_S = 10.0


def score_live_benign(sc: LiveScenario, settle_s: float) -> dict[str, Any]:
    """Alert episodes over the scored span, and per kind what fired while it ran."""
    fired = [a for a in sc.alerts if a.event == "firing"
             and sc.scored_from_ns <= a.received_ns <= sc.scored_to_ns]
    rows = []
    for ep in sc.episodes:
        hi = ep.end_ns + int(settle_s * 1e9)
        hits = sorted((a for a in sc.alerts if a.event in ("firing", "update")
                       and ep.start_ns <= a.received_ns <= hi), key=lambda a: a.received_ns)
        first = hits[0] if hits else None
        notes = [a for a in sc.alerts if a.event == "notice"
                 and ep.start_ns <= a.received_ns <= hi]
        rows.append({
            "kind": ep.kind, "subsystem": ep.subsystem,
            "informational": ep.kind in BENIGN and is_informational(ep.kind),
            "activity_s": round((ep.end_ns - ep.start_ns) / 1e9, 2),
            "alerted": first is not None,
            "alert_s": round((first.received_ns - ep.start_ns) / 1e9, 2) if first else None,
            "alerted_subsystem": first.subsystem if first else None,
            "claim": first.claim if first else None,
            "notices": [a.claim for a in notes]})
    informational = [r for r in rows if r["informational"]]
    total = {"kinds": len(rows), "alert_episodes": len({a.id for a in fired}),
             "kinds_alerted": sum(r["alerted"] for r in rows),
             "informational_kinds": len(informational),
             "informational_alerted": sum(r["alerted"] for r in informational),
             "informational_noted": sum(bool(r["notices"]) for r in informational),
             "notices": sum(a.event == "notice" for a in sc.alerts
                            if sc.scored_from_ns <= a.received_ns <= sc.scored_to_ns),
             "scored_s": round((sc.scored_to_ns - sc.scored_from_ns) / 1e9, 1)}
    return {"total": total, "rows": rows,
            "alerts": [{**a.to_dict(), "since_scoring_s": round(
                (a.received_ns - sc.scored_from_ns) / 1e9, 1)} for a in fired]}


def run_live_benign(options: BenignOptions, out_dir: Path, say: Say, gap_s: float = GAP_S,
                    settle_s: float = SETTLE_S, score_every: int = 5) -> dict[str, Any]:
    """Run every kind of ``options`` against a watch that learned ``options.baseline_s``;
    the watch's files go under ``out_dir/live/benign``."""
    started = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    live = run_live_scenario(build_scenario(options), out_dir / "live", say, gap_s,
                             settle_s, options.workload, score_every,
                             settings=options.settings)
    summary = score_live_benign(live, settle_s)
    episodes = summary["total"]["alert_episodes"]
    return {
        "schema": SCHEMA, "version": 1, "quick": options.quick, "mode": "live",
        "host": platform.node(), "kernel": platform.release(), "started": wall,
        "elapsed_s": round(time.monotonic() - started, 1),
        "settings": {**{k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in asdict(options).items()},
                     "gap_s": gap_s, "settle_s": settle_s, "score_every": score_every},
        "workloads": {SCENARIO: live.workload}, "summary": summary, "targets": TARGETS,
        "met": {"alert_episodes": bool(episodes <= TARGETS["alert_episodes"])},
        "skipped": live.skipped,
    }


def render_markdown(res: dict[str, Any]) -> str:
    """The live benign result as Markdown: one row per kind, the alerts, the target."""
    total = res["summary"]["total"]
    lines = [f"# Benign-change suite on a live watch, {markdown(res['host'])}"
             f"{' (quick)' if res['quick'] else ''}", "",
             f"Started {res['started']}, {res['elapsed_s']:.0f} s. Workload: "
             f"{markdown(str(res['workloads'].get(SCENARIO)))}. `reveal watch` learned "
             f"{res['settings']['baseline_s']:g} s, then every kind ran in turn, "
             f"{res['settings']['gap_s']:g} s apart.", "",
             "| Kind | Subsystem | Informational | Activity (s) | Alert | Claim | Notes |",
             "|---|---|---|---|---|---|---|"]
    for r in res["summary"]["rows"]:
        alert = (f"{r['alert_s']:.1f} s in, {r['alerted_subsystem']}" if r["alerted"]
                 else "none")
        lines.append(f"| {r['kind']} | {r['subsystem']} | "
                     f"{'yes' if r['informational'] else ''} | {r['activity_s']:g} | {alert} | "
                     f"{markdown(r['claim'] or '–', 160)} | "
                     f"{markdown('; '.join(r['notices']) or '–', 160)} |")
    met = "met" if res["met"]["alert_episodes"] else "**not met**"
    lines += ["", "| Measure | Value | Target | |", "|---|---|---|---|",
              f"| Alert episodes over {total['scored_s'] / 60:.1f} min of scoring, all "
              f"{total['kinds']} kinds | {total['alert_episodes']} | ≤ "
              f"{TARGETS['alert_episodes']} | {met} |",
              f"| Kinds during which an alert fired or was updated | "
              f"{total['kinds_alerted']} of {total['kinds']} | | |",
              f"| Informational kinds alerted | {total['informational_alerted']} of "
              f"{total['informational_kinds']} | a note, not an alarm | |",
              f"| Informational kinds noted | {total['informational_noted']} of "
              f"{total['informational_kinds']} ({total['notices']} notes in all) | | |"]
    if res["summary"]["alerts"]:
        lines += ["", "## Alerts", "", "| After scoring began (s) | Subsystem | Claim |",
                  "|---|---|---|"]
        for a in res["summary"]["alerts"]:
            lines.append(f"| {a['since_scoring_s']:.0f} | {a['subsystem']} | "
                         f"{markdown(a['claim'], 200)} |")
    if res["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {markdown(x, 300)}" for x in res["skipped"]]
    return "\n".join(lines) + "\n"


def write_result(res: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``benign_live.json`` and ``benign_live.md`` into ``out_dir``."""
    return write_pair(res, render_markdown(res), out_dir, RESULT_JSON, RESULT_MD)
