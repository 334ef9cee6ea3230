"""``reveal select``: correlation pruning over one or more runs → a reusable metric set."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reveal.analysis.derive import derive
from reveal.analysis.select import prune, pruning_curves, save_metric_set, union
from reveal.catalog import NOT_DETECTED, default_catalog
from reveal.frame import channel_metric
from reveal.paths import check_writable_file
from reveal.store.sources import open_source


def run(args: argparse.Namespace) -> int:
    check_writable_file(args.out)  # before reading the runs, not after
    if args.curves:
        check_writable_file(args.curves)
    catalog = default_catalog()
    selections, curves = [], {}
    for spec in args.runs:
        tel, _ = derive(open_source(spec), catalog)
        dynamic = [c for c in tel.channels
                   if catalog.lookup(channel_metric(c)).kind not in NOT_DETECTED]
        tel = tel.select(dynamic)
        selection = prune(tel, args.threshold, catalog)
        selections.append(selection)
        print(f"{spec}: kept {len(selection.kept)} of "
              f"{len(selection.kept) + len(selection.redundant)} varying channels "
              f"({len(selection.constant)} constant)", file=sys.stderr)
        if args.curves:
            curves[str(spec)] = pruning_curves(tel, catalog=catalog)
    merged = union(selections)
    save_metric_set(merged, args.out)
    print(f"metric set: {len(merged.kept)} channels (union over {len(args.runs)} runs) "
          f"written to {args.out}")
    if args.curves:
        Path(args.curves).write_text(json.dumps(curves, indent=2) + "\n", encoding="utf-8")
        print(f"pruning curves written to {args.curves}")
    return 0
