"""``reveal watch``: score this host live, alert, and export to Prometheus."""

from __future__ import annotations

import argparse
import sys

from reveal.commands.parsers.watch import NAME
from reveal.settings import WATCH, parse_sets, split_branch


def sinks_from_args(args: argparse.Namespace) -> dict[str, str]:
    """The alert sinks the options turn on: sink name → the option's value."""
    from reveal.live.sinks import SINKS

    return {name: value for name in SINKS
            if (value := getattr(args, f"sink_{name}", None)) is not None}


def _notify(quiet: bool):
    def notify(level: str, message: str) -> None:
        if level in ("warning", "notice") or not quiet:
            prefix = "warning: " if level == "warning" else ""
            print(f"reveal watch: {prefix}{message}", file=sys.stderr, flush=True)
    return notify


def run(args: argparse.Namespace) -> int:
    from reveal.live.allocators import lean_allocators, leave_out_unused

    lean_allocators()  # a long-lived process: before the heavy imports and any thread
    leave_out_unused()
    from reveal.analysis.presets import TELEMETRY, with_overrides
    from reveal.collect.options import options_from_args as probe_options
    from reveal.live.config import watch_config
    from reveal.live.exporter import parse_listen
    from reveal.live.service import Watch, WatchOptions, default_state_dir
    from reveal.live.unit import dashboard_json, systemd_unit

    if args.grafana_dashboard:
        print(dashboard_json())
        return 0
    state = args.state or default_state_dir()
    if args.systemd_unit:
        print(systemd_unit(sys.argv[sys.argv.index(NAME) + 1:] if NAME in sys.argv else [],
                           state))
        return 0
    # watch.NAME: the watch's own settings; the others: the analysis it learns with
    settings, own = split_branch(parse_sets(args.settings), WATCH)
    with_overrides(TELEMETRY, settings)  # an unknown name or kind fails now, not at the fit
    config = watch_config(own)
    listen = None if args.listen.lower() == "none" else parse_listen(args.listen)
    options = WatchOptions(
        state=state, learn_s=args.learn, relearn=args.relearn, refit_every_s=args.refit_every,
        allow_short_learn=args.allow_short_learn, learn_floor_s=config.learn_floor_s,
        resolve_after_s=args.resolve_after,
        listen=listen, sinks=sinks_from_args(args), threshold_factor=args.threshold_factor,
        score_every=args.score_every,
        early=args.early, settings=settings,
        interval_s=args.interval, include=args.probes, exclude=args.exclude,
        probe_options=probe_options(args.probe_option), realtime=args.realtime,
        retain_s=args.retain, retain_bytes=args.retain_size,
        retain_alerts_s=args.retain_alerts)
    watch = Watch(options, _notify(args.quiet))
    watch.start()
    if listen is not None:
        print(f"reveal watch: /metrics on http://{listen[0]}:{listen[1]}/metrics",
              file=sys.stderr, flush=True)
    return watch.run()
