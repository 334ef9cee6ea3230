"""The host's configuration as the telemetry records it: sizes and settings that stay put
(huge-page pools, memory and swap size, link speed and MTU, TCP timers, GPU power limits).

Detection leaves such ``static`` channels out (a constant has no surprise), so a run on a
host set up differently from the baseline's, or a setting changed during the run, would go
unsaid. Here each is compared on its own: the report names every configuration channel
whose value in the run differs from the baseline's, and every one that changed during the
run ("huge pages in pool changed during the run from 0 to 512 pages"). The windows that
hold such a change are flagged as a direct sign (:func:`reveal.analysis.direct.setting_changes`).
"""

from __future__ import annotations

import functools

import numpy as np

from reveal.catalog import Catalog, default_catalog
from reveal.frame import Telemetry, channel_metric

#: Configuration channels named in one warning, at most (the rest are counted).
NAMED = 4


def is_configuration(channel: str) -> bool:
    """Whether ``channel`` records a setting or size: catalog ``configuration`` (most are
    ``static``, but not every ``static`` channel: the kernel recomputes the dirty
    thresholds, DirectMap and CommitLimit as memory moves)."""
    return default_catalog().lookup(channel_metric(channel)).configuration


@functools.lru_cache(maxsize=16)
def configuration_columns(channels: tuple[str, ...]) -> np.ndarray:
    """Positions of the configuration channels among ``channels`` (kept per layout: the
    watch scores the same layout every few seconds)."""
    return np.flatnonzero([is_configuration(c) for c in channels])


def configuration(tel: Telemetry) -> dict[str, tuple[float, float]]:
    """Each configuration channel of ``tel`` with data: its first and last finite value
    (the channel's own unit)."""
    out: dict[str, tuple[float, float]] = {}
    for j in configuration_columns(tuple(tel.channels)).tolist():
        column = tel.values[:, j]
        finite = column[np.isfinite(column)]
        if finite.size:
            out[tel.channels[j]] = (float(finite[0]), float(finite[-1]))
    return out


def _value(channel: str, value: float, catalog: Catalog) -> str:
    unit = catalog.lookup(channel_metric(channel)).unit
    shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.4g}"
    return f"{shown} {unit}".strip() if unit else shown


def _listed(items: list[str]) -> str:
    more = len(items) - NAMED
    return "; ".join(items[:NAMED]) + (f"; and {more} more" if more > 0 else "")


def configuration_warnings(baseline: dict[str, tuple[float, float]],
                           run: dict[str, tuple[float, float]],
                           catalog: Catalog | None = None) -> list[str]:
    """Sentences naming the configuration channels that changed during the run, and those
    whose value at the run's start differs from the baseline's at its end."""
    catalog = catalog or default_catalog()
    changed = [f"{c} from {_value(c, first, catalog)} to {_value(c, last, catalog)}"
               for c, (first, last) in sorted(run.items()) if first != last]
    differs = [f"{c} {_value(c, run[c][0], catalog)} (baseline "
               f"{_value(c, baseline[c][1], catalog)})"
               for c in sorted(set(run) & set(baseline)) if run[c][0] != baseline[c][1]]
    out = []
    if changed:
        out.append(f"the host's configuration changed during the run: {_listed(changed)}")
    if differs:
        out.append(f"the host was configured differently from the baseline's: "
                   f"{_listed(differs)}; what follows from that (memory held by a huge-page "
                   f"pool, a slower link) is compared against a different host")
    return out
