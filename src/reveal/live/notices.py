"""Informational events: something appeared on the host (a container, a network namespace,
an interface) that the model does not know. Not an anomaly and not an alert — an operator
wants a note, not a page.

The watch learns which cgroups, containers, pods, network namespaces and interfaces exist
while it learns; channels of a new one are recorded but not scored until the next fit. For
each new one, once, a ``notice`` event goes to the sinks that take notes (the webhook and
the JSON-lines file; Alertmanager, whose every alert may page, gets none).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable

from reveal.frame import parse_channel
from reveal.live.alerts import Event, iso

#: Labels that name something a tenant or the host can start: what it is called in a note,
#: and the subsystem the note belongs to.
THINGS = {"container": ("container", "software"), "pod": ("pod", "software"),
          "cgroup": ("cgroup", "software"), "netns": ("network namespace", "network"),
          "iface": ("network interface", "network")}
_SERIAL = itertools.count(1)


def appeared(channels: Iterable[str]) -> dict[tuple[str, str], list[str]]:
    """The things ``channels`` name, by (label, value), each with its channels (in order);
    a channel naming several things (an interface in a namespace) counts for each."""
    out: dict[tuple[str, str], list[str]] = {}
    for channel in channels:
        _, labels = parse_channel(channel)
        for label in THINGS:
            value = labels.get(label)
            if value:
                out.setdefault((label, value), []).append(channel)
    return out


def notice_event(host: str, label: str, value: str, channels: list[str],
                 now_s: float | None = None) -> Event:
    """The ``notice`` event for a new ``label=value`` with its ``channels``."""
    what, subsystem = THINGS[label]
    now_s = time.time() if now_s is None else now_s
    return {
        "event": "notice", "status": "info", "severity": "info",
        "id": f"{host}-notice-{int(now_s)}-{next(_SERIAL)}", "host": host,
        "start": iso(now_s), "subsystem": subsystem, "kind": "appeared",
        "label": label, "value": value, "channels": len(channels),
        "claim": (f"A new {what} appeared: {value} ({len(channels)} channels, recorded, "
                  f"not scored until the next fit)"),
        "examples": channels[:3],
    }
