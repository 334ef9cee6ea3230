"""``reveal compare``: window-granularity agreement and run-to-run reproducibility."""

from __future__ import annotations

import argparse
import json
from typing import Any

from reveal.errors import InputError
from reveal.evaluate.studies import granularity_study, reproducibility_study
from reveal.report.escape import markdown


def _fmt(value: Any, pattern: str = "{:.2f}") -> str:
    return "–" if value is None else pattern.format(value)


def _windows(args: argparse.Namespace) -> dict[str, Any]:
    result = granularity_study(args.run, args.baseline)
    print("| Setting (size/stride) | Windows | Flagged | Segments | Flagged time (s) |")
    print("|---|---|---|---|---|")
    for s in result["settings"]:
        print(f"| {s['size_s']:g} s/{s['stride_s']:g} s | {s['windows']} | "
              f"{s['flagged_windows']} | {s['segments']} | {s['flagged_s']:.1f} |")
    print()
    print("| Pair (A vs B) | IoU | Hit byCount | Hit byLength |")
    print("|---|---|---|---|")
    for p in result["pairs"]:
        print(f"| {p['a']} vs {p['b']} | {_fmt(p['iou'])} | {_fmt(p['hit_by_count'])} | "
              f"{_fmt(p['hit_by_length'])} |")
    return result


def _repro(args: argparse.Namespace) -> dict[str, Any]:
    if len(args.runs) < 2:
        raise InputError("compare repro needs at least two runs")
    try:
        result = reproducibility_study(args.runs, step_s=args.step, chunk_s=args.chunk,
                                       alpha=args.alpha)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    share = result["reproducible_share"]
    print(f"{result['runs']} runs, {result['channels']} channels, {result['chunks']} chunks of "
          f"{result['chunk_s']:g} s: {_fmt(share and 100 * share, '{:.1f}')} % of channels "
          f"reproducible (two-sided Wilcoxon p < {result['alpha']:g}, closer to the median "
          f"trace than to a time-shuffled one)")
    rows = sorted(result["results"], key=lambda r: (r["reproducible"], -(r["p_value"] or 1)))
    print()
    print("| Channel | DTW to median (per run) | Shuffled | p | Reproducible |")
    print("|---|---|---|---|---|")
    for r in rows[:args.show]:
        dtw = ", ".join(f"{v:.2f}" for v in r["dtw_to_median"])
        print(f"| {markdown(r['channel'], 70)} | {dtw} | {r['median_surrogate']:.2f} | "
              f"{_fmt(r['p_value'], '{:.2g}')} | {'yes' if r['reproducible'] else 'no'} |")
    return result


def run(args: argparse.Namespace) -> int:
    result = _windows(args) if args.study == "windows" else _repro(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str) + "\n",
                             encoding="utf-8")
        print(f"written: {args.json}")
    return 0
