"""The catalog's data files: every source loads, and a bad file is named in the error."""

from __future__ import annotations

from pathlib import Path

import pytest

from reveal.catalog import (
    KINDS,
    SUBSYSTEMS,
    Healthy,
    catalog_sources,
    default_catalog,
    source_entries,
)
from reveal.store.labelled import SMD_COLUMNS


def test_every_source_file_loads_into_the_catalog() -> None:
    sources = catalog_sources()
    assert {"procfs", "cgroup", "gpu", "perf", "smd"} <= set(sources)
    catalog = default_catalog()
    for source in sources:
        entries = source_entries(source)
        assert entries, source
        for entry in entries:
            if entry.meanings_only:  # meanings for the family's uncatalogued metrics
                assert entry.name not in catalog and entry.name in {
                    e.name for e in catalog.meanings_only()}
                continue
            assert entry.subsystem in SUBSYSTEMS and entry.kind in KINDS
            if "*" not in entry.name:
                assert catalog.lookup(entry.name).name == entry.name
    assert catalog.lookup("cpu.user").subsystem == "cpu"
    assert catalog.lookup("vmstat.pgfault").kind == "counter"  # by the vmstat.* glob
    assert catalog.lookup("perf.cycles").multiplex_group  # a field beyond the defaults


def test_smd_columns_keep_the_datasets_order() -> None:
    assert len(SMD_COLUMNS) == 38
    assert SMD_COLUMNS[:2] == ("cpu_r", "load_1") and SMD_COLUMNS[-1] == "udp_snd_buf_errs"


def test_a_bad_catalog_file_is_named(entries_package: Path) -> None:
    (entries_package / "good.toml").write_text(
        '# a comment\n"x.y" = { subsystem = "cpu", kind = "gauge", unit = "%", priority = 3 }\n')
    (entries_package / "broken.toml").write_text('"x.z" = { subsystem = "cpu", kind = \n')
    (entries_package / "typo.toml").write_text('"x.w" = { subsystem = "cpu", kind = "gauge", '
                                               'prio = 3 }\n')
    (entries_package / "kind.toml").write_text('"x.v" = { subsystem = "cpu", kind = "level" }\n')
    assert catalog_sources("test_catalog_pkg") == ["broken", "good", "kind", "typo"]
    (good,) = source_entries("good", "test_catalog_pkg")
    assert (good.name, good.unit, good.priority, good.description) == ("x.y", "%", 3, "")
    with pytest.raises(ValueError, match=r"broken\.toml"):
        source_entries("broken", "test_catalog_pkg")
    with pytest.raises(ValueError, match=r"typo\.toml: x\.w: .*prio"):
        source_entries("typo", "test_catalog_pkg")
    with pytest.raises(ValueError, match=r"kind\.toml: x\.v: .*unknown kind"):
        source_entries("kind", "test_catalog_pkg")


def test_every_healthy_range_parses_and_names_catalogued_metrics_with_units() -> None:
    catalog = default_catalog()
    ranged = [e for e in catalog.entries() if e.healthy is not None]
    # the channels that mean host and job health have one
    names = {e.name for e in ranged}
    assert {"derived.cgroup_throttled_pct", "psi.cpu.some.total", "psi.memory.some.total",
            "psi.io.some.total", "cgroup.psi.memory.full.total", "vmstat.pswpin",
            "vmstat.oom_kill", "snmp.Tcp.RetransSegs", "net.rx_drop",
            "disk.time_reading_ms"} <= names
    for entry in ranged:
        healthy = entry.healthy
        assert isinstance(healthy, Healthy), entry.name
        assert healthy.max is not None or healthy.min is not None, entry.name
        assert entry.unit and entry.healthy_unit, entry.name  # a bound says its unit
        assert entry.kind not in ("static", "smoothed"), entry.name  # a level that is judged
        if healthy.per:
            per = catalog.lookup(healthy.per)
            assert healthy.per in catalog and per.unit, entry.name
            assert per.kind in ("counter", "event", "gauge"), entry.name


def test_a_bad_healthy_range_is_named(entries_package: Path) -> None:
    for name, healthy in (("typo", "{ mx = 1.0 }"), ("empty", "{ }"),
                          ("inverted", "{ min = 5.0, max = 1.0 }"),
                          ("text", '{ max = "high" }'),
                          ("ratio", '{ max = 1.0, per = "x.total" }'),
                          ("scalar", "5.0")):
        (entries_package / f"{name}.toml").write_text(
            f'"x.h" = {{ subsystem = "cpu", kind = "gauge", unit = "%", healthy = {healthy} }}\n')
        with pytest.raises(ValueError, match=rf"{name}\.toml: x\.h: "):
            source_entries(name, "test_catalog_pkg")
    (entries_package / "good.toml").write_text(
        '"x.h" = { subsystem = "cpu", kind = "counter", unit = "pages", '
        'healthy = { max = 2.0 } }\n')
    (good,) = source_entries("good", "test_catalog_pkg")
    assert good.healthy == Healthy(max=2.0) and good.healthy_unit == "pages/s"
