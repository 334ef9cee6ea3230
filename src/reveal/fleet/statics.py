"""Configuration outliers: a host whose configuration differs from its peers' majority.

Configuration channels (catalog kind ``static``: huge page pools, NUMA node sizes, link
speeds, GPU power limits, TCP settings) do not move, so no detector sees them; across
hosts of one job they should agree. For each such channel the majority value is found
(values equal to 6 significant digits); a host with another value, or without a channel
most hosts have, is reported even when nothing in its time series stands out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from reveal.fleet.records import ConfigOutlier, HostFeatures

#: share of hosts that must agree on a value for the others to be outliers
MAJORITY = 0.5


def _key(value: float) -> float:
    return float(f"{value:.6g}")


def config_outliers(hosts: Sequence[HostFeatures], min_hosts: int = 3) -> list[ConfigOutlier]:
    """Hosts whose static channels differ from the majority of the hosts that have them."""
    n = len(hosts)
    if n < min_hosts:
        return []
    channels = sorted({c for h in hosts for c in h.statics})
    out: list[ConfigOutlier] = []
    for channel in channels:
        have = [h for h in hosts if channel in h.statics]
        counts = Counter(_key(h.statics[channel]) for h in have)
        value, agree = counts.most_common(1)[0]
        if agree <= MAJORITY * n or agree == len(have) == n:
            continue
        for h in hosts:
            mine = h.statics.get(channel)
            if mine is None or _key(mine) != value:
                out.append(ConfigOutlier(h.host, channel, h.roles.get(channel, channel),
                                         mine, value, agree, n - 1))
    return out
