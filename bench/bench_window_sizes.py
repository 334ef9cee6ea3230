"""Windows of several sizes on the labelled machines, and which sizes to ship, cross-fitted.

For every SMD and ASD machine in ``../shared/data`` the minute preset's analysis is fitted
on train and scored on test (causally, train's last rows completing the first windows) once
per window size in ``--sizes`` (10 rows, the preset's, and each candidate beside it). Each
candidate set of sizes is then joined by the shipped rule
(:func:`reveal.analysis.scales.combine`: mean over the sizes of score / threshold, flagged
when any size flags) and scored: point-wise best F1, AUPRC, automatic-threshold F1, event
recall, machines whose automatic F1 is below half their best.

The choice is 2-fold by machine: within each data set the machines are split by their
place in name order (even / odd); the candidate with the highest mean of best F1 and AUPRC
over both data sets on one half is reported on the other half, beside today's single size.

The flag rule of the shipped pair (10 and 5 rows) is chosen the same way among four rules
(by automatic F1), each reported on held-out machines with its false alarms a day.

    python bench/bench_window_sizes.py                  # → bench/results/window_sizes.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from provenance import analysis_settings, arguments, write_result  # noqa: E402
from reveal.analysis.scales import combine  # noqa: E402
from reveal.evaluate.metrics import (  # noqa: E402
    auprc,
    best_f1,
    event_prf,
    false_alarm_episodes,
    point_prf,
)
from reveal.model import Reveal, fit_for_run  # noqa: E402
from reveal.store.labelled import default_data_root, list_machines, load_machine  # noqa: E402

MAIN = 10  # the minute preset's window, rows
SHIPPED = 5  # the extra size shipped, rows (AnalyzeConfig.extra_window_rows of the preset)
#: the minute preset's settings changed for every size scored (each one's window alone)
BASE_OVERRIDES = {"extra_window_rows": ()}


def _ratio(a) -> np.ndarray:
    return np.asarray(a.verdicts.combined) / a.verdicts.combined_threshold


#: flag rules for the main and one extra size: (main flags, extra flags, mean of score /
#: threshold) -> flags; "main, or extra above 1" is the shipped one (reveal.analysis.scales)
RULES = {
    "any size flags": lambda m, e, j: m | e,
    "mean above 1 and a size flags": lambda m, e, j: (j > 1) & (m | e),
    "main, or extra with the mean above 1": lambda m, e, j: m | (e & (j > 1)),
    "main flags only": lambda m, e, j: m,
}


def rule_figures(lm, main, extra) -> dict[str, dict[str, float]]:
    """Automatic F1 and false alarms a day of every rule (windows aligned 1:1 by row)."""
    y = lm.labels.astype(bool)
    m, e = (np.asarray(a.verdicts.flagged, dtype=bool) for a in (main, extra))
    joined = (_ratio(main) + _ratio(extra)) / 2
    out = {}
    for name, rule in RULES.items():
        flags = rule(m, e, joined)
        episodes, clean = false_alarm_episodes(y, flags)
        hours = clean * lm.test.interval_s / 3600.0
        out[name] = {"auto_f1": point_prf(y, flags).f1,
                     "false_alarms_per_day": 24 * episodes / hours if hours else float("nan")}
    return out


def analyses(lm, sizes: list[int]) -> dict[int, object]:
    """The test part scored by the minute preset at each window size (rows)."""
    out = {}
    for rows in sizes:
        model = Reveal(preset="minute", overrides={**BASE_OVERRIDES, "window.size_rows": rows})
        out[rows] = fit_for_run(model, lm.test, lm.train).score_windows(lm.test, lead_in=lm.train)
    return out


def figures(y: np.ndarray, analysis) -> dict[str, float]:
    v = analysis.verdicts
    flagged = np.asarray(v.flagged, dtype=bool)
    return {"best_f1": best_f1(y, v.combined)[0].f1, "auprc": auprc(y, v.combined),
            "auto_f1": point_prf(y, flagged).f1, "event_recall": event_prf(y, flagged).recall}


def mean_of(rows: list[dict[str, float]]) -> dict[str, float]:
    out = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    out["below_half"] = int(sum(r["auto_f1"] < 0.5 * r["best_f1"] for r in rows))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="3,5,7,20", help="candidate extra sizes, rows")
    parser.add_argument("--most", type=int, default=2, help="extra sizes at most per set")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "window_sizes.json"))
    args = parser.parse_args()
    extra = [int(x) for x in args.sizes.split(",")]
    candidates = [()] + [c for k in range(1, args.most + 1)
                         for c in itertools.combinations(extra, k)]
    root = default_data_root()
    if root is None:
        print("no labelled data (../shared/data)", file=sys.stderr)
        return 2
    started = time.monotonic()
    per: dict[str, dict[str, dict[str, float]]] = {}
    rules: dict[str, dict[str, dict[str, float]]] = {}
    for ds in ("smd", "asd"):
        for name in list_machines(root, ds):
            lm = load_machine(root, ds, name)
            y = lm.labels.astype(bool)
            scored = analyses(lm, [MAIN, *extra])
            per[f"{ds}/{name}"] = {
                json.dumps(list(c)): figures(y, combine(scored[MAIN], [scored[r] for r in c])
                                             if c else scored[MAIN])
                for c in candidates}
            rules[f"{ds}/{name}"] = rule_figures(lm, scored[MAIN], scored[SHIPPED])
            print(f"{ds}/{name}", flush=True, file=sys.stderr)
    keys = {ds: sorted(k for k in per if k.startswith(ds + "/")) for ds in ("smd", "asd")}
    names = [json.dumps(list(c)) for c in candidates]
    table = {c: {ds: mean_of([per[k][c] for k in keys[ds]]) for ds in keys} for c in names}
    folds = []
    for fold in (0, 1):
        choose = {ds: [k for i, k in enumerate(keys[ds]) if i % 2 == fold] for ds in keys}
        other = {ds: [k for i, k in enumerate(keys[ds]) if i % 2 != fold] for ds in keys}

        def merit(c, machines=choose):
            return float(np.mean([np.mean([per[k][c]["best_f1"] + per[k][c]["auprc"]
                                           for k in machines[ds]]) for ds in machines]))
        chosen = max(names, key=merit)
        folds.append({"chosen_on": {ds: choose[ds] for ds in keys}, "chosen": json.loads(chosen),
                      "held_out": {ds: other[ds] for ds in keys},
                      "chosen_on_held_out": {ds: mean_of([per[k][chosen] for k in other[ds]])
                                             for ds in keys},
                      "today_on_held_out": {ds: mean_of([per[k]["[]"] for k in other[ds]])
                                            for ds in keys}})
    rule_folds = []
    for fold in (0, 1):
        choose = {ds: [k for i, k in enumerate(keys[ds]) if i % 2 == fold] for ds in keys}
        other = {ds: [k for i, k in enumerate(keys[ds]) if i % 2 != fold] for ds in keys}
        chosen = max(RULES, key=lambda r, c=choose: float(np.mean(
            [np.mean([rules[k][r]["auto_f1"] for k in c[ds]]) for ds in c])))
        rule_folds.append({"chosen": chosen, "held_out": {
            r: {ds: {f: float(np.mean([rules[k][r][f] for k in other[ds]]))
                     for f in ("auto_f1", "false_alarms_per_day")} for ds in keys}
            for r in RULES}})
    result = {"bench": "window_sizes", "main_rows": MAIN, "candidates": [list(c) for c in
                                                                          candidates],
              "rule": "mean over sizes of combined / threshold; flagged when any size flags",
              "means": table, "cross_fitted": folds, "per_machine": per,
              "flag_rules": {"sizes": [MAIN, SHIPPED], "cross_fitted": rule_folds,
                             "per_machine": rules},
              "seconds": round(time.monotonic() - started, 1)}
    settings = {**arguments(args), "data_root": str(root),
                "analysis": analysis_settings(BASE_OVERRIDES, interval_s=60.0),
                "window_sizes_rows": [MAIN, *extra], "shipped_extra_rows": SHIPPED,
                "candidates": [list(c) for c in candidates], "flag_rules": list(RULES)}
    write_result(args.out, result, settings, started=started)
    for c in names:
        print(f"{c:10s} " + " | ".join(
            f"{ds} best {m['best_f1']:.3f} auprc {m['auprc']:.3f} auto {m['auto_f1']:.3f} "
            f"evR {m['event_recall']:.2f} half<{m['below_half']}"
            for ds, m in table[c].items()))
    for f in folds:
        print(f"chosen {f['chosen']} on one half; on the other: " + " | ".join(
            f"{ds} {m['best_f1']:.3f}/{m['auprc']:.3f}/{m['auto_f1']:.3f} (today "
            f"{t['best_f1']:.3f}/{t['auprc']:.3f}/{t['auto_f1']:.3f})"
            for (ds, m), t in zip(f["chosen_on_held_out"].items(),
                                  f["today_on_held_out"].values(), strict=True)))
    for f in rule_folds:
        print(f"flag rule chosen on one half: {f['chosen']!r}; on the other half:")
        for r, by in f["held_out"].items():
            print(f"   {r:40s} " + " | ".join(
                f"{ds} auto {v['auto_f1']:.3f} FA/day {v['false_alarms_per_day']:.2f}"
                for ds, v in by.items()))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
