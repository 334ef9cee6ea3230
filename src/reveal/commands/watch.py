"""``reveal watch``: score this host live, alert, and export to Prometheus."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from reveal.commands._shared_options import add_probe_choice
from reveal.settings import add_set_argument, parse_sets

NAME = "watch"
HELP = ("Watch this host: record, learn a model (or load it), score each window as it "
        "closes, send alerts, serve /metrics.")

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m``, ``1.5h``, ``2d``."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 10m, 1h")
    return float(found[1]) * _UNITS[found[2] or "s"]


def size(text: str) -> int:
    """Bytes from ``500M``, ``2G``, ``2GiB``, ``1048576``."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*", text.lower())
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 500M or 2G")
    return int(float(found[1]) * _SIZES[found[2]])


def _add_duration(parser: argparse.ArgumentParser, flag: str, default_s: float,
                  help_text: str) -> None:
    """An option giving a span of time as ``90s``, ``10m``, ``1h`` (``DURATION``), in
    seconds; ``default_s`` when not given."""
    parser.add_argument(flag, type=duration, default=default_s, metavar="DURATION",
                        help=help_text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", type=Path, metavar="DIR",
                        help="state directory: model, alert state, recordings (default: "
                             "/var/lib/reveal as root, else ~/.local/state/reveal)")
    _add_duration(parser, "--learn", 600.0,
                  "learn the model from this much data at the first start (at least 63s: 60 "
                  "windows place the 99th-percentile threshold; default 10m)")
    parser.add_argument("--relearn", action="store_true",
                        help="learn a new model even when the state directory holds one")
    _add_duration(parser, "--refit-every", 0.0,
                  "learn the model again this often from the latest --learn of data, once that "
                  "span holds no flagged window and no alert is open (postponed until it "
                  "does); channels that appeared since (a new container, NIC, disk) join "
                  "then; 0: never (default 0: only --relearn does)")
    parser.add_argument("--allow-short-learn", action="store_true",
                        help="accept --learn down to 15s (tests; verdicts of such a model "
                             "flag ordinary variation)")
    _add_duration(parser, "--resolve-after", 30.0,
                  "an alert resolves when no window was flagged for this long (default 30s)")
    parser.add_argument("--listen", default="127.0.0.1:9464", metavar="HOST:PORT",
                        help="serve /metrics here; another address than loopback only when "
                             "given; 'none' for no exporter")
    from reveal.live.sinks import SINKS  # every registered alert sink: its own option

    for name, sink in SINKS.items():
        parser.add_argument(sink.option, dest=f"sink_{name}", metavar=sink.metavar,
                            help=sink.help)
    parser.add_argument("--interval", type=float, default=0.1, metavar="SECONDS",
                        help="sampling interval")
    add_probe_choice(parser)
    parser.add_argument("--probe-option", action="append", default=[], metavar="P.KEY=VALUE",
                        dest="probe_option", help="an option of one probe (repeatable)")
    parser.add_argument("--no-realtime", dest="realtime", action="store_false",
                        help="keep the tick thread at normal priority")
    _add_duration(parser, "--retain", 86400.0,
                  "remove finished recordings older than this (default 24h)")
    parser.add_argument("--retain-size", type=size, default=2 << 30, metavar="SIZE",
                        help="remove the oldest finished recordings beyond this size "
                             "(default 2G)")
    _add_duration(parser, "--retain-alerts", 30 * 86400.0,
                  "keep the data within 5 min of every alert this long (the segments are "
                  "copied to STATE/kept/ when their recording is removed; default 30d)")
    parser.add_argument("--score-every", type=int, default=5, metavar="N",
                        help="score windows N at a time (every N strides; default 5): a "
                             "scoring call costs much the same for one window as for five, "
                             "so N divides the CPU; a window holding a change that matters "
                             "is scored at once (see --no-early) (1: each window as it "
                             "closes)")
    parser.add_argument("--no-early", dest="early", action="store_false",
                        help="wait for the batch of --score-every windows even when a "
                             "window holds a change that matters (adds up to N-1 strides "
                             "to the time to an alert)")
    parser.add_argument("--threshold-factor", type=float, default=1.0, metavar="X",
                        help="multiply the model's threshold (tests and tuning: below 1 "
                             "flags more than `reveal analyze` would)")
    add_set_argument(parser, "applied when the watch learns or refits its model (a model "
                     "already learned keeps its own)")
    parser.add_argument("--quiet", action="store_true",
                        help="only warnings and alerts on stderr")
    parser.add_argument("--systemd-unit", action="store_true",
                        help="print a systemd unit running this watch (with these options) "
                             "and exit")
    parser.add_argument("--grafana-dashboard", action="store_true",
                        help="print the Grafana dashboard JSON and exit")


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
    settings = parse_sets(args.settings)
    with_overrides(TELEMETRY, settings)  # an unknown name or kind fails now, not at the fit
    listen = None if args.listen.lower() == "none" else parse_listen(args.listen)
    options = WatchOptions(
        state=state, learn_s=args.learn, relearn=args.relearn, refit_every_s=args.refit_every,
        allow_short_learn=args.allow_short_learn, resolve_after_s=args.resolve_after,
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
