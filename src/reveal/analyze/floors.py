"""The smallest change that matters, per feature column: the scale floor of the detectors.

A baseline of a minute or two is quieter than a host is from one run to the next: a memory
level steady to the page, a rate that barely moved. Scaled by that spread alone, a change of
one or two per cent reads as thousands of sigmas, and every level that drifts after a
fault (page cache refilled, socket buffers grown) keeps flagging. The floor says that a
change smaller than ``relative`` × the channel's baseline level (its median, in derived
units: bytes, per-second rates, percent) is not evidence, however quiet the baseline was.

Only channels with physical units get a floor (collector channels whose kind is ``gauge``
or ``counter``); labelled benchmark data (``smd.*``, ``asd.*``, already normalised) and
event counts (whose baseline level is usually zero) get none. Shape features (skewness,
kurtosis, autocorrelation, ADF) are dimensionless and get none either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from reveal.catalog import Catalog, default_catalog
from reveal.frame import channel_metric

LEVEL_FEATURES = ("mean", "median", "min", "max", "std")
UNFLOORED_PREFIXES = ("smd.", "asd.")
FLOORED_KINDS = ("gauge", "counter")


def channel_floors(channels: Sequence[str], levels: np.ndarray, relative: float,
                   catalog: Catalog | None = None) -> np.ndarray:
    """Least meaningful change per channel (its units): ``relative × |level|``, or 0."""
    catalog = catalog or default_catalog()
    levels = np.nan_to_num(np.abs(np.asarray(levels, dtype=np.float64)), nan=0.0,
                           posinf=0.0, neginf=0.0)
    out = np.zeros(len(channels), dtype=np.float64)
    if relative <= 0:
        return out
    for i, channel in enumerate(channels):
        metric = channel_metric(channel)
        if metric.startswith(UNFLOORED_PREFIXES):
            continue
        if catalog.lookup(metric).kind in FLOORED_KINDS:
            out[i] = relative * levels[i]
    return out


def feature_floors(column_channels: Sequence[str], column_features: Sequence[str],
                   channel_floor: dict[str, float], rows_per_window: float) -> np.ndarray:
    """Per feature column: the channel floor for levels and std, its square for the
    variance, the floor spread over the window for the slope (per row), else 0."""
    out = np.zeros(len(column_channels), dtype=np.float64)
    rows = max(float(rows_per_window), 1.0)
    for k, (channel, feature) in enumerate(zip(column_channels, column_features, strict=True)):
        least = channel_floor.get(channel, 0.0)
        if least <= 0:
            continue
        if feature in LEVEL_FEATURES:
            out[k] = least
        elif feature == "variance":
            out[k] = least * least
        elif feature == "slope":
            out[k] = least / rows
    return out
