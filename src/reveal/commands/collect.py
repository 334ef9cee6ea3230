"""``reveal collect``: record this host's telemetry into a run directory."""

from __future__ import annotations

import argparse
import re
import socket
import sys
import time
from pathlib import Path
from typing import Any

from reveal.collect.options import load_config, merge
from reveal.collect.options import options_from_args as probe_options_from_args
from reveal.collect.runner import CollectOptions, collect
from reveal.commands._shared_options import comma_separated
from reveal.commands.parsers.collect import NAME
from reveal.errors import InputError
from reveal.paths import check_writable_dir


def default_out() -> Path:
    return Path("runs") / f"{socket.gethostname()}-{time.strftime('%Y%m%d-%H%M%S')}"


def apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 argv: list[str] | None) -> argparse.Namespace:
    """Parse again with the ``[collect]`` table of ``--config`` as the command's defaults
    (so that what the command line gives still wins); its ``[probes.NAME]`` tables are kept
    in ``args.config_probe_options``."""
    config = load_config(args.config)
    command = args._parser
    dests = {a.dest for a in command._actions} - {"help", "config", "probe_option"}
    unknown = sorted(set(config["collect"]) - dests)
    if unknown:
        raise InputError(f"[collect] has no option {', '.join(map(repr, unknown))}; known: "
                         f"{', '.join(sorted(d.replace('_', '-') for d in dests))}",
                         str(args.config))
    values = dict(config["collect"])
    for key in ("probes", "exclude"):
        if isinstance(values.get(key), str):
            values[key] = comma_separated(values[key])
    if isinstance(values.get("out"), str):
        values["out"] = Path(values["out"])
    command.set_defaults(**values, config_probe_options=config["probes"])
    return parser.parse_args(argv)


def options_from_args(args: argparse.Namespace, source: str,
                      command: list[str] | None = None) -> Any:
    probe_options = merge(getattr(args, "config_probe_options", None) or {},
                          probe_options_from_args(getattr(args, "probe_option", None) or []))
    return CollectOptions(
        out=args.out or default_out(), interval_s=args.interval,
        duration_s=getattr(args, "duration", None), include=args.probes, exclude=args.exclude,
        segment_seconds=args.segment_seconds, progress_s=args.progress_every,
        refresh_s=args.refresh,
        self_channels=args.self_channels, realtime=args.realtime, source=source,
        command=command, probe_options=probe_options)


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def make_printers(command: str, quiet: bool) -> tuple[Any, Any]:
    """(notify, progress) callbacks printing to stderr."""

    def notify(level: str, message: str) -> None:
        if level in ("warning", "notice") or not quiet:  # notice: end of a warned state
            prefix = "warning: " if level == "warning" else ""
            # "probe gpu unavailable: gpu: NVML ..." names the probe once
            message = re.sub(r"^(probe (\w+) \w+: )\2: ", r"\1", message)
            print(f"reveal {command}: {prefix}{message}", file=sys.stderr, flush=True)

    def progress(status: dict[str, Any]) -> None:
        print(f"reveal {command}: {status['elapsed_s']:7.1f}s  {status['samples']} samples  "
              f"{status['channels']} channels  {status['missed_ticks']} missed  "
              f"{status['dropped_samples']} dropped  {human_bytes(status['bytes_on_disk'])} "
              f"on disk", file=sys.stderr, flush=True)

    return notify, (None if quiet else progress)


def _compacted(stats: dict[str, Any]) -> str:
    """Why the size on disk fell below what the progress lines showed: the journal
    (uncompressed rows) was compacted into Parquet segments."""
    journaled = int(stats.get("journal_bytes_written") or 0)
    compacted = not stats.get("pending_segments")  # journals a full disk left stay as such
    if compacted and journaled > int(stats.get("bytes_on_disk") or 0):
        return f" (the {human_bytes(journaled)} journal compacted into Parquet)"
    return ""


def summary_lines(meta: dict[str, Any], reasons_shown: bool = False) -> list[str]:
    """What a finished recording produced, for stderr. With ``reasons_shown`` (the probes'
    states were printed when they opened, and read failures as warnings) the probes that
    are not fully working are named on one line instead of repeating their reasons."""
    stats = meta.get("stats", {})
    lines = [f"run {meta.get('path', '')}: {stats.get('samples', 0)} samples of "
             f"{meta.get('n_channels', 0)} channels every {meta.get('interval_s')} s; "
             f"{stats.get('missed_ticks', 0)} missed ticks, "
             f"{stats.get('dropped_samples', 0)} dropped samples, "
             f"{human_bytes(stats.get('bytes_on_disk', 0))} on disk{_compacted(stats)}"]
    if meta.get("closed") is False:
        lines.append("  meta.json could not be finalised (disk full): the run reads as not "
                     "closed; everything journaled before is kept")
    partial = {status: [name for name, probe in meta.get("probes", {}).items()
                        if probe.get("status") == status]
               for status in ("unavailable", "degraded")}
    if reasons_shown:
        named = "; ".join(f"{', '.join(names)} ({status})"
                          for status, names in partial.items() if names)
        if named:
            lines.append(f"  probes not fully recorded: {named}; reasons above and in "
                         f"meta.json")
        return lines
    for status, names in partial.items():
        for name in names:
            reason = str(meta["probes"][name].get("reason", ""))
            reason = reason.removeprefix(f"{name}: ")  # the probe is named already
            lines.append(f"  probe {name}: {status}: {reason}")
    return lines


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args, "reveal collect")
    check_writable_dir(options.out)
    notify, progress = make_printers(NAME, args.quiet)
    result = collect(options, notify, progress)
    meta = dict(result.meta, path=str(result.run))
    for line in summary_lines(meta, reasons_shown=not args.quiet):
        print(f"reveal collect: {line}", file=sys.stderr)
    print(result.run)
    return 0
