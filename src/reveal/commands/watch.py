"""``reveal watch``: score this host live, alert, and export to Prometheus."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from reveal.commands.parsers.watch import NAME
from reveal.errors import InputError
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


def _request_adopt(state: Path, span: str, wait_s: float = 10.0) -> int:
    """``--adopt``: leave the request for the watch on ``state`` and wait ``wait_s`` for
    it to be taken."""
    from reveal.commands.parsers.watch import duration
    from reveal.live.state import StateDir

    try:
        span_s = None if span == "learn" else duration(span)
    except argparse.ArgumentTypeError as exc:
        raise InputError(f"--adopt: {exc}") from None
    statedir = StateDir(state)
    pid = statedir.request_adopt(span_s)
    what = "its --learn" if span_s is None else f"the latest {span_s:g} s"
    deadline = time.monotonic() + wait_s
    while statedir.adopt_requested() and time.monotonic() < deadline:
        time.sleep(0.1)
    if statedir.adopt_requested():
        print(f"reveal watch: asked the watch (pid {pid}) on {state} to adopt {what} as "
              f"normal; not taken yet (it takes it at its next scoring)", file=sys.stderr)
    else:
        print(f"reveal watch: the watch (pid {pid}) on {state} took the request to adopt "
              f"{what} as normal; it learns a new model now and says so on its stderr",
              file=sys.stderr)
    return 0


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
    if args.adopt is not None:
        return _request_adopt(state, args.adopt)
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
