"""Every plugin kind joins the same way: one class in one module, with its registry's
decorator (:class:`reveal.registry.Registry`). Here an alert sink, a fault and a probe
are each added from this test module and used by the code that serves them; detectors
are added the same way in tests/test_detector_registry.py."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

import numpy as np
import pytest

import reveal.collect  # noqa: F401  (registers the built-in probes)
from reveal.cli import build_parser
from reveal.collect.probe import REGISTRY, Probe
from reveal.collect.probe import register as register_probe
from reveal.commands.probes import probe_rows, render
from reveal.commands.watch import sinks_from_args
from reveal.errors import InputError, RevealError
from reveal.inject.benign import BENIGN
from reveal.inject.faults import FAULTS, Fault, FaultContext, make_fault
from reveal.inject.faults import register as register_fault
from reveal.live.service import Watch, WatchOptions
from reveal.live.sinks import SINKS, Sink
from reveal.live.sinks import register as register_sink
from reveal.registry import Registry
from test_watch_alerts import window


class MemorySink(Sink):
    """Keeps every event in a list (a sink as a site would add one)."""

    name = "memory"
    option = "--alerts-memory"
    metavar = "LABEL"
    help = "keep alert events in memory under LABEL"

    def __init__(self, label: str, on_delivered=None, notify=lambda level, message: None):
        super().__init__(on_delivered, notify)
        self.label = label
        self.events: list[dict] = []

    @classmethod
    def open(cls, target, on_delivered=None, notify=lambda level, message: None,
             max_queue=1000):
        return cls(target, on_delivered, notify)

    def submit(self, event):
        self.events.append(event)
        self._ok(event)


@pytest.fixture
def memory_sink():
    register_sink(MemorySink)
    yield MemorySink
    SINKS.unregister(MemorySink.name)


def test_a_sink_from_one_module_is_offered_and_opened_by_the_watch(memory_sink, tmp_path):
    parser = build_parser()
    args = parser.parse_args(["watch", "--state", str(tmp_path / "state"), "--listen",
                              "none", "--alerts-memory", "ops", "--alerts-file",
                              str(tmp_path / "a.jsonl")])
    sinks = sinks_from_args(args)
    assert sinks == {"jsonl": str(tmp_path / "a.jsonl"), "memory": "ops"}
    watch = Watch(WatchOptions(state=tmp_path / "state", sinks=sinks),
                  lambda level, message: None)
    try:
        watch._open_state()
        watch._open_sinks()
        assert [s.name for s in watch.sinks] == ["jsonl", "memory"]  # registration order
        mine = watch.sinks[1]
        assert isinstance(mine, MemorySink) and mine.label == "ops"
        assert watch.tracker is not None
        watch.tracker.observe(window(0, True))  # an episode opens: every sink hears it
        assert [e["event"] for e in mine.events] == ["firing"] and mine.sent == 1
        assert '"event": "firing"' in (tmp_path / "a.jsonl").read_text()
    finally:
        watch.close()
    with pytest.raises(InputError, match="unknown alert sink 'pager'"):
        Watch(WatchOptions(state=tmp_path / "s2", sinks={"pager": "x"}, listen=None),
              lambda level, message: None).start()  # no port: a watch may hold the default


def test_a_sink_without_its_option_or_with_a_taken_name_is_refused(memory_sink):
    class NoOption(Sink):
        name = "quiet"

    with pytest.raises(ValueError, match="command-line option"):
        register_sink(NoOption)

    class Same(MemorySink):
        pass

    with pytest.raises(ValueError, match="taken by"):
        register_sink(Same)
    assert register_sink(MemorySink) is MemorySink  # the same class again: no change


class Nap(Fault):
    """A fault that only sleeps (a site's own fault kind)."""

    kind = "nap"
    subsystem = "cpu"
    INTENSITIES: ClassVar[dict] = {"low": {}, "high": {}}

    def begin(self) -> None:
        self.begun = True

    def end(self) -> None:
        self.ended = True


def test_a_fault_from_one_module_is_made_by_kind(tmp_path):
    register_fault(Nap)
    try:
        fault = make_fault("nap", "low", FaultContext(tmp_path))
        assert isinstance(fault, Nap) and fault.subsystem == "cpu"
        assert list(FAULTS)[-1] == "nap"
    finally:
        FAULTS.unregister("nap")
    with pytest.raises(RevealError, match="unknown fault 'nap'"):
        make_fault("nap", "low", FaultContext(tmp_path))


class Constant(Probe):
    """One channel holding 42 (a site's own probe)."""

    name = "constant42"
    description = "a constant"

    def open(self) -> None:
        self.channels = ["test.constant42"]
        self.status = "ok"

    def read(self, out: np.ndarray) -> None:
        out[:] = 42.0


def test_a_probe_from_one_module_is_listed_and_read():
    register_probe(Constant)
    try:
        assert REGISTRY.lookup("constant42") is Constant
        probe = REGISTRY["constant42"]()
        probe.open()
        out = np.zeros(1)
        probe.read(out)
        assert out[0] == 42.0
        # `reveal probes` lists it, and warns that its metric has no catalog entry
        rows = probe_rows()
        mine = next(r for r in rows if r["name"] == "constant42")
        assert mine["status"] == "ok" and mine["uncatalogued"] == ["test.constant42"]
        assert not any(r.get("uncatalogued") for r in rows if r is not mine)
        text = render(rows)
        assert "warning: probe constant42: 1 metrics have no catalog entry" in text
    finally:
        REGISTRY.unregister("constant42")
    with pytest.raises(InputError, match="unknown probe 'constant42'; known: "):
        REGISTRY.lookup("constant42")


def test_a_plugin_module_run_as_a_script_keeps_its_registered_class():
    # the UDP flood's module is also its child processes' entry point (python -m ...):
    # there its class is defined again under __main__ and must not be refused
    held = FAULTS["udp_flood"]
    again = type(held.__name__, (held,), {"__module__": "__main__",
                                          "__qualname__": held.__qualname__})
    assert register_fault(again) is again and FAULTS["udp_flood"] is held
    proc = subprocess.run([sys.executable, "-m", "reveal.inject.faults.udp_flood", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert "taken by" not in proc.stderr and "Traceback" not in proc.stderr


def test_every_kind_keeps_one_registry():
    from reveal.analysis.detectors.registry import DETECTORS

    built_in = [
        (DETECTORS, "detector", {"zscore", "pca_mahalanobis", "iforest", "gmm", "pca_error"}),
        (REGISTRY, "probe", {"cpu", "memory", "storage", "network", "pressure", "cgroup",
                             "gpu", "perf", "interrupts", "netns", "power", "qdisc"}),
        (FAULTS, "fault", {"cpu_contention", "memory_pressure", "disk_burst", "packet_loss",
                           "net_delay", "udp_flood", "cgroup_throttle", "rt_hog"}),
        (BENIGN, "benign activity", {"cron_burst", "git_commit", "new_interface",
                                     "watch_restart", "page_cache_drop"}),
        (SINKS, "alert sink", {"jsonl", "webhook", "alertmanager"}),
    ]
    for registry, kind, names in built_in:
        assert isinstance(registry, Registry) and registry.kind == kind
        assert names <= set(registry), names - set(registry)
        for name, cls in registry.items():  # each under its own name, of the registry's kind
            assert getattr(cls, registry.key) == name and issubclass(cls, registry.base)
    assert not set(FAULTS) & set(BENIGN)
