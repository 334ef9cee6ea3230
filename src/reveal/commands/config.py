"""``reveal config --show``: the effective settings tree, as ``--set`` names it."""

from __future__ import annotations

import argparse
import json
import sys

from reveal.analysis.presets import preset, preset_for, with_overrides
from reveal.errors import InputError
from reveal.fleet.config import FleetConfig
from reveal.live.config import watch_config
from reveal.live.keeper import learn_settings
from reveal.settings import (
    FLEET,
    WATCH,
    flatten,
    parse_sets,
    replace_dotted,
    shown,
    split_branch,
    split_fleet,
)


def run(args: argparse.Namespace) -> int:
    if args.preset == "auto" and not (args.interval > 0):
        raise InputError(f"--interval must be a number of seconds > 0, got {args.interval}")
    analysis, fleet = split_fleet(parse_sets(args.settings))
    analysis, own = split_branch(analysis, WATCH)
    given = set(analysis)
    if args.watch:
        analysis = learn_settings(analysis)
    base = preset_for(args.interval) if args.preset == "auto" else preset(args.preset)
    config = with_overrides(base, analysis)
    fleet_config = replace_dotted(FleetConfig(), fleet, "fleet", f"{FLEET}.")
    tree = flatten(config)
    tree.update({f"{FLEET}.{k}": v for k, v in flatten(fleet_config).items()})
    tree.update({f"{WATCH}.{k}": v for k, v in flatten(watch_config(own)).items()})
    if args.json:
        json.dump({k: list(v) if isinstance(v, tuple) else v for k, v in tree.items()},
                  sys.stdout, indent=2)
        print()
        return 0
    changed = given | {f"{FLEET}.{k}" for k in fleet} | {f"{WATCH}.{k}" for k in own}
    watch = set(analysis) - given
    print(f"# analysis: preset {config.preset}"
          + (f" (data sampled every {args.interval:g} s)" if args.preset == "auto" else ""))
    headers = {FLEET: "# fleet: the peer comparison (reveal fleet)",
               WATCH: "# watch: the live watch's own settings (reveal watch)"}
    for name, value in tree.items():
        header = headers.pop(name.partition(".")[0], None)
        if header is not None:
            print(header)
        mark = "  # --set" if name in changed else "  # watch" if name in watch else ""
        print(f"{name} = {shown(value)}{mark}")
    return 0
