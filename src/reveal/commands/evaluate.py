"""``reveal evaluate``: Reveal and a PCA baseline on the labelled SMD / ASD machines."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from reveal.errors import InputError
from reveal.evaluate.labelled import EvalSettings, evaluate
from reveal.paths import check_writable_file
from reveal.settings import parse_sets
from reveal.store.labelled import default_data_root


def _fmt(x: float) -> str:
    return "  n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.3f}"


def _rate(x: float) -> str:
    return "  n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:5.2f}"


def _table(dataset: str, block: dict) -> list[str]:
    head = (f"{'machine':<14} {'method':<8} {'bestF1':>6} {'autoF1':>6} {'P':>5} {'R':>5} "
            f"{'AUPRC':>5} {'evR':>5} {'evP':>5} {'HR100':>5} {'HR150':>5} {'FA/d':>5} "
            f"{'PA-F1*':>6}")
    lines = [f"== {dataset.upper()} ({block['n_machines']} machines) ==", head]
    rows = [*block["machines"].items(), ("MEAN", block["mean"])]
    for name, methods in rows:
        for method, m in methods.items():
            label = "batch" if method == "reveal" else "PCA" if method == "pca_raw" else method
            lines.append(
                f"{name:<14} {label:<8} {_fmt(m['best_f1']):>6} {_fmt(m['auto']['f1']):>6} "
                f"{_fmt(m['auto']['precision'])} {_fmt(m['auto']['recall'])} "
                f"{_fmt(m['auprc'])} {_fmt(m['event']['recall'])} {_fmt(m['event']['precision'])} "
                f"{_fmt(m['hitrate_100'])} {_fmt(m['hitrate_150'])} "
                f"{_rate(m['false_episodes_per_day'])} "
                f"{_fmt(m['point_adjusted_f1_inflated']):>6}")
    lines.append("FA/d: false alarms per day, as an operator counts them: flagged runs (maximal "
                 "runs of flagged rows) touching no labelled segment, per day of rows outside "
                 "labelled segments.")
    lines.append("* PA-F1: point-adjusted F1, known to be inflated (a random detector scores "
                 "~0.76 on SMD); shown for comparison with published figures only.")
    return lines


def run(args: argparse.Namespace) -> int:
    settings = EvalSettings(overrides=tuple(parse_sets(args.settings).items()))
    settings.validate()
    if args.json:
        check_writable_file(args.json)  # before the evaluation, not after it
    root = Path(args.data) if args.data else default_data_root()
    if root is None or not root.is_dir():
        raise InputError("no labelled data found (give --data ROOT or set $REVEAL_DATA)",
                         str(args.data) if args.data else None)
    missing = [d for d in args.datasets if not (root / d / "test").is_dir()]
    if missing:
        raise InputError(f"no {', '.join(missing)} data (expected {missing[0]}/test/)",
                         str(root))
    progress = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    result = evaluate(root, args.datasets, args.machines, settings=settings,
                      progress=progress, mode=args.mode)
    if not result["datasets"]:
        raise InputError(f"none of the machines {args.machines} is in "
                         f"{', '.join(args.datasets)}", str(root))
    for dataset, block in result["datasets"].items():
        print("\n".join(_table(dataset, block)))
        print()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=float) + "\n",
                                   encoding="utf-8")
        print(f"figures written to {args.json}")
    return 0
