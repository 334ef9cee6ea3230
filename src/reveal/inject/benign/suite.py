"""``reveal validate --benign``: ordinary host activity beside the reference job, scored
on how much of it the analysis flags (it should flag almost none).

Every kind gets its own pair of recordings with the same running job: a clean baseline,
then a run with the activity ``at_s`` seconds in. Each run is analysed against its own
baseline (``reveal.model.report_run(run, baseline)``, as an operator compares a new run with
a reference run) and scored on:

- the share of all windows flagged, and of the windows that overlap or follow the
  activity (``end > activity start``), over all runs;
- the report's episodes per run (a benign activity should open none);
- for informational kinds (a container, a new interface), whether anything was flagged
  from the activity on: an operator wants a note there, not an alarm, so a flag is
  reported separately rather than hidden in the totals.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reveal.errors import RevealError
from reveal.inject.benign import BATCH_KINDS, BENIGN, QUICK, is_informational
from reveal.inject.groundtruth import Episode
from reveal.inject.scenario import (
    EpisodePlan,
    RecordedScenario,
    Say,
    Scenario,
    run_scenario,
)
from reveal.inject.validation import load_recorded
from reveal.model import Reveal, report_run
from reveal.report.escape import markdown
from reveal.store.layout import write_json_atomic
from reveal.store.run_reader import read_run

SCHEMA = "reveal-validate-benign"
SCENARIO = "benign"
#: Batch target: at most this share of the benign runs' windows flagged.
TARGETS = {"flag_share": 0.01}
RESULT_JSON, RESULT_MD = "benign.json", "benign.md"


@dataclass
class BenignOptions:
    """Which kinds, and the timing of every recording (seconds)."""

    kinds: tuple[str, ...] = BATCH_KINDS  # the live suite adds LIVE_ONLY
    baseline_s: float = 90.0
    run_s: float = 90.0
    at_s: float = 35.0  # the activity starts this long into its run
    activity_s: float = 20.0  # held kinds last this long; self-ending ones at most 3×
    interval_s: float = 0.1
    workload: str | None = None
    quick: bool = False
    # analysis settings by dotted name (``--set``), for the analysis and the watch
    settings: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def quick_suite(cls) -> BenignOptions:
        """Three kinds, 45 s baselines and runs (about 6 minutes)."""
        return cls(kinds=QUICK, baseline_s=45.0, run_s=45.0, at_s=18.0, activity_s=10.0,
                   quick=True)

    def duration_s(self, kind: str) -> float:
        """How long ``kind`` is held: a load change lasts to the run's end (less 2 s)."""
        if kind == "load_change":
            return max(1.0, self.run_s - self.at_s - 2.0)
        return self.activity_s


def build_scenario(options: BenignOptions) -> Scenario:
    """One scenario, one baseline and one run per kind, the activity at ``at_s``."""
    unknown = [k for k in options.kinds if k not in BENIGN]
    if unknown:
        raise RevealError(f"unknown benign activity {', '.join(unknown)} "
                          f"(choose from {', '.join(BENIGN)})")
    if not options.kinds:
        raise RevealError("no benign activity chosen")
    if not 0 < options.at_s < options.run_s - 5:
        raise RevealError(f"the activity must start inside the run, at least 5 s before "
                          f"its end (at {options.at_s:g} s of {options.run_s:g} s)")
    if options.baseline_s < 30 or options.activity_s <= 0:
        raise RevealError("baselines need at least 30 s and activities a positive length")
    plans = [[EpisodePlan(kind, "default", options.at_s, options.duration_s(kind))]
             for kind in options.kinds]
    return Scenario(SCENARIO, False, options.baseline_s, options.run_s, plans,
                    options.interval_s)


def score_run(report: Any, episode: Episode) -> dict[str, Any]:
    """The figures of one benign run (see the module's docstring)."""
    w = report.windows
    start = np.asarray(w.start_ns, dtype=np.int64)
    end = np.asarray(w.end_ns, dtype=np.int64)
    flagged = np.asarray(w.flagged, dtype=bool)
    since = end > episode.start_ns
    informational = episode.kind in BENIGN and is_informational(episode.kind)
    first = first_claim(report, since & flagged)
    return {
        "kind": episode.kind, "subsystem": episode.subsystem, "informational": informational,
        "activity_s": round(episode.duration_s, 2),
        "windows": len(start), "flagged": int(flagged.sum()),
        "windows_since": int(since.sum()), "flagged_since": int((since & flagged).sum()),
        "windows_before": int((~since).sum()), "flagged_before": int((~since & flagged).sum()),
        "report_episodes": len(report.episodes),
        "informational_flagged": bool((since & flagged).any()) if informational else None,
        "first_claim_subsystem": first[0], "first_claim": first[1],
        "episode_claims": [e.claim for e in report.episodes][:3],
        "detail": episode.detail,
    }


def first_claim(report: Any, mask: np.ndarray) -> tuple[str | None, str]:
    """Subsystem of the leading reason and the claim of the first window in ``mask``."""
    by_id = {a.window_id: a for a in report.anomalies}
    for w in np.flatnonzero(mask):
        anomaly = by_id.get(int(w))
        if anomaly is not None and anomaly.reasons:
            return anomaly.reasons[0].subsystem, anomaly.claim
    return None, ""


def analyse(recorded: list[RecordedScenario], say: Say,
            reports_to: Path | None = None,
            settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Analyse every run against its own baseline; one row per run. Each report goes next
    to its run as ``runN.report.json``, or into ``reports_to``; ``settings``: analysis
    settings by dotted name."""
    rows = []
    for scenario in recorded:
        for rec in scenario.runs:
            if not rec.episodes:
                rows.append({"run": str(rec.path), "skipped": rec.skipped or
                             ["no activity recorded in this run"]})
                continue
            say(f"analysing {rec.path}")
            started = time.monotonic()
            report = report_run(read_run(rec.path),
                                read_run(rec.baseline or scenario.baseline),
                                model=Reveal(overrides=settings or None))
            where = reports_to if reports_to is not None else rec.path.parent
            where.mkdir(parents=True, exist_ok=True)
            write_json_atomic(where / f"{rec.path.name}.report.json", report.to_dict())
            row = score_run(report, rec.episodes[0])
            row.update(run=str(rec.path), baseline=str(rec.baseline),
                       analysis_s=round(time.monotonic() - started, 1),
                       warnings=report.warnings[:5])
            rows.append(row)
    return rows


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums and shares over the scored rows."""
    scored = [r for r in rows if "kind" in r]

    def share(flagged: str, windows: str) -> float | None:
        n = sum(r[windows] for r in scored)
        return round(sum(r[flagged] for r in scored) / n, 4) if n else None

    informational = [r for r in scored if r["informational"]]
    return {
        "runs": len(scored), "skipped": len(rows) - len(scored),
        "windows": sum(r["windows"] for r in scored),
        "flagged": sum(r["flagged"] for r in scored),
        "flag_share": share("flagged", "windows"),
        "windows_since": sum(r["windows_since"] for r in scored),
        "flagged_since": sum(r["flagged_since"] for r in scored),
        "flag_share_since": share("flagged_since", "windows_since"),
        "flag_share_before": share("flagged_before", "windows_before"),
        "report_episodes": sum(r["report_episodes"] for r in scored),
        "runs_with_episodes": sum(r["report_episodes"] > 0 for r in scored),
        "informational_runs": len(informational),
        "informational_flagged": sum(bool(r["informational_flagged"]) for r in informational),
    }


def result(rows: list[dict[str, Any]], options: BenignOptions, workload: str,
           started: float, wall: str) -> dict[str, Any]:
    """The suite's result (``benign.json``)."""
    total = totals(rows)
    share = total["flag_share"]
    return {
        "schema": SCHEMA, "version": 1, "quick": options.quick,
        "host": platform.node(), "kernel": platform.release(), "started": wall,
        "elapsed_s": round(time.monotonic() - started, 1),
        "settings": {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in asdict(options).items()},
        "workloads": {SCENARIO: workload},
        "total": total, "targets": TARGETS,
        "met": {"flag_share": None if share is None else bool(share <= TARGETS["flag_share"])},
        "rows": rows,
    }


def run_benign_suite(options: BenignOptions, out_dir: Path, say: Say) -> dict[str, Any]:
    """Record every kind's baseline and run under ``out_dir/runs/benign``, analyse, score."""
    started = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    recorded = run_scenario(build_scenario(options), out_dir / "runs", say, options.workload)
    return result(analyse([recorded], say, settings=options.settings), options,
                  recorded.workload, started, wall)


def reanalyse(directory: Path, options: BenignOptions, say: Say,
              reports_to: Path | None = None) -> dict[str, Any]:
    """Score again the runs a benign suite recorded in ``directory`` (nothing recorded)."""
    started = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    recorded = [s for s in load_recorded(directory) if s.scenario.name == SCENARIO]
    if not recorded:
        raise RevealError(f"no benign runs here (expected DIR/runs/{SCENARIO}/runN)",
                          str(directory))
    workload, settings = "recorded", {}
    try:  # what the recording's own result said
        earlier = json.loads((directory / RESULT_JSON).read_text())
        workload = str(earlier["workloads"][SCENARIO])
        settings = dict(earlier["settings"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    kinds = tuple(r.episodes[0].kind for s in recorded for r in s.runs if r.episodes)
    # the recording's timing; the analysis settings are this call's own
    known = {k: v for k, v in settings.items()
             if k in BenignOptions.__dataclass_fields__ and k != "settings"}
    known["kinds"] = kinds
    recorded_options = BenignOptions(**{**asdict(options), **known})
    rows = analyse(recorded, say, reports_to, options.settings)
    out = result(rows, recorded_options, workload, started, wall)
    out["reanalysed"] = str(directory)
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def render_markdown(res: dict[str, Any]) -> str:
    """The result as Markdown: one row per kind, then the totals against the target."""
    total = res["total"]
    s = res["settings"]
    lines = [f"# Benign-change suite on {markdown(res['host'])}"
             f"{' (quick)' if res['quick'] else ''}", "",
             f"Started {res['started']}, {res['elapsed_s']:.0f} s. Workload: "
             f"{res['workloads'].get(SCENARIO)}. Each kind: a {s['baseline_s']:g} s baseline "
             f"and a {s['run_s']:g} s run, the activity {s['at_s']:g} s in.", "",
             "| Kind | Subsystem | Informational | Activity (s) | Windows flagged | "
             "From the activity on | Report episodes | First claim |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if "kind" not in r:
            lines.append(f"| {markdown(Path(r['run']).name)} | | | | | | | skipped: "
                         f"{markdown('; '.join(r['skipped']), 200)} |")
            continue
        info = "yes" if r["informational"] else ""
        lines.append(
            f"| {r['kind']} | {r['subsystem']} | {info} | {r['activity_s']:g} | "
            f"{r['flagged']}/{r['windows']} | {r['flagged_since']}/{r['windows_since']} | "
            f"{r['report_episodes']} | {markdown(r['first_claim'], 120) or '–'} |")
    met = {True: "met", False: "**not met**", None: "n/a"}[res["met"]["flag_share"]]
    lines += ["", "| Measure | Value | Target | |", "|---|---|---|---|",
              f"| Windows flagged, whole runs | {_pct(total['flag_share'])} "
              f"({total['flagged']}/{total['windows']}) | ≤ 1 % | {met} |",
              f"| Windows flagged from the activity on | {_pct(total['flag_share_since'])} "
              f"({total['flagged_since']}/{total['windows_since']}) | | |",
              f"| Windows flagged before the activity | {_pct(total['flag_share_before'])} "
              f"| | |",
              f"| Report episodes | {total['report_episodes']} in {total['runs']} runs "
              f"({total['runs_with_episodes']} runs with any) | | |",
              f"| Informational kinds flagged | {total['informational_flagged']} of "
              f"{total['informational_runs']} | a note, not an alarm | |"]
    return "\n".join(lines) + "\n"


def write_pair(res: dict[str, Any], text: str, out_dir: Path, json_name: str,
               md_name: str) -> tuple[Path, Path]:
    """Write ``res`` as JSON and ``text`` (its Markdown) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / json_name, out_dir / md_name
    json_path.write_text(json.dumps(res, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(text, encoding="utf-8")
    return json_path, md_path


def write_result(res: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``benign.json`` and ``benign.md`` into ``out_dir``."""
    return write_pair(res, render_markdown(res), out_dir, RESULT_JSON, RESULT_MD)


__all__ = ["BenignOptions", "build_scenario", "reanalyse",
           "render_markdown", "run_benign_suite", "score_run", "totals", "write_result"]
