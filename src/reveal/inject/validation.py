"""``reveal validate``'s engine: build the suite, record it, analyse every faulted run with
detectors fitted on its scenario's baseline, score against the ground truth, tabulate.

The command module (:mod:`reveal.commands.validate`) only parses options and prints.
"""

from __future__ import annotations

import json
import platform
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.derive import derive
from reveal.analysis.subsystems import channel_subsystems, irq_names
from reveal.catalog import default_catalog
from reveal.errors import RevealError
from reveal.frame import Telemetry
from reveal.inject.faults import FAULTS, fault_class
from reveal.inject.groundtruth import Episode, load_episodes
from reveal.inject.live_suite import (
    met,
    render_live_markdown,
    run_live_scenario,
    score_live,
    through_learn_fault,
)
from reveal.inject.scenario import (
    RecordedRun,
    RecordedScenario,
    Say,
    Scenario,
    plan_runs,
    run_scenario,
)
from reveal.inject.scoring import (
    DEFAULT_SETTLE_S,
    EpisodeScore,
    merge_by_settle,
    names_place,
    score_report,
    summarise,
)
from reveal.model import Reveal, report_run
from reveal.report.escape import markdown
from reveal.store.layout import write_json_atomic
from reveal.store.run_reader import read_run

SINGLE_FAULTS = ("cpu_contention", "memory_pressure", "writeback_storm", "disk_burst")
NETWORK_FAULTS = ("packet_loss", "udp_flood")
DEFAULT_FAULTS = SINGLE_FAULTS + NETWORK_FAULTS
TARGETS = {"recall": 0.95, "median_ttd_s": 5.0, "attribution_accuracy": 0.90,
           "clean_flag_share": 0.005}
SCHEMA = "reveal-validate"


@dataclass
class SuiteOptions:
    """What to run: faults, intensities, repetitions, and the timing of every run (s)."""

    faults: tuple[str, ...] = DEFAULT_FAULTS
    intensities: tuple[str, ...] = ("low", "high")
    repetitions: int = 3
    baseline_s: float = 60.0
    episode_s: float = 8.0
    gap_s: float = 20.0
    lead_s: float = 10.0
    settle_s: float = DEFAULT_SETTLE_S
    interval_s: float = 0.1
    seed: int = 0
    quick: bool = False
    workload: str | None = None
    score_every: int = 5  # with --live: the watch scores this many windows per call
    clean_s: float = 0.0  # with --live: a span with no fault after the learn, seconds
    via_alertmanager: bool = False  # with --live: alerts through a real Alertmanager
    # with --live: a fault ``KIND:INTENSITY`` begun before the watch's learn ("": none)
    through_learn: str = ""
    # analysis settings by dotted name (``--set``), for the analysis and the watch
    settings: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def quick_suite(cls) -> SuiteOptions:
        """≤ 5 minutes: CPU contention and a disk burst, once each, on the single job."""
        return cls(faults=("cpu_contention", "disk_burst"), intensities=("high",),
                   repetitions=1, baseline_s=45.0, episode_s=10.0, gap_s=15.0, lead_s=12.0,
                   quick=True)


def build_scenarios(options: SuiteOptions) -> list[Scenario]:
    """One scenario per workload kind the chosen faults need (single, distributed)."""
    unknown = [f for f in options.faults if f not in FAULTS]
    if unknown:
        raise RevealError(f"unknown fault(s) {', '.join(unknown)} "
                          f"(choose from {', '.join(FAULTS)})")
    scenarios = []
    groups = (("single", False, [f for f in options.faults if not FAULTS[f].needs_netns]),
              ("distributed", True, [f for f in options.faults if FAULTS[f].needs_netns]))
    for name, distributed, kinds in groups:
        if not kinds:
            continue
        plans, length = plan_runs(kinds, list(options.intensities), options.repetitions,
                                  options.episode_s, options.gap_s, options.lead_s,
                                  options.seed)
        if not any(plans):
            continue
        scenarios.append(Scenario(name, distributed, options.baseline_s, length, plans,
                                  options.interval_s))
    if not scenarios:
        raise RevealError("no fault has the chosen intensities")
    return scenarios


def moved_channels(run: Telemetry, baseline: Telemetry, episode: Episode,
                   top: int = 5) -> list[dict[str, Any]]:
    """Channels whose median during ``episode`` departs most from the baseline median,
    in robust z units (derived rates; diagnostic for the analysis side)."""
    catalog = default_catalog()
    d_run, d_base = derive(run, catalog)[0], derive(baseline, catalog)[0]
    common = [c for c in d_run.channels if c in set(d_base.channels)]
    if not common:
        return []
    inside = (d_run.timestamps_ns >= episode.start_ns) & (d_run.timestamps_ns < episode.end_ns)
    x = d_run.select(common).values[inside]
    y = d_base.select(common).values
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(y, axis=0)
        mad = MAD_TO_SIGMA * np.nanmedian(np.abs(y - med), axis=0)
        # MAD alone makes a gauge that drifts slowly (VmallocUsed, load averages) look
        # extreme; the baseline's std is the floor.
        spread = np.fmax(mad, np.nanstd(y, axis=0))
        during = np.nanmedian(x, axis=0)
        z = (during - med) / np.where(spread > 0, spread, np.nan)
    order = np.argsort(-np.nan_to_num(np.abs(z), nan=-1.0))[:top]
    subsystems = channel_subsystems([common[i] for i in order], catalog, irq_names(run.meta))
    return [{"channel": common[i], "robust_z": round(float(z[i]), 2),
             "during": float(during[i]), "baseline_median": float(med[i]),
             "subsystem": subsystem}
            for i, subsystem in zip(order, subsystems, strict=True) if np.isfinite(z[i])]


def host_state(run: Telemetry, baseline: Telemetry, episode: Episode) -> dict[str, Any]:
    """What the host was doing during ``episode`` and in the baseline (medians): 1-minute
    load average (tasks), CPU busy (%) and hypervisor steal (% of all CPU time)."""
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")

    def medians(tel: Telemetry,
                inside: Callable[[np.ndarray], np.ndarray] | None) -> dict[str, float]:
        d = derive(tel, default_catalog())[0]
        rows = slice(None) if inside is None else inside(d.timestamps_ns)
        index = {c: i for i, c in enumerate(d.channels)}
        out: dict[str, float] = {}
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            for name, channel in (("load1", "loadavg.load1"),
                                  ("busy_pct", "derived.cpu_busy_pct")):
                if channel in index:
                    out[name] = round(float(np.nanmedian(d.values[rows, index[channel]])), 2)
            if all(f"cpu.{f}" in index for f in fields):
                total = sum(d.values[rows, index[f"cpu.{f}"]] for f in fields)
                steal = d.values[rows, index["cpu.steal"]]
                out["steal_pct"] = round(float(np.nanmedian(100.0 * steal / total)), 2)
        return {k: v for k, v in out.items() if np.isfinite(v)}

    during = medians(run, lambda ts: (ts >= episode.start_ns) & (ts < episode.end_ns))
    return {"during": during, "baseline": medians(baseline, None)}


def analyse_scenario(recorded: RecordedScenario, settle_s: float, say: Say,
                     diagnose: bool = True, reports_to: Path | None = None,
                     settings: dict[str, Any] | None = None,
                     ) -> tuple[list[EpisodeScore], list[dict[str, Any]]]:
    """Analyse each faulted run against the baseline; scores and per-run summaries. Each
    run's report goes next to it as ``runN.report.json``, or into ``reports_to``;
    ``settings``: analysis settings by dotted name."""
    baselines: dict[Path, Any] = {}
    scores: list[EpisodeScore] = []
    runs: list[dict[str, Any]] = []
    for rec in recorded.runs:
        say(f"analysing {rec.path}")
        started = time.monotonic()
        base_path = rec.baseline or recorded.baseline
        if base_path not in baselines:
            baselines = {base_path: read_run(base_path)}
        baseline = baselines[base_path]
        tel = read_run(rec.path)
        report = report_run(tel, baseline, model=Reveal(overrides=settings or None))
        where = reports_to if reports_to is not None else rec.path.parent
        where.mkdir(parents=True, exist_ok=True)
        write_json_atomic(where / f"{rec.path.name}.report.json", report.to_dict())
        scored, clean = score_report(report, rec.episodes, settle_s, run=str(rec.path))
        claims = {a.window_id: a.claim for a in report.anomalies}
        w = report.windows
        for score, episode in zip(scored, rec.episodes, strict=True):
            score.named = names_place(episode, np.asarray(w.start_ns), np.asarray(w.end_ns),
                                      np.asarray(w.combined, dtype=float),
                                      np.asarray(w.flagged, dtype=bool), claims)
        if diagnose:
            for score, episode in zip(scored, rec.episodes, strict=True):
                if not (score.detected and score.attribution_ok):
                    score.max_ratio["moved"] = moved_channels(tel, baseline, episode)  # type: ignore[assignment]
                    score.max_ratio["host"] = host_state(tel, baseline, episode)  # type: ignore[assignment]
        scores += scored
        runs.append({"scenario": recorded.scenario.name, "path": str(rec.path),
                     "baseline": str(base_path),
                     "workload": recorded.workload, "windows": len(report.windows.start_ns),
                     "flagged": int(np.asarray(report.windows.flagged).sum()),
                     "episodes": len(rec.episodes), "skipped": rec.skipped,
                     "analysis_s": round(time.monotonic() - started, 1),
                     "warnings": report.warnings[:10], **clean})
    return scores, runs


def run_suite(options: SuiteOptions, out_dir: Path, say: Say) -> dict[str, Any]:
    """Record, analyse and score the whole suite; returns the result (also the JSON)."""
    started = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    scenarios = build_scenarios(options)
    skipped: list[str] = []
    recorded_list = []
    for scenario in scenarios:
        try:
            recorded_list.append(run_scenario(scenario, out_dir / "runs", say,
                                              options.workload if not scenario.distributed
                                              else None))
        except RevealError as exc:
            if not scenario.distributed:
                raise
            skipped.append(f"scenario {scenario.name}: {exc}")
            say(f"skipping scenario {scenario.name}: {exc}")
    return score_recorded(recorded_list, options, say, started, wall, skipped)


def run_live_suite(options: SuiteOptions, out_dir: Path, say: Say) -> dict[str, Any]:
    """The suite against a running ``reveal watch`` (:mod:`reveal.inject.live_suite`)."""
    started = time.monotonic()
    wall = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    done, skipped = [], []
    through = through_learn_fault(options.through_learn) if options.through_learn else None
    netns_fault = through is not None and fault_class(through[0]).needs_netns
    for n, scenario in enumerate(build_scenarios(options)):
        try:
            live = run_live_scenario(scenario, out_dir / "live", say, options.gap_s,
                                     options.settle_s, options.workload
                                     if not scenario.distributed else None,
                                     options.score_every,
                                     options.clean_s if n == 0 else 0.0,
                                     options.settings, options.via_alertmanager,
                                     through if scenario.distributed == netns_fault
                                     else None)
        except RevealError as exc:
            if not scenario.distributed:
                raise
            skipped.append(f"scenario {scenario.name}: {exc}")
            say(f"skipping scenario {scenario.name}: {exc}")
            continue
        done.append(live)
        skipped += [f"scenario {scenario.name}: {x}" for x in live.skipped]
    summary = score_live(done, options.settle_s)
    return {"schema": SCHEMA, "version": 1, "mode": "live", "quick": options.quick,
            "host": platform.node(), "kernel": platform.release(), "started": wall,
            "elapsed_s": round(time.monotonic() - started, 1),
            "settings": {k: v for k, v in options.__dict__.items() if k != "extra"},
            "workloads": {sc.name: sc.workload for sc in done},
            "summary": summary, "met": met(summary["total"], summary["through_learn"]),
            "skipped": skipped}


def load_recorded(out_dir: Path) -> list[RecordedScenario]:
    """The scenarios a suite recorded under ``out_dir/runs`` (to analyse them again).

    Each ``runs/<scenario>/runN`` is paired with ``baselineN`` when it exists, else with
    ``baseline``; its episodes come from its ``events.jsonl``.
    """
    root = out_dir / "runs"
    if not root.is_dir():
        raise RevealError("no recorded runs here (expected DIR/runs/<scenario>/runN)",
                          str(out_dir))
    found = []
    for scenario_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        runs = []
        for run in sorted(scenario_dir.glob("run[0-9]*"), key=lambda p: int(p.name[3:])
                          if p.name[3:].isdigit() else 0):
            if not run.is_dir():
                continue
            own = scenario_dir / f"baseline{run.name[3:]}"
            baseline = own if own.is_dir() else scenario_dir / "baseline"
            if not baseline.is_dir():
                raise RevealError(f"no baseline for {run.name}", str(scenario_dir))
            runs.append(RecordedRun(run, load_episodes(run), baseline=baseline))
        if runs:
            scenario = Scenario(scenario_dir.name, scenario_dir.name == "distributed", 0.0,
                                0.0, [])
            found.append(RecordedScenario(scenario, "recorded", runs[0].baseline or Path(),
                                          runs, []))
    if not found:
        raise RevealError("no recorded runs here", str(root))
    try:  # the workload names an earlier result recorded
        names = json.loads((out_dir / "validate.json").read_text())["workloads"]
        for recorded in found:
            recorded.workload = str(names.get(recorded.scenario.name, recorded.workload))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return found


def score_recorded(recorded_list: list[RecordedScenario], options: SuiteOptions, say: Say,
                   started: float | None = None, wall: str | None = None,
                   skipped: list[str] | None = None,
                   reports_to: Path | None = None) -> dict[str, Any]:
    """Analyse and score recorded scenarios; the suite's result. ``reports_to``: write
    the runs' reports under ``reports_to/SCENARIO/`` instead of next to the runs (a
    re-analysis into another directory leaves the recorded suite untouched)."""
    started = started if started is not None else time.monotonic()
    wall = wall or time.strftime("%Y-%m-%dT%H:%M:%S%z")
    skipped = list(skipped or [])
    all_scores: list[EpisodeScore] = []
    runs: list[dict[str, Any]] = []
    for recorded in recorded_list:
        scores, run_rows = analyse_scenario(
            recorded, options.settle_s, say,
            reports_to=reports_to / recorded.scenario.name if reports_to is not None else None,
            settings=options.settings)
        all_scores += scores
        runs += run_rows
        for row in run_rows:
            skipped += row["skipped"]
    clean_windows = sum(r["clean_windows"] for r in runs)
    clean_flagged = sum(r["clean_flagged"] for r in runs)
    summary = summarise(all_scores, clean_windows, clean_flagged)
    total = summary["total"]
    total["clean_by_settle"] = merge_by_settle([r.get("clean_by_settle", {}) for r in runs])
    met = {
        "recall": _ge(total["recall"], TARGETS["recall"]),
        "median_ttd_s": _le(total["median_ttd_s"], TARGETS["median_ttd_s"]),
        "attribution_accuracy": _ge(total["attribution_accuracy"],
                                    TARGETS["attribution_accuracy"]),
        "clean_flag_share": _le(total["clean_flag_share"], TARGETS["clean_flag_share"]),
    }
    return {
        "schema": SCHEMA, "version": 1, "quick": options.quick,
        "host": platform.node(), "kernel": platform.release(), "started": wall,
        "elapsed_s": round(time.monotonic() - started, 1),
        "settings": {k: (list(v) if isinstance(v, tuple) else v)
                     for k, v in options.__dict__.items() if k != "extra"},
        "workloads": {r.scenario.name: r.workload for r in recorded_list},
        "summary": summary, "targets": TARGETS, "met": met,
        "episodes": [s.to_dict() for s in all_scores], "runs": runs, "skipped": skipped,
    }


def _ge(value: float | None, target: float) -> bool | None:
    return None if value is None else bool(value >= target)


def _le(value: float | None, target: float) -> bool | None:
    return None if value is None else bool(value <= target)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _auc(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _sec(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def render_markdown(result: dict[str, Any]) -> str:
    """The result as Markdown: per-fault table, totals against targets, and the misses."""
    total = result["summary"]["total"]
    lines = [f"# Reveal validation on {markdown(result['host'])}"
             f"{' (quick)' if result['quick'] else ''}", "",
             f"Started {result['started']}, {result['elapsed_s']:.0f} s. Workloads: "
             + ", ".join(f"{k}: {v}" for k, v in result["workloads"].items()) + ".", "",
             "| Fault | Intensity | Subsystem | Episodes | Detected | Recall | "
             "Median TTD (s) | Attributed | Separation AUC (combined) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in result["summary"]["rows"]:
        lines.append(f"| {row['kind']} | {row['intensity']} | {row['subsystem']} | "
                     f"{row['episodes']} | {row['detected']} | {_pct(row['recall'])} | "
                     f"{_sec(row['median_ttd_s'])} | {row['attributed_ok']}/{row['detected']} | "
                     f"{_auc(row.get('auc', {}).get('combined'))} |")
    lines.append(f"| **all** | | | {total['episodes']} | {total['detected']} | "
                 f"**{_pct(total['recall'])}** | **{_sec(total['median_ttd_s'])}** | "
                 f"**{total['attributed_ok']}/{total['detected']}** | "
                 f"{_auc(total.get('auc', {}).get('combined'))} |")
    met = result["met"]

    def mark(key: str) -> str:
        return {True: "met", False: "**not met**", None: "n/a"}[met.get(key)]

    lines += ["", "| Measure | Value | Target | |", "|---|---|---|---|",
              f"| Episodes detected | {_pct(total['recall'])} | ≥ 95 % | {mark('recall')} |",
              f"| Median time to detect (window end) | {_sec(total['median_ttd_s'])} s | ≤ 5 s | "
              f"{mark('median_ttd_s')} |",
              f"| Attributed to the injected subsystem | {_pct(total['attribution_accuracy'])} | "
              f"≥ 90 % | {mark('attribution_accuracy')} |",
              *([f"| Claim names the cgroup or namespace acted on | "
                 f"{_pct(total['naming_accuracy'])} ({total['named']} of the detected "
                 f"episodes that have one) | ≥ 90 % | |"]
                if total.get("naming_accuracy") is not None else []),
              f"| Clean windows flagged | {_pct(total['clean_flag_share'])} "
              f"({total['clean_flagged']}/{total['clean_windows']}) | ≤ 0.5 % | "
              f"{mark('clean_flag_share')} |", "",
              f"Median time to detect by window start: {_sec(total['median_ttd_start_s'])} s. "
              "Separation AUC: probability that a window overlapping an episode scores above "
              "a clean window of the same run (threshold-free; 0.5 = chance). Per detector: "
              + ", ".join(f"{k} {v:.2f}" for k, v in total.get("auc", {}).items()) + "."]
    by_settle = total.get("clean_by_settle") or {}
    if len(by_settle) > 1:
        lines += ["", "Clean windows flagged when the clean time starts this long after each "
                  "episode's end: " + ", ".join(
                      f"{settle} s: {_pct(c['share'])} ({c['flagged']}/{c['windows']})"
                      for settle, c in by_settle.items()) + ". A share that falls as the "
                  "settle time grows says the flags are the host catching up after the "
                  "faults; one that stays says false alarms on a settled host."]
    share = total.get("clean_flag_share")
    if share is not None and share > 0.2:
        lines += ["", f"**Caution:** {_pct(share)} of the clean windows are flagged, so an "
                  "episode overlapping a flagged window says little: recall and time to "
                  "detect are not meaningful here. The separation AUC is the measure to read."]
    misses = [e for e in result["episodes"] if not (e["detected"] and e["attribution_ok"])]
    if misses:
        lines += ["", "## Misses and misattributions", "",
                  "| Run | Fault | Intensity | Verdict | Max score / threshold | "
                  "Channels that moved most (robust z) | Host meanwhile (baseline) |",
                  "|---|---|---|---|---|---|---|"]
        for e in misses:
            verdict = (f"attributed to {e['attributed']}" if e["detected"] else "not detected")
            ratios = ", ".join(f"{k} {v:.2f}" for k, v in e["max_ratio"].items()
                               if isinstance(v, int | float))
            moved = "; ".join(f"{markdown(m['channel'], 60)} ({m['robust_z']:+.1f})"
                              for m in e["max_ratio"].get("moved", [])[:3])
            lines.append(f"| {markdown(Path(e['run']).name)} | {e['kind']} | {e['intensity']} | "
                         f"{verdict} | {ratios or '–'} | {moved or '–'} | "
                         f"{host_text(e['max_ratio'].get('host')) or '–'} |")
    if result["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {markdown(s, 300)}" for s in result["skipped"]]
    return "\n".join(lines) + "\n"


def host_text(state: dict[str, Any] | None) -> str:
    """"load 2.1 (0.8), busy 64 % (40 %), steal 3.0 % (0.2 %)" from :func:`host_state`."""
    if not state:
        return ""
    during, base = state.get("during", {}), state.get("baseline", {})
    parts = []
    for key, label, unit in (("load1", "load", ""), ("busy_pct", "busy", " %"),
                             ("steal_pct", "steal", " %")):
        if key in during:
            was = f" ({base[key]:g}{unit})" if key in base else ""
            parts.append(f"{label} {during[key]:g}{unit}{was}")
    return ", ".join(parts)


def write_result(result: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write ``validate.json`` and ``validate.md`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "validate.json", out_dir / "validate.md"
    json_path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    if result.get("mode") == "live":
        md_path.write_text(render_live_markdown(result), encoding="utf-8")
    else:
        md_path.write_text(render_markdown(result), encoding="utf-8")
    return json_path, md_path
