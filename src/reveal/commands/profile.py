"""``reveal profile -- CMD ARGS...``: record for the life of a command, then analyse the run.

The collector starts first, then the command; recording stops when the command exits and
``reveal profile`` returns the command's exit status (128 + N when a signal N ended it).
SIGINT/SIGTERM received by ``reveal profile`` are passed to the command; a second one
stops the recording too.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys

from reveal.collect.runner import Collector, stop_on_signals
from reveal.commands.collect import apply_config as apply_config  # --config, as collect
from reveal.commands.collect import make_printers, options_from_args
from reveal.commands.collect import summary_lines as _summary_lines
from reveal.commands.parsers.profile import NAME
from reveal.errors import InputError, RevealError
from reveal.paths import check_writable_dir
from reveal.settings import parse_sets


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _analyse(run_dir: str, baseline: str | None, settings: dict | None = None) -> None:
    try:  # a build without the analysis stack still records
        from reveal.model import Reveal, report_run
        from reveal.report.terminal import render_text
    except ImportError as exc:
        print(f"reveal profile: analysis unavailable in this build ({exc}); run recorded in "
              f"{run_dir}", file=sys.stderr)
        return
    try:
        report = report_run(run_dir, baseline, model=Reveal(overrides=settings or None))
    except RevealError as exc:  # the command's status still wins; the run stays on disk
        print(f"reveal profile: analysis failed: {exc}", file=sys.stderr)
        return
    print(render_text(report, tty=sys.stdout.isatty()), end="")


def run(args: argparse.Namespace) -> int:
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise InputError("no command given: reveal profile [options] -- CMD ARGS...")
    settings = parse_sets(args.settings)
    if settings:
        from reveal.analysis.presets import TELEMETRY, with_overrides

        with_overrides(TELEMETRY, settings)  # a wrong name fails before the command runs
    options = options_from_args(args, "reveal profile", command=cmd)
    check_writable_dir(options.out)  # before the command starts
    notify, progress = make_printers(NAME, args.quiet)
    collector = Collector(options, notify, progress)
    collector.open()
    try:
        child = subprocess.Popen(cmd)
    except OSError as exc:
        collector.close()
        raise InputError(f"cannot run {cmd[0]!r} ({exc.strerror or exc})") from None
    signals_seen = []

    def forward(signum: int) -> None:
        signals_seen.append(signum)
        if len(signals_seen) > 1:
            collector.request_stop()
        if child.poll() is None:
            child.send_signal(signum)

    with stop_on_signals(forward, (signal.SIGTERM, signal.SIGINT)):
        result = collector.run(should_stop=lambda: child.poll() is not None)
        returncode = child.wait()
    meta = dict(result.meta, path=str(result.run))
    for line in _summary_lines(meta, reasons_shown=not args.quiet):
        print(f"reveal profile: {line}", file=sys.stderr)
    print(f"reveal profile: command exited with status {_exit_status(returncode)}",
          file=sys.stderr)
    if not args.no_analyze:
        if int(meta.get("stats", {}).get("samples", 0)) < 2:
            print(f"reveal profile: too few samples to analyse; run recorded in {result.run}",
                  file=sys.stderr)
        else:
            _analyse(str(result.run), args.baseline, settings)
    print(result.run)
    return _exit_status(returncode)
