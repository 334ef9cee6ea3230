"""``reveal probes``: every registered probe, whether it works here, and its channels."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from reveal.catalog import default_catalog
from reveal.collect.options import check_probe_options, options_from_args, probe_options_help
from reveal.collect.runner import IMPORT_ERRORS, open_probe, registered_probes
from reveal.collect.sampler import NATIVE_TICKS, ticker_available
from reveal.frame import channel_metric
from reveal.report.escape import plain


def option_rows() -> list[dict[str, str]]:
    """Every probe's options: ``{"probe", "option", "help"}`` rows."""
    return [{"probe": name, "option": key, "help": text}
            for name, cls in registered_probes().items()
            for key, text in sorted(probe_options_help(cls).items())]


def render_options(rows: list[dict[str, str]]) -> str:
    width = max([len(f"{r['probe']}.{r['option']}") for r in rows] or [0])
    return "\n".join(f"{(r['probe'] + '.' + r['option']).ljust(width)}  {plain(r['help'], 300)}"
                     for r in rows)


def probe_rows(probe_options: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Open every registered probe once (then close it) and describe the outcome."""
    catalog = default_catalog()
    rows: list[dict[str, Any]] = []
    known = registered_probes()
    check_probe_options(probe_options or {}, known)
    for name, cls in known.items():
        state = open_probe(cls, (probe_options or {}).get(name))
        row: dict[str, Any] = {
            "name": name, "default": bool(cls.default_enabled), "status": state.status,
            "channels": 0, "reason": state.reason, "description": cls.description,
            "open_ms": round(state.open_s * 1e3, 1),
        }
        if state.probe is not None:
            row["channels"] = len(state.probe.channels)
            with contextlib.suppress(Exception):
                row["read_in_c"] = state.probe.native_parts() is not None
            row["channel_names"] = list(state.probe.channels)
            uncatalogued = sorted({m for m in map(channel_metric, state.probe.channels)
                                   if m not in catalog})
            if uncatalogued:  # analysed with default units and kind: say so
                row["uncatalogued"] = uncatalogued
            if state.probe.info.get("unsupported_events"):
                row["unsupported_events"] = list(state.probe.info["unsupported_events"])
            with contextlib.suppress(Exception):
                state.probe.close()
        rows.append(row)
    for module, error in sorted(IMPORT_ERRORS.items()):
        rows.append({"name": f"({module})", "default": True, "status": "unavailable",
                     "channels": 0, "reason": f"module failed to import: {error}",
                     "description": "", "open_ms": 0.0})
    return rows


def render(rows: list[dict[str, Any]], with_channels: bool = False) -> str:
    head = ("probe", "default", "status", "channels", "reason / description")
    body = [(r["name"], "on" if r["default"] else "off", r["status"], str(r["channels"]),
             plain(r["reason"] or r["description"], 400)) for r in rows]
    widths = [max(len(head[i]), *(len(b[i]) for b in body)) for i in range(4)] if body else [
        len(h) for h in head[:4]]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, [*widths, 0], strict=True)).rstrip()]
    for b, r in zip(body, rows, strict=True):
        lines.append("  ".join(v.ljust(w) for v, w in zip(b, [*widths, 0], strict=True)).rstrip())
        if with_channels:
            lines += [f"    {plain(c)}" for c in r.get("channel_names", [])]
    used = [r for r in rows if r["default"] and r["status"] != "unavailable" and r["channels"]]
    total = sum(r["channels"] for r in used)
    lines.append(f"{total} channels from the default probes on this host")
    for r in rows:
        missing = r.get("uncatalogued") or []
        if missing:
            shown = ", ".join(plain(m, 80) for m in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            lines.append(f"warning: probe {r['name']}: {len(missing)} metrics have no catalog "
                         f"entry (analysed as unitless gauges): {shown}{more}")
    lines.append(ticks_line(used))
    return "\n".join(lines)


def ticks_line(used: list[dict[str, Any]]) -> str:
    """Who takes the ticks with these probes: the C thread, or the per-tick Python loop."""
    if not ticker_available():
        return "ticks: per-tick Python loop (the C extension is not built here)"
    if not NATIVE_TICKS:
        return "ticks: per-tick Python loop (REVEAL_NATIVE_TICKS=0)"
    python = [r["name"] for r in used if not r.get("read_in_c")]
    if python:
        return f"ticks: per-tick Python loop ({', '.join(python)} need Python every tick)"
    return "ticks: taken by a C thread (every default probe is read in C)"


def run(args: argparse.Namespace) -> int:
    if args.options:
        listed = option_rows()
        print(json.dumps(listed, indent=2) if args.json else render_options(listed))
        return 0
    rows = probe_rows(options_from_args(args.probe_option))
    if args.json:
        if not args.channels:
            for row in rows:
                row.pop("channel_names", None)
        print(json.dumps(rows, indent=2))
    else:
        print(render(rows, args.channels))
    return 0
