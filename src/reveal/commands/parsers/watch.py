"""The arguments of ``reveal watch``: its name, its help and its options."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from reveal.commands._shared_options import add_probe_choice
from reveal.settings import add_set_argument

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
                  "learn the model from this much data at the first start (at least the "
                  "learn floor, --set watch.learn_floor_s, 63s by default: 60 windows place "
                  "the 99th-percentile threshold; default 10m)")
    parser.add_argument("--relearn", action="store_true",
                        help="learn a new model even when the state directory holds one")
    parser.add_argument("--adopt", nargs="?", const="learn", default=None,
                        metavar="DURATION",
                        help="do not watch: ask the watch running on --state DIR to learn a "
                             "new model from its latest DURATION of data (default: its "
                             "--learn) whatever was flagged in it, and score with that: what "
                             "it held (a new job, a fault you accept) is normal from now on, "
                             "and an open alert resolves. The watch says so on its stderr "
                             "and in watch.json; exits 1 when no watch runs there")
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
    add_set_argument(parser, "analysis settings apply when the watch learns or refits its "
                     "model (a model already learned keeps its own); watch.NAME are the "
                     "watch's own (watch.learn_floor_s)")
    parser.add_argument("--quiet", action="store_true",
                        help="only warnings and alerts on stderr")
    parser.add_argument("--systemd-unit", action="store_true",
                        help="print a systemd unit running this watch (with these options) "
                             "and exit")
    parser.add_argument("--grafana-dashboard", action="store_true",
                        help="print the Grafana dashboard JSON and exit")
