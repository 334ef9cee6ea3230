"""Recall without noise: how much of each fault is flagged, and what is flagged outside.

Every run of recorded suites (``reveal validate --out DIR`` directories, or kept archives
under ``bench/recordings/``) is analysed against its own baseline under each *variant* of
the settings (``--variant NAME:key=value,key=value``; ``default`` is today's settings), and
every injected episode is scored on what an operator watching it meets:

- ``detected`` and ``ttd_s``: a flagged window that overlaps the fault, and how long after
  the fault's start the first one ends (seconds; an OOM kill 0.2 s into the fault is seen
  first by windows that began before it);
- ``coverage``: the share of windows lying wholly within the fault that are flagged (an
  alert that lasts as long as the fault: ≥ 0.9);
- ``after_10_30`` and ``after_30``: the flagged share of the windows that start 10–30 s, and
  more than 30 s, after the fault's end, up to the next fault (its aftermath; a clean span);
- ``before``: the flagged share of the windows that end before the run's first fault;
- ``first_subsystem``: the subsystem of the first flagged window's first reason.

Totals per variant: episodes, detected, median TTD, mean coverage, share of episodes
covered ≥ 0.9, the before/after shares over all runs, and the share of detected episodes
whose first claim is in the injected subsystem.

    python bench/bench_recall.py DIR [DIR ...] --variant default \\
        --variant before:detect.matters_alone=false,detect.lasting_s=0,detect.settle_s=20 \\
        --result bench/results/recall.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from provenance import analysis_settings, arguments, script_argv, write_result
from recordings import is_archive, name_of, opened

RESULT = Path(__file__).resolve().parent / "results" / "recall.json"
S = 1e9


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME:key=value,key=value`` (values read as JSON, else as text)."""
    name, _, rest = text.partition(":")
    settings: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--variant {text!r}: {item!r} is not key=value")
        try:
            settings[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            settings[key.strip()] = value
    return name, settings


def runs_of(suite: Path) -> Iterator[tuple[Path, Path]]:
    """(run, baseline) of every faulted run in a recorded suite: each ``run*`` directory
    with an ``events.jsonl`` beside a ``baseline1``."""
    for scenario in sorted((suite / "runs").iterdir()):
        base = scenario / "baseline1"
        if not base.is_dir():
            continue
        for run in sorted(scenario.glob("run*")):
            if run.is_dir() and (run / "events.jsonl").is_file():
                yield run, base


def score_run(run: Path, base: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Per injected episode of ``run``, the figures of the module's list."""
    from reveal.model import Reveal

    episodes = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()
                if line.strip()]
    model = Reveal(overrides=settings or None).fit(base)
    report = model.report(run)
    start = np.asarray(report.windows.start_ns, dtype=np.float64)
    end = np.asarray(report.windows.end_ns, dtype=np.float64)
    flagged = np.asarray(report.windows.flagged, dtype=bool)
    first_reason = {a.window_id: a.reasons[0].subsystem for a in report.anomalies if a.reasons}
    episodes.sort(key=lambda e: e["start_ns"])
    before = end <= episodes[0]["start_ns"] if episodes else np.ones(len(start), dtype=bool)
    out = []
    for i, e in enumerate(episodes):
        upto = episodes[i + 1]["start_ns"] if i + 1 < len(episodes) else np.inf
        within = (start >= e["start_ns"]) & (end <= e["end_ns"])
        overlaps = (end > e["start_ns"]) & (start < e["end_ns"])
        hits = np.flatnonzero(overlaps & flagged)
        since_end = (start - e["end_ns"]) / S
        late = (since_end >= 10) & (since_end < 30) & (end <= upto)
        later = (since_end >= 30) & (end <= upto)
        out.append({
            "run": str(run), "kind": e["kind"], "intensity": e["intensity"],
            "subsystem": e["subsystem"], "duration_s": (e["end_ns"] - e["start_ns"]) / S,
            "detected": bool(hits.size),
            "ttd_s": float((end[hits[0]] - e["start_ns"]) / S) if hits.size else None,
            "coverage": float(flagged[within].mean()) if within.any() else None,
            "after_10_30": [int(flagged[late].sum()), int(late.sum())],
            "after_30": [int(flagged[later].sum()), int(later.sum())],
            "first_subsystem": first_reason.get(int(hits[0])) if hits.size else None,
        })
    if out:
        out[0]["before"] = [int(flagged[before].sum()), int(before.sum())]
    return out


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The variant's figures over every episode."""
    detected = [r for r in rows if r["detected"]]
    covered = [r["coverage"] for r in rows if r["coverage"] is not None]

    def share(key: str) -> dict[str, Any]:
        hit = sum(r[key][0] for r in rows if key in r)
        n = sum(r[key][1] for r in rows if key in r)
        return {"flagged": hit, "windows": n, "share": hit / n if n else None}

    return {
        "episodes": len(rows), "detected": len(detected),
        "recall": len(detected) / len(rows) if rows else None,
        "median_ttd_s": float(np.median([r["ttd_s"] for r in detected])) if detected else None,
        "mean_coverage": float(np.mean(covered)) if covered else None,
        "covered_90": (sum(c >= 0.9 for c in covered) / len(covered)) if covered else None,
        "before": share("before"), "after_10_30": share("after_10_30"),
        "after_30": share("after_30"),
        "first_claim_in_subsystem": (sum(r["first_subsystem"] == r["subsystem"]
                                         for r in detected) / len(detected)
                                     if detected else None),
    }


def score_variants(suites: list[Path],
                   variants: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per variant (name, settings): its settings, totals and episodes over ``suites``."""
    out: dict[str, Any] = {}
    with ExitStack() as stack:
        dirs = [stack.enter_context(opened(p)) for p in suites]
        for name, settings in variants:
            rows: list[dict[str, Any]] = []
            for suite in dirs:
                for run, base in runs_of(suite):
                    print(f"[{name}] {run}", file=sys.stderr, flush=True)
                    rows += score_run(run, base, settings)
            out[name] = {"settings": settings, "total": totals(rows), "episodes": rows}
            print(f"[{name}] {json.dumps(out[name]['total'])}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suites", type=Path, nargs="+",
                        help="recorded suites (validate --out directories or kept archives)")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME or NAME:key=value,... (repeatable; default: 'default')")
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    started = time.monotonic()
    variants = [parse_variant(v) for v in (args.variant or ["default"])]
    result: dict[str, Any] = {"benchmark": "recall",
                              "suites": [name_of(p) for p in args.suites],
                              "recordings": [name_of(p) for p in args.suites if is_archive(p)],
                              "variants": {}}
    result["variants"] = score_variants(args.suites, variants)
    write_result(args.result, result,
                 {"options": arguments(args),
                  "analysis": {name: analysis_settings(s) for name, s in variants}},
                 script_argv(__file__, argv), started)
    print(f"written: {args.result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
