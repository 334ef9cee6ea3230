"""Channel matching across hosts: devices named by their role, not by their name.

Two hosts of one job rarely name their devices alike: ``eth0`` on one, ``ens5`` on the
other; ``nvme0n1`` against ``vda``. What corresponds is the role: the busiest interface,
the busiest disk. Channels labelled by an interface (``iface``) or a block device (``dev``)
are renamed by traffic rank over the run, ``iface=rank0`` the busiest; GPUs keep their
index (``gpu=0`` is the first GPU everywhere); per-CPU channels are ranked per window by
busy share (``cpu=r0``, see :mod:`reveal.analysis.percpu`). Hosts with 2 and 8 GPUs then
share ``gpu=0`` and ``gpu=1``; the comparison uses the columns hosts share.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from reveal.frame import format_channel, parse_channel

#: label -> metric-name fragments whose per-second level ranks the devices of that label
RANKED_LABELS: dict[str, tuple[str, ...]] = {
    "iface": ("bytes", "packets"),
    "dev": ("sectors", "bytes", "completed"),
}
RANK_PREFIX = "rank"
#: devices never ranked (kept by name): the loopback carries no job traffic between hosts
KEEP_NAMES = {"iface": ("lo",)}


def ranking_channels(channels: list[str]) -> list[str]:
    """The channels that name a ranked device (a ``RANKED_LABELS`` label): the input of
    :func:`device_ranks`."""
    return [name for name in channels
            if any(label in parse_channel(name)[1] for label in RANKED_LABELS)]


def device_ranks(channels: list[str], values: np.ndarray) -> dict[str, dict[str, str]]:
    """label -> device -> role name (``rank0`` the busiest), from the traffic channels among
    ``channels``.

    ``values`` (T, C): the derived telemetry (counters as per-second rates); a device's
    traffic is the sum over its traffic channels of their mean (NaN samples left out).
    """
    parsed = [parse_channel(c) for c in channels]
    ranked = [i for i, (_m, labels) in enumerate(parsed)
              if any(label in labels for label in RANKED_LABELS)]
    means = np.zeros(len(channels))
    if ranked and values.size:
        with np.errstate(all="ignore"):
            x = values[:, ranked]
            ok = np.isfinite(x)
            means[ranked] = np.where(ok, x, 0.0).sum(axis=0) / np.maximum(ok.sum(axis=0), 1)
    traffic: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for i in ranked:
        metric, labels = parsed[i]
        for label, fragments in RANKED_LABELS.items():
            device = labels.get(label)
            if device is None or device in KEEP_NAMES.get(label, ()):
                continue
            busy = any(f in metric for f in fragments)
            traffic[label][device] += abs(float(means[i])) if busy else 0.0
    rank: dict[str, dict[str, str]] = {}
    for label, devices in traffic.items():
        order = sorted(devices, key=lambda d: (-devices[d], d))
        rank[label] = {d: f"{RANK_PREFIX}{i}" for i, d in enumerate(order)}
    return rank


def renamed(channels: list[str], ranks: dict[str, dict[str, str]]) -> dict[str, str]:
    """Role-matched name of every channel whose name ``ranks`` changes (others keep their
    name); a device ``ranks`` does not know keeps its name."""
    out: dict[str, str] = {}
    for name in channels:
        metric, labels = parse_channel(name)
        new = dict(labels)
        for label, table in ranks.items():
            if label in labels and labels[label] in table:
                new[label] = table[labels[label]]
        if new != labels:
            out[name] = format_channel(metric, new)
    return out


def role_names(channels: list[str], values: np.ndarray) -> dict[str, str]:
    """Role-matched name of every channel whose name changes (others keep their name).

    ``values`` (T, C): the derived telemetry (counters as per-second rates); a device's
    traffic is the sum over its ``RANKED_LABELS`` channels of their mean.
    """
    return renamed(channels, device_ranks(channels, values))
