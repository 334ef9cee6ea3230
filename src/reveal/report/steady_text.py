"""A new steady state in words, once: what level changed, by how much, since when
(see :mod:`reveal.analysis.steady`)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from reveal.catalog import Catalog
from reveal.frame import channel_metric
from reveal.report.claims import subject
from reveal.report.units import quantity


def _since(since_ns: int, run: dict[str, Any]) -> str:
    """``10:32:05 UTC (42 s into the run)``, or the offset alone without a wall clock."""
    start = run.get("start_ns")
    offset = f"{(since_ns - int(start)) / 1e9:.0f} s into the run" if start is not None else ""
    wall = run.get("wall_offset_ns")
    if not wall:
        return offset or "the start"
    clock = dt.datetime.fromtimestamp((since_ns + int(wall)) / 1e9, tz=dt.UTC)
    return f"{clock:%H:%M:%S} UTC" + (f" ({offset})" if offset else "")


def steady_claim(changes: list[tuple[str, float, float]], since_ns: int, run: dict[str, Any],
                 catalog: Catalog) -> str:
    """``Page-cache memory holds 3.1 GB less than in the baseline (8.2 GB, now 5.1 GB);
    also ...; steady since 10:32:05 UTC (42 s into the run).``"""
    parts = []
    for channel, before, now in changes:
        q = quantity(catalog.lookup(channel_metric(channel)))
        fmt = q.format if q.known else (lambda x: f"{x:,.4g}")
        word = "more" if now > before else "less"
        parts.append(f"{subject(channel, catalog)} holds {fmt(abs(now - before))} {word} than "
                     f"in the baseline ({fmt(before)}, now {fmt(now)})")
    if not parts:
        return f"New steady state since {_since(since_ns, run)}."
    head = parts[0][0].upper() + parts[0][1:]
    also = f"; also {'; '.join(parts[1:])}" if len(parts) > 1 else ""
    return f"{head}{also}; steady since {_since(since_ns, run)}."
