"""Score every kept recording again with today's code and say which figures moved.

Each result under ``bench/results/`` that names kept recordings (``recordings``: archives
under ``bench/recordings/``, see ``bench/recordings.py``) is made again from them, with the
settings it was made with (its ``settings`` and ``after_s``), and compared with what it
holds: every figure of its ``total`` and, per run, the counts and verdicts (a kept live
scenario of ``bench/bench_live_latency.py`` is replayed through the watch's scorer, one of
``bench/bench_learn_own_fit.py`` learned again both ways). A figure that
moved is listed with its stored value, its value now and the difference.

    python bench/rescore.py                      # every result that names a recording
    python bench/rescore.py bench/results/alarms_kept.json --check
    python bench/rescore.py --out rescored.json  # the comparison as JSON (with provenance)

Exit status: 0, or 1 with ``--check`` when a figure moved (or a recording is missing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from provenance import ROOT, arguments, script_argv, write_result
from recordings import name_of

RESULTS = ROOT / "bench" / "results"
#: per-run figures compared (counts and verdicts; claims' wording is not a figure)
RUN_FIGURES = ("windows", "flagged", "flagged_before", "flagged_after", "flagged_after10",
               "detected", "attributed", "first_claim_subsystem", "episodes_after_fault",
               "episodes")
#: relative difference below which a number has not moved (rounding of stored shares)
TOLERANCE = 1e-6


def kept_results(paths: list[Path] | None = None) -> list[Path]:
    """The result files to score again: ``paths``, else every result naming a recording."""
    if paths:
        return paths
    found = []
    for path in sorted(RESULTS.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("recordings"):
            found.append(path)
    return found


def _moved(stored: Any, now: Any) -> bool:
    if isinstance(stored, bool) or isinstance(now, bool) or not (
            isinstance(stored, int | float) and isinstance(now, int | float)):
        return stored != now
    return abs(now - stored) > TOLERANCE * max(1.0, abs(stored))


def compare(stored: Mapping[str, Any], now: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Figures of ``stored`` whose value in ``now`` differs: name, stored, now, by."""
    out = []
    for name in sorted(set(stored) | set(now)):
        a, b = stored.get(name), now.get(name)
        if _moved(a, b):
            by = (b - a if isinstance(a, int | float) and isinstance(b, int | float)
                  and not isinstance(a, bool) else None)
            out.append({"figure": name, "stored": a, "now": b, "by": by})
    return out


def _kept(path: Path, stored: Mapping[str, Any]) -> tuple[list[Path], dict[str, Any] | None]:
    """The archives the result at ``path`` names, and its comparison when some are missing
    (None when all are there)."""
    archives = [ROOT / name for name in stored["recordings"]]
    absent = [str(a) for a in archives if not a.is_file()]
    return archives, ({"result": str(path), "missing": absent} if absent else None)


def _rescore_recall(path: Path, stored: dict[str, Any]) -> dict[str, Any]:
    """A recall result (``bench/bench_recall.py``) made again: each variant's totals."""
    import bench_recall

    archives, missing = _kept(path, stored)
    if missing:
        return missing
    started = time.monotonic()
    variants = [(name, dict(v.get("settings") or {}))
                for name, v in stored["variants"].items()]
    now = bench_recall.score_variants(archives, variants)
    moved = []
    for name, _ in variants:
        flat_then = _flat(stored["variants"][name]["total"])
        flat_now = _flat(now[name]["total"])
        moved += [{"where": name, **m} for m in compare(flat_then, flat_now)]
    return {"result": name_of(path),
            "recordings": stored["recordings"], "runs": len(variants), "moved": moved,
            "total_now": {name: now[name]["total"] for name, _ in variants},
            "wall_s": round(time.monotonic() - started, 1)}


def _rescore_live_latency(path: Path, stored: dict[str, Any]) -> dict[str, Any]:
    """A live-latency result (``bench/bench_live_latency.py``) made again: each kept live
    scenario replayed through today's scorer with the watch's own model."""
    import bench_live_latency

    archives, missing = _kept(path, stored)
    if missing:
        return missing
    started = time.monotonic()
    scenarios = [bench_live_latency.measure(a, int(stored.get("score_every", 5)))
                 for a in archives]
    now = bench_live_latency.figures(scenarios)
    moved = [{"where": "total", **m} for m in compare(stored.get("total", {}), now)]
    return {"result": name_of(path),
            "recordings": stored["recordings"], "runs": len(scenarios), "moved": moved,
            "total_now": now, "wall_s": round(time.monotonic() - started, 1)}


def _rescore_learn_own_fit(path: Path, stored: dict[str, Any]) -> dict[str, Any]:
    """A learn-own-fit result (``bench/bench_learn_own_fit.py``) made again: each kept live
    scenario learned both ways, the provisional fit's span as stored."""
    import bench_learn_own_fit

    archives, missing = _kept(path, stored)
    if missing:
        return missing
    started = time.monotonic()
    spans = [(s["provisional_fit"]["at_s"], s["provisional_fit"]["seconds"])
             for s in stored["scenarios"]]
    scenarios = [bench_learn_own_fit.measure(a, s) for a, s in zip(archives, spans, strict=True)]
    now = bench_learn_own_fit.figures(scenarios)
    moved = [{"where": "total", **m}
             for m in compare(_flat(stored.get("total", {})), _flat(now))]
    return {"result": name_of(path),
            "recordings": stored["recordings"], "runs": len(scenarios), "moved": moved,
            "total_now": now, "wall_s": round(time.monotonic() - started, 1)}


def _rescore_first_claims(path: Path, stored: dict[str, Any]) -> dict[str, Any]:
    """A first-claims result (``bench/bench_first_claims.py``) made again: each kept live
    run's faults replayed with its own model."""
    import bench_first_claims

    archives, missing = _kept(path, stored)
    if missing:
        return missing
    started = time.monotonic()
    scenarios = [bench_first_claims.first_claims(a) for a in archives]
    claimed = sum(s["claimed"] for s in scenarios)
    now = {"faults": sum(len(s["faults"]) for s in scenarios), "claimed": claimed,
           "in_subsystem": sum(s["in_subsystem"] for s in scenarios)}
    moved = [{"where": "total", **m}
             for m in compare(_flat({k: stored.get("total", {}).get(k) for k in now}), now)]
    return {"result": name_of(path), "recordings": stored["recordings"],
            "runs": len(scenarios), "moved": moved, "total_now": now,
            "wall_s": round(time.monotonic() - started, 1)}


def _flat(total: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``total`` with nested figures named by their path (``before.share``)."""
    out: dict[str, Any] = {}
    for key, value in total.items():
        if isinstance(value, Mapping):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def rescore(path: Path) -> dict[str, Any]:
    """Make the result at ``path`` again from its recordings and compare."""
    import bench_alarms

    stored = json.loads(path.read_text())
    if stored.get("benchmark") == "recall":
        return _rescore_recall(path, stored)
    if stored.get("benchmark") == "live_latency":
        return _rescore_live_latency(path, stored)
    if stored.get("benchmark") == "learn_own_fit":
        return _rescore_learn_own_fit(path, stored)
    if stored.get("benchmark") == "first_claims":
        return _rescore_first_claims(path, stored)
    if stored.get("benchmark") != "alarms":
        return {"result": str(path), "skipped": f"not an alarms result ({stored.get('benchmark')})"}
    archives, missing = _kept(path, stored)
    if missing:
        return missing
    started = time.monotonic()
    rows = bench_alarms.analyse(archives, float(stored.get("after_s", 30.0)),
                                dict(stored.get("settings") or {}))
    total = bench_alarms.totals(rows)
    moved = [{"where": "total", **m} for m in compare(stored.get("total", {}), total)]
    old_rows = {r["run"]: r for r in stored.get("rows", [])}
    for row in rows:
        old = old_rows.pop(row["run"], None)
        if old is None:
            moved.append({"where": row["run"], "figure": "run", "stored": None, "now": "new",
                          "by": None})
            continue
        pick = {k: old.get(k) for k in RUN_FIGURES}, {k: row.get(k) for k in RUN_FIGURES}
        moved += [{"where": row["run"], **m} for m in compare(*pick)]
    moved += [{"where": run, "figure": "run", "stored": "kept", "now": None, "by": None}
              for run in old_rows]
    return {"result": name_of(path),
            "recordings": stored["recordings"], "runs": len(rows), "moved": moved,
            "total_now": total, "wall_s": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, nargs="*",
                        help="result files (default: every one that names a recording)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a figure moved or a recording is missing")
    parser.add_argument("--out", type=Path, default=None, help="write the comparison here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = kept_results(args.results)
    if not paths:
        print("no result names a kept recording", file=sys.stderr)
        return 1 if args.check else 0
    done = []
    for i, path in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {path}", file=sys.stderr, flush=True)
        outcome = rescore(path)
        done.append(outcome)
        if "missing" in outcome:
            print(f"  recordings missing: {', '.join(outcome['missing'])}")
        elif "skipped" in outcome:
            print(f"  skipped: {outcome['skipped']}")
        elif not outcome["moved"]:
            print(f"  reproduced: {outcome['runs']} runs, every figure as stored")
        else:
            print(f"  {len(outcome['moved'])} figures moved:")
            for m in outcome["moved"]:
                by = f" ({m['by']:+g})" if isinstance(m["by"], int | float) else ""
                print(f"    {m['where']}: {m['figure']}: {m['stored']} -> {m['now']}{by}")
    if args.out is not None:
        write_result(args.out, {"benchmark": "rescore", "results": done},
                     arguments(args), script_argv(__file__, argv), started, default=str)
    failed = any(o.get("missing") or o.get("moved") for o in done)
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
