"""All host probes together: registered, distinct channels, catalogued, counted."""

from __future__ import annotations

import numpy as np
import pytest

import reveal.collect  # noqa: F401  (registers the probes)
from reveal.catalog import default_catalog
from reveal.collect.probe import REGISTRY, ProbeUnavailable
from reveal.frame import channel_metric

HOST_PROBES = ("cpu", "interrupts", "memory", "storage", "network", "pressure", "cgroup",
               "power", "gpu")


def test_probes_registered_with_descriptions() -> None:
    for name in HOST_PROBES:
        cls = REGISTRY[name]
        assert cls.name == name and cls.description


def test_all_probes_open_read_and_count(capsys: pytest.CaptureFixture[str]) -> None:
    catalog = default_catalog()
    seen: set[str] = set()
    counts: dict[str, str] = {}
    for name in HOST_PROBES:
        probe = REGISTRY[name]()
        try:
            probe.open()
        except ProbeUnavailable as exc:
            assert str(exc) and probe.status == "unavailable"
            counts[name] = f"unavailable ({str(exc)[:60]})"
            continue
        assert probe.status in ("ok", "degraded")
        assert not (set(probe.channels) & seen), f"{name} repeats another probe's channels"
        seen.update(probe.channels)
        out = np.full(len(probe.channels), -7.0)
        probe.read(out)
        probe.read(out)
        assert not np.any(out == -7.0)
        uncatalogued = [c for c in probe.channels if channel_metric(c) not in catalog]
        assert not uncatalogued, uncatalogued[:5]
        counts[name] = f"{len(probe.channels)} channels, {probe.status}"
        probe.close()
    with capsys.disabled():
        print("\nhost probes on this machine:")
        for name, text in counts.items():
            print(f"  {name:11s} {text}")
        print(f"  {'total':11s} {len(seen)} channels")
    assert len(seen) > 500
