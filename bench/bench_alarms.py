"""Alarms an operator meets: a run compared with a reference run recorded separately.

Each fault of the suite gets its own pair of recordings on the distributed reference job
(two processes talking TCP across network namespaces): a clean baseline, then a run with
the fault in its middle. Every run is analysed against its own baseline, as a user compares
a new run with a reference run (``reveal analyze RUN --baseline BASE``), and scored on:

- ``before``: share of windows that end before the fault starts that are flagged;
- ``after`` (``after10``): share of windows that start more than ``--after-s`` seconds
  (default 30; and 10) after the fault ended that are flagged (the host has settled);
- ``coverage``: the share of the windows wholly within the fault that are flagged (an
  alert that lasts as long as the fault);
- detection, attribution (the heaviest subsystem over the fault's flagged windows), and
  whether the first claim during the fault names a channel of the injected subsystem;
- report episodes that start after the fault ended (its aftermath should be at most one).

    python bench/bench_alarms.py record --out DIR [--baseline-s 90 --run-s 90 --fault-s 20]
    python bench/bench_alarms.py analyse DIR [DIR ...] --result bench/results/alarms.json

A DIR may be a kept recording, ``bench/recordings/NAME.tar.xz`` (``bench/recordings.py``):
the result then names it under ``recordings``, and ``bench/rescore.py`` scores it again
with the code of the day and says which figures moved.

``record`` needs root, stress-ng, fio, tc and PyTorch (what ``scripts/install.sh`` installs);
it takes about (baseline + run + 20 s) per fault. ``analyse`` reads recorded suites only, so a
change of the analysis can be measured again on the same recordings. ``--split`` scores
the faults of one half of the suite apart from the other (choose on one, report the other).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import analysis_settings, arguments, script_argv, write_result
from recordings import is_archive, name_of, opened

RESULT = Path(__file__).resolve().parent / "results" / "alarms.json"
#: Faults of the suite, all on the distributed job, at their higher intensity.
SUITE = ("cpu_contention", "memory_pressure", "writeback_storm", "disk_burst", "packet_loss",
         "net_delay", "net_throttle", "udp_flood", "cgroup_throttle")


def record(out: Path, faults: tuple[str, ...], intensity: str, baseline_s: float,
           run_s: float, fault_s: float, at_s: float | None = None,
           one_baseline: bool = False) -> None:
    """Record one baseline and one faulted run per fault under ``out/runs/distributed``;
    with ``one_baseline``, one baseline first for all the runs (a reference run that the
    later runs are compared with, minutes after it)."""
    from reveal.inject.cleanup import install_signal_handlers
    from reveal.inject.faults import FAULTS
    from reveal.inject.scenario import EpisodePlan, Scenario, run_scenario

    install_signal_handlers()
    plans = []
    for kind in faults:
        span = fault_s * (2.0 if FAULTS[kind].self_ending else 1.0)
        start = (run_s - span) / 2.0 if at_s is None else at_s
        plans.append([EpisodePlan(kind, intensity, start, fault_s)])
    scenario = Scenario("distributed", True, baseline_s, run_s, plans,
                        baseline_each_run=not one_baseline)
    started = time.monotonic()
    recorded = run_scenario(scenario, out / "runs",
                            lambda m: print(m, file=sys.stderr, flush=True), "torch_ddp")
    (out / "validate.json").write_text(json.dumps(
        {"workloads": {"distributed": recorded.workload}, "faults": list(faults),
         "intensity": intensity, "baseline_s": baseline_s, "run_s": run_s,
         "fault_s": fault_s, "one_baseline": one_baseline, "host": platform.node(),
         "skipped": [s for run in recorded.runs for s in run.skipped],
         "recorded_s": round(time.monotonic() - started, 1)}, indent=1) + "\n")


def score_run(report: Any, episode: Any, after_s: float) -> dict[str, Any]:
    """The figures of one run (see the module's docstring)."""
    from reveal.inject.benign.suite import first_claim
    from reveal.inject.scoring import score_report

    w = report.windows
    start = np.asarray(w.start_ns, dtype=np.int64)
    end = np.asarray(w.end_ns, dtype=np.int64)
    flagged = np.asarray(w.flagged, dtype=bool)
    before = end <= episode.start_ns
    after = start >= episode.end_ns + int(after_s * 1e9)
    after10 = start >= episode.end_ns + int(10e9)
    overlapping = (start < episode.end_ns) & (end > episode.start_ns)
    inside = (start >= episode.start_ns) & (end <= episode.end_ns)
    scored, _ = score_report(report, [episode])
    first_subsystem, claim = first_claim(report, overlapping & flagged)
    later = [e for e in report.episodes if e.start_ns >= episode.end_ns]
    return {
        "kind": episode.kind, "subsystem": episode.subsystem, "intensity": episode.intensity,
        "windows": int(flagged.size), "flagged": int(flagged.sum()),
        "windows_before": int(before.sum()), "flagged_before": int((before & flagged).sum()),
        "windows_after": int(after.sum()), "flagged_after": int((after & flagged).sum()),
        "windows_after10": int(after10.sum()),
        "flagged_after10": int((after10 & flagged).sum()),
        "windows_inside": int(inside.sum()), "flagged_inside": int((inside & flagged).sum()),
        "detected": bool(scored[0].detected), "ttd_s": scored[0].ttd_s,
        "attributed": scored[0].attributed, "attribution_ok": bool(scored[0].attribution_ok),
        "first_claim_subsystem": first_subsystem,
        "first_claim_ok": first_subsystem == episode.subsystem, "first_claim": claim,
        "episodes_after_fault": len(later), "episodes": len(report.episodes),
        "steady_states": [n.claim for n in report.steady_states],
        "aftermath_claims": [e.claim for e in later][:3],
        "before_claims": [a.claim for a in report.anomalies
                          if a.end_ns <= episode.start_ns][:3],
    }


def analyse(dirs: list[Path], after_s: float,
            overrides: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Analyse every recorded run of ``dirs`` against its own baseline (``overrides``:
    analysis settings by dotted name, as ``reveal analyze`` takes them)."""
    from reveal.inject.validation import load_recorded
    from reveal.model import Reveal, report_run
    from reveal.store.run_reader import read_run

    rows = []
    for given in dirs:
        with opened(given) as directory:  # a kept recording (.tar.xz) is unpacked first
            for recorded in load_recorded(directory):
                for rec in recorded.runs:
                    if len(rec.episodes) != 1:
                        continue
                    print(f"analysing {rec.path}", file=sys.stderr, flush=True)
                    report = report_run(read_run(rec.path), read_run(rec.baseline),
                                        model=Reveal(overrides=dict(overrides or {})))
                    row = score_run(report, rec.episodes[0], after_s)
                    # where the run lies: inside the archive, not in a temporary directory
                    row["run"] = (f"{name_of(given)}:{rec.path.relative_to(directory)}"
                                  if is_archive(given) else str(rec.path))
                    row["warnings"] = report.warnings[:5]
                    rows.append(row)
    return rows


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Sums and shares over ``rows``."""
    if not rows:
        return {}
    wb = sum(r["windows_before"] for r in rows)
    wa = sum(r["windows_after"] for r in rows)
    wa10 = sum(r["windows_after10"] for r in rows)
    ttd = [r["ttd_s"] for r in rows if r["ttd_s"] is not None]
    n = len(rows)
    return {
        "runs": n,
        "flag_share": round(sum(r["flagged"] for r in rows)
                            / max(sum(r["windows"] for r in rows), 1), 4),
        "episodes": sum(r["episodes"] for r in rows),
        "before_flag_share": round(sum(r["flagged_before"] for r in rows) / max(wb, 1), 4),
        "after_flag_share": round(sum(r["flagged_after"] for r in rows) / max(wa, 1), 4),
        "after10_flag_share": round(sum(r["flagged_after10"] for r in rows) / max(wa10, 1), 4),
        "detected": round(sum(r["detected"] for r in rows) / n, 3),
        "attributed": round(sum(r["attribution_ok"] for r in rows) / n, 3),
        "first_claim_in_subsystem": round(sum(r["first_claim_ok"] for r in rows) / n, 3),
        "median_ttd_s": float(np.median(ttd)) if ttd else None,
        # the share of the windows wholly within a fault that are flagged (an alert that
        # lasts as long as the fault), over the runs that count them
        "coverage": round(sum(r.get("flagged_inside", 0) for r in rows)
                          / max(sum(r.get("windows_inside", 0) for r in rows), 1), 4),
        "max_episodes_after_fault": max(r["episodes_after_fault"] for r in rows),
        "windows_before": wb, "windows_after": wa, "windows_after10": wa10,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record the suite (root)")
    rec.add_argument("--out", type=Path, required=True)
    rec.add_argument("--faults", default=",".join(SUITE))
    rec.add_argument("--intensity", default="high")
    rec.add_argument("--baseline-s", type=float, default=90.0)
    rec.add_argument("--run-s", type=float, default=90.0)
    rec.add_argument("--fault-s", type=float, default=20.0)
    rec.add_argument("--at-s", type=float, default=None,
                     help="seconds into the run the fault starts (default: in the middle)")
    rec.add_argument("--one-baseline", action="store_true",
                     help="one baseline for all the runs, recorded first (default: a fresh "
                          "baseline right before each run)")
    ana = sub.add_parser("analyse", help="analyse recorded suites")
    ana.add_argument("dirs", type=Path, nargs="+")
    ana.add_argument("--after-s", type=float, default=30.0)
    ana.add_argument("--result", type=Path, default=RESULT)
    ana.add_argument("--label", default="", help="a name for this measurement in the JSON")
    ana.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="an analysis setting by dotted name (JSON value), e.g. "
                          "detect.significance=false")
    args = parser.parse_args(argv)
    if args.command == "record":
        record(args.out, tuple(f for f in args.faults.split(",") if f), args.intensity,
               args.baseline_s, args.run_s, args.fault_s, args.at_s, args.one_baseline)
        return 0
    started = time.monotonic()
    settings = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    rows = analyse(args.dirs, args.after_s, settings)
    half = {k: i % 2 for i, k in enumerate(SUITE)}
    result = {
        "benchmark": "alarms", "label": args.label, "after_s": args.after_s,
        "settings": settings,
        "dirs": [str(d) for d in args.dirs], "cpus": os.cpu_count(),
        "recordings": [name_of(d) for d in args.dirs if is_archive(d)],
        "analysis_wall_s": round(time.monotonic() - started, 1),
        "total": totals(rows),
        "halves": {str(h): totals([r for r in rows if half.get(r["kind"], 0) == h])
                   for h in (0, 1)},
        "rows": rows,
    }
    write_result(args.result, result, {**arguments(args), "analysis": analysis_settings(settings)},
                 script_argv(__file__, argv), started, default=str)
    print(json.dumps(result["total"], indent=1))
    for r in rows:
        print(f"{r['kind']:16} before {r['flagged_before']:3}/{r['windows_before']:3} "
              f"after10 {r['flagged_after10']:3}/{r['windows_after10']:3} "
              f"after {r['flagged_after']:3}/{r['windows_after']:3} det {r['detected']!s:5} "
              f"attr {r['attributed']!s:8} first {r['first_claim_subsystem']!s:8} "
              f"later {r['episodes_after_fault']} | {r['first_claim'][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
