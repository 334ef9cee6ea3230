"""What a channel means is data in the catalog (``hurts``, ``follows``, ``waiting``, ``fall``,
``alone``, ``exists``, ``judged_as``, ``capacity``, ``repeated``, ``rate``,
``configuration``, ``jiffy_percent``, ``level_granule``, ``spike_granule``, ``stall_total``,
``sign``), not name lists in the analysis code.

``fixtures/catalog_meanings.json`` holds, for 331 representative metric names (every
distinct combination of meanings, real names and names a family glob matches, catalogued or
not), the subsystem, kind, unit and priority the catalog gave them and the meanings the
analysis gave them when the meanings were name lists in ``reveal/analysis/`` (recorded from
that code: a name's membership of each list, by its glob patterns): the catalog gives the
same, and the analysis' predicates read it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from reveal.analysis import derive, direct, hostconfig, significance, steady
from reveal.analysis.floors import channel_floors
from reveal.catalog import MEANINGS as ALL_MEANINGS
from reveal.catalog import DirectSign, MetricInfo, default_catalog, source_entries

#: the meanings the name lists held (``rare`` came later: tests/test_rare_events.py)
MEANINGS = tuple(name for name in ALL_MEANINGS if name != "rare")

TESTS = Path(__file__).parent
ANALYSIS = TESTS.parent / "src" / "reveal" / "analysis"
EXPECTED: dict[str, list] = json.loads(
    (TESTS / "fixtures" / "catalog_meanings.json").read_text(encoding="utf-8"))
DEFAULTS = {name: MetricInfo.__dataclass_fields__[name].default for name in MEANINGS}
#: meanings changed in the catalog since the name lists, each for a measured reason:
#: kernel-mode CPU time follows what the kernel serves (page faults, I/O, packets) as the
#: time spent on interrupts does: a 4 GiB allocation's first windows led with it, naming
#: memory pressure a CPU fault (docs/detectors.md, "The claim names the cause")
#: A cgroup v1 file means what its v2 twin means (test below): v1's CPU-throttled time, like
#: v2's, falls as a relief, and v1's CPU time as a symptom
#: The kernel's memory-management work falls as a relief (page faults, allocations, frees,
#: reclaim, compaction, swap): a stopped job stops faulting and freeing pages, which named
#: live hangs "memory" (docs/detectors.md, "The claim names the cause")
RELIEF_SINCE = (
    "cgroup.memory.stat.pgmajfault", "cgroup.memory.stat.pgtotal",
    "cgroup.memory.stat.thp_total", "vmstat.compact_daemon_wake", "vmstat.compact_success",
    "vmstat.direct_map_level3_collapses", "vmstat.drop_slab",
    "vmstat.nr_vmscan_immediate_reclaim", "vmstat.numa_foreign", "vmstat.pgalloc_normal",
    "vmstat.pgdemote_kswapd", "vmstat.pgreuse", "vmstat.pgskip_dma32", "vmstat.pgsteal_file",
    "vmstat.pgsteal_proactive", "vmstat.pswp", "vmstat.pswp*", "vmstat.pswp1",
    "vmstat.pswpa.b", "vmstat.pswpin", "vmstat.pswpmem", "vmstat.pswpout", "vmstat.pswptotal",
    "vmstat.pswpx", "vmstat.thp_collapse_alloc_failed", "vmstat.thp_file_fallback",
    "vmstat.thp_migration_fail", "vmstat.thp_scan_exceed_none_pte", "vmstat.unevictable_pgs_",
    "vmstat.unevictable_pgs_a.b", "vmstat.unevictable_pgs_cleared",
    "vmstat.unevictable_pgs_mem", "vmstat.unevictable_pgs_mlocked",
    "vmstat.unevictable_pgs_munlocked", "vmstat.unevictable_pgs_rescued",
    "vmstat.unevictable_pgs_scanned", "vmstat.unevictable_pgs_stranded",
    "vmstat.unevictable_pgs_total", "vmstat.unevictable_pgs_x", "vmstat.zswpout",
)
#: Refaults of recently evicted pages are the kernel's memory-management work too, and
#: follow the pressure that evicted them, as a container's refaults (its twin) now do
REFAULTS_SINCE = ("vmstat.workingset_activate_anon", "vmstat.workingset_refault_anon",
                  "vmstat.workingset_refault_file", "vmstat.workingset_refault_total",
                  "vmstat.workingset_restore_file")
CHANGED_SINCE: dict[str, dict[str, object]] = {
    "cpu.system": {"follows": True},
    "cgroup.cpu.throttled_time": {"fall": "relief"},
    "cgroup.cpuacct.usage_ns": {"fall": "symptom"},
    **{metric: {"fall": "relief"} for metric in RELIEF_SINCE},
    **{metric: {"fall": "relief"} for metric in REFAULTS_SINCE},
}


def _expected(metric: str) -> dict[str, object]:
    """The meanings recorded for ``metric``, the defaults filled in."""
    meanings = {**DEFAULTS, **EXPECTED[metric][4], **CHANGED_SINCE.get(metric, {})}
    if isinstance(meanings["sign"], dict):
        meanings["sign"] = DirectSign(**meanings["sign"])
    return meanings


def test_the_fixture_covers_every_meaning() -> None:
    assert len(EXPECTED) == 331
    combos = {json.dumps(row[4], sort_keys=True) for row in EXPECTED.values()}
    assert len(combos) == 48
    given = {key for row in EXPECTED.values() for key in row[4]}
    assert given == set(MEANINGS)


@pytest.mark.parametrize("metric", sorted(EXPECTED))
def test_the_catalog_gives_what_the_name_lists_gave(metric: str) -> None:
    info = default_catalog().lookup(metric)
    assert [info.subsystem, info.kind, info.unit, info.priority] == EXPECTED[metric][:4]
    assert {name: getattr(info, name) for name in MEANINGS} == _expected(metric)


def test_the_analysis_reads_its_meanings_from_the_catalog() -> None:
    """Each predicate of the analysis says what the recorded meaning says, name by name."""
    for metric in EXPECTED:
        want = _expected(metric)
        info = default_catalog().lookup(metric)
        assert significance.is_side_effect(metric) is want["follows"], metric
        assert significance.is_waiting(metric) is want["waiting"], metric
        assert significance.fall_is_not_cause(metric) is bool(want["fall"]), metric
        assert significance.matter_direction(metric) == {"rise": 1, "fall": -1}.get(
            want["hurts"], 0), metric
        assert hostconfig.is_configuration(metric) is want["configuration"], metric
        sign = want["sign"]
        assert significance.is_bursty(metric) is (sign is not None and sign.tail), metric
        assert direct.sign_of(metric) == (None if sign is None else direct.Sign(
            metric, info.subsystem, sign.least, sign.cause, sign.tail)), metric
        counter = info.kind in ("counter", "event")
        assert significance.is_held_counter(metric) is (
            counter and want["repeated"] == "always"), metric
        assert significance.is_held_counter(f"{metric}{{netns=job}}") is (
            counter and want["repeated"] in ("always", "in_netns")), metric
        stall = derive._stall_columns((metric,))
        assert stall.tolist() == ([0] if want["stall_total"] else []), metric
        state = steady.state_columns([metric], ["mean"])[0]
        assert state == (not want["rate"] and info.kind in steady.STATE_KINDS), metric


def test_granules_and_jiffies_come_from_the_catalog() -> None:
    reuse, sockmem, blocked, busy = channel_floors(
        ["vmstat.pgreuse", "sockstat.UDP.mem", "cpu.procs_blocked", "derived.cpu_busy_pct"],
        np.zeros(4), 0.05, 0.1)
    assert reuse.spike == pytest.approx(256.0 / 0.1)  # a process's start: 256 pages
    assert sockmem.level == 256.0 and blocked.level == 1.0
    assert busy.spike == pytest.approx(3 * 100.0 / (100.0 * 0.1))  # 3 jiffies in 100 ms


def test_capacities_and_direct_signs_come_from_the_catalog() -> None:
    catalog = default_catalog()
    assert {m for m in EXPECTED if catalog.lookup(m).capacity == "cgroup_memory"} == {
        "cgroup.memory.current", "cgroup.memory.usage_bytes"}
    assert catalog.lookup("gpu.pcie_gen_max").capacity == "pcie_gen_max"
    assert significance.pcie_bps({"pcie_gen_max": 5, "pcie_width_max": 16,
                                  "pcie_gen": 1}) == pytest.approx(16 * 3938e6)
    signs = {m: direct.sign_of(m) for m in EXPECTED if direct.sign_of(m) is not None}
    assert sorted(signs) == ["derived.cgroup_throttled_pct", "psi.cpu.some.total",
                             "qdisc.drops", "qdisc.overlimits", "snmp.Tcp.RetransSegs"]
    assert signs["psi.cpu.some.total"] == direct.Sign("psi.cpu.some.total", "cpu", 250_000.0,
                                                      cause=False)
    assert direct.is_sign("mem.MemTotal") and not direct._is_cause("snmp.Tcp.RetransSegs")


def test_a_family_s_meanings_reach_metrics_no_entry_describes() -> None:
    """A pressure resource or an NVML field the catalog does not know stays uncatalogued
    (subsystem inferred, kind gauge, no unit) and takes its family's meanings."""
    catalog = default_catalog()
    for metric in ("psi.gpu.some.total", "gpu.new_field", "cgroup.psi.net.full.total",
                   "perf.cpu_clock"):
        assert metric not in catalog
        info = catalog.lookup(metric)
        assert (info.kind, info.unit, info.priority) == ("gauge", "", 0)
    assert catalog.lookup("psi.gpu.some.total").stall_total
    assert catalog.lookup("psi.gpu.some.total").subsystem == "gpu"  # inferred, as before
    assert catalog.lookup("cgroup.psi.net.full.total").repeated == "always"
    assert catalog.lookup("gpu.new_field").rate
    assert catalog.lookup("perf.cpu_clock").fall == "symptom"
    assert not catalog.lookup("unknown.metric").rate
    families = {e.name for e in catalog.meanings_only()}
    assert {"psi.*", "gpu.*", "cgroup.*", "perf.cpu_clock"} <= families
    assert not families & {e.name for e in catalog.entries()}


def test_every_meaning_parses(entries_package: Path) -> None:
    (entries_package / "good.toml").write_text(
        '"x.held" = { subsystem = "memory", kind = "gauge", unit = "bytes", hurts = "rise", '
        'alone = false, exists = true, judged_as = "huge_pages", capacity = "cgroup_memory", '
        'repeated = "in_netns", rate = true, configuration = true, jiffy_percent = true, '
        'level_granule = 256, spike_granule = 1.5, stall_total = true, follows = true, '
        'waiting = true, fall = "relief", sign = { least = 2.0, cause = false, tail = true } }\n'
        '"x.*" = { follows = true }\n')
    held, family = source_entries("good", "test_catalog_pkg")
    assert (held.hurts, held.alone, held.exists, held.judged_as, held.capacity) == (
        "rise", False, True, "huge_pages", "cgroup_memory")
    assert (held.repeated, held.rate, held.configuration, held.jiffy_percent) == (
        "in_netns", True, True, True)
    assert (held.level_granule, held.spike_granule, held.stall_total) == (256, 1.5, True)
    assert (held.follows, held.waiting, held.fall) == (True, True, "relief")
    assert held.sign == DirectSign(2.0, cause=False, tail=True)
    assert family.meanings_only and family.follows and not held.meanings_only


@pytest.mark.parametrize(("fields", "says"), [
    ('hurts = "up"', "hurts must be one of 'either', 'rise', 'fall', got 'up'"),
    ('fall = "maybe"', "fall must be one of 'symptom', 'relief'"),
    ('judged_as = "cpu"', "judged_as must be one of 'disk', 'huge_pages'"),
    ('capacity = "link"', "capacity must be one of 'cgroup_memory'"),
    ('repeated = "often"', "repeated must be one of 'always', 'in_netns'"),
    ('follows = "yes"', "follows must be true or false, got 'yes'"),
    ("alone = 0", "alone must be true or false, got 0"),
    ("level_granule = -1.0", "level_granule must be a number at least 0, got -1.0"),
    ('spike_granule = "256"', "spike_granule must be a number at least 0"),
    ("sign = { least = 0.0 }", "sign: least must be a positive number, got 0.0"),
    ('sign = { least = 1.0, tail = "yes" }', "sign: tail must be true or false"),
    ("sign = { lest = 1.0 }", "sign: .*lest"),
    ("sign = 5", "sign must be a table, got 5"),
])
def test_a_bad_meaning_is_named_with_its_file_and_entry(entries_package: Path, fields: str,
                                                        says: str) -> None:
    (entries_package / "bad.toml").write_text(
        f'"x.m" = {{ subsystem = "cpu", kind = "gauge", unit = "%", {fields} }}\n')
    with pytest.raises(ValueError, match=rf"catalog file bad\.toml: x\.m: .*{says}"):
        source_entries("bad", "test_catalog_pkg")


@pytest.mark.parametrize(("fields", "says"), [
    ('unit = "%", rate = true', "gives meanings alone"),
    ("", "give subsystem and kind, or a meaning"),
    ('subsystem = "cpu", rate = true', "unknown kind ''"),
    ('kind = "gauge", rate = true', r"unknown subsystem '' \(give subsystem and kind"),
])
def test_an_entry_of_meanings_alone_is_checked(entries_package: Path, fields: str,
                                               says: str) -> None:
    (entries_package / "alone.toml").write_text(f'"x.*" = {{ {fields} }}\n')
    with pytest.raises(ValueError, match=rf"catalog file alone\.toml: x\.\*: .*{says}"):
        source_entries("alone", "test_catalog_pkg")


#: A string that names a metric or a glob of metrics: dotted words (``mem.Cached``,
#: ``psi.*.total``, ``snmp.Tcp.Rto*``).
METRIC_NAME = re.compile(r"^[A-Za-z_*?\[][\w*?\[\]-]*(\.[\w*?\[\]-]+)+$")
#: Module-level collections of metric names in ``reveal/analysis/`` that are not meanings,
#: and why. Keep it short: a meaning belongs in the metric's catalog entry.
NOT_MEANINGS = {
    ("derive.py", "_RATIOS"): "the recipes of the derived ratios: which two metrics each "
                              "one divides, not what a channel means",
}


def _metric_names_in_module_collections(path: Path) -> dict[str, list[str]]:
    """Module-level names bound to a tuple, list, set or dict literal (or a comprehension)
    that holds a metric name or glob, and those names."""
    found: dict[str, list[str]] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        collections = [n for n in ast.walk(value) if isinstance(
            n, ast.Tuple | ast.List | ast.Set | ast.Dict | ast.ListComp | ast.SetComp
            | ast.DictComp | ast.GeneratorExp | ast.Call)]
        names = sorted({n.value for c in collections for n in ast.walk(c)
                        if isinstance(n, ast.Constant) and isinstance(n.value, str)
                        and METRIC_NAME.match(n.value)})
        if names:
            for target in targets:
                found[ast.unparse(target)] = names
    return found


def test_the_scan_finds_a_list_of_metric_names(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('A = ("mean", "median")\nB = ("psi.*", "cpu.steal")\n'
                      'C: dict[str, float] = {"sockstat.*.mem": 256.0}\n'
                      'D = tuple(x for x in ("vmstat.pgreuse",))\nE = "derived.ipc"\n')
    assert _metric_names_in_module_collections(module) == {
        "B": ["cpu.steal", "psi.*"], "C": ["sockstat.*.mem"], "D": ["vmstat.pgreuse"]}


def test_no_metric_name_lists_are_left_in_the_analysis() -> None:
    """What a channel means is said by its catalog entry: the analysis keeps no module-level
    list of metric names or globs (a feature, unit or label name is no metric name)."""
    modules = sorted(ANALYSIS.rglob("*.py"))
    assert len(modules) > 20
    left = {(path.name, name): names for path in modules
            for name, names in _metric_names_in_module_collections(path).items()}
    assert {key: names for key, names in left.items() if key not in NOT_MEANINGS} == {}
    assert set(NOT_MEANINGS) <= set(left)  # each exception still exists


#: what a channel means to the analysis, past its name, unit and priority
MEANING_FIELDS = ("subsystem", "kind", *ALL_MEANINGS, "healthy")


def test_twins_of_the_collector_mean_the_same() -> None:
    """Entries of the collector that measure the same thing (one description, subsystem
    and kind: a cgroup v1 file and its v2 twin, ``container CPU time``) carry the same
    meanings: which one a host has must not change a verdict or a claim. The scaled
    benchmark columns (``smd.*``) are another source's and left out."""
    twins: dict[tuple[str, str, str], list[MetricInfo]] = {}
    for entry in default_catalog().entries():
        if entry.description and not entry.name.startswith("smd."):
            twins.setdefault((entry.description, entry.subsystem, entry.kind), []).append(entry)
    groups = [group for group in twins.values() if len(group) > 1]
    assert any(e.name == "cgroup.cpu.throttled_time" for group in groups for e in group)
    for group in groups:
        for field in MEANING_FIELDS:
            seen = {e.name: getattr(e, field) for e in group}
            assert len({repr(v) for v in seen.values()}) == 1, (field, seen)


def test_a_containers_counter_means_what_the_hosts_twin_means() -> None:
    """A container's entry described as its host twin's (``container `` + the host's
    description: page faults, refaults, OOM kills, anonymous memory) carries the same
    meanings, but ``repeated`` (a cgroup's entries repeat per cgroup) and the one
    difference the model relies on: the host's kernel time follows what it served
    (interrupts, page faults, I/O of others), a container's is the system calls its own
    tasks made, a use of its own."""
    entries = [e for e in default_catalog().entries() if e.description]
    host = {e.description: e for e in entries if not e.name.startswith("cgroup.")}
    pairs = [(host[e.description.removeprefix("container ")], e) for e in entries
             if e.name.startswith("cgroup.") and e.description.startswith("container ")
             and e.description.removeprefix("container ") in host]
    assert {h.name for h, _ in pairs} >= {"vmstat.pgfault", "vmstat.oom_kill", "mem.AnonPages",
                                          "vmstat.workingset_refault_*"}
    allowed = {("cpu.system", "follows")}
    for h, c in pairs:
        for field in MEANING_FIELDS:
            if field == "repeated" or (h.name, field) in allowed:
                continue
            assert getattr(h, field) == getattr(c, field), (h.name, c.name, field)
