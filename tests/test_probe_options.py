"""Probe options from ``--probe-option`` and ``--config``: parsed, checked against what each
probe declares, recorded in meta.json, and acted on by the real probes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reveal.collect.options import (
    as_list,
    check_probe_options,
    load_config,
    merge,
    options_from_args,
    parse_value,
    probe_options_help,
)
from reveal.collect.runner import registered_probes
from reveal.errors import InputError
from reveal.store.run_reader import read_run


def _reveal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reveal.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_values_read_as_their_types() -> None:
    assert parse_value("false") is False and parse_value("On") is True
    assert parse_value("4") == 4 and isinstance(parse_value("4"), int)
    assert parse_value("0.25") == 0.25
    assert parse_value("nvme*,sd*") == ["nvme*", "sd*"]
    assert parse_value("basic") == "basic"
    assert as_list("sda") == ["sda"] and as_list(("a", "b")) == ["a", "b"]
    assert options_from_args(["network.softnet=off", "storage.devices=vd*,sd*"]) == {
        "network": {"softnet": False}, "storage": {"devices": ["vd*", "sd*"]}}
    with pytest.raises(InputError, match=r"PROBE\.KEY=VALUE"):
        options_from_args(["softnet=false"])
    assert merge({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}, "b": {"z": 4}}) == {
        "a": {"x": 1, "y": 3}, "b": {"z": 4}}


def test_every_probe_declares_the_options_it_reads_including_its_bases() -> None:
    known = registered_probes()
    assert {"root", "proc_root", "sys_root", "softnet"} <= set(probe_options_help(
        known["network"]))
    check_probe_options({"network": {"softnet": False, "proc_root": "/proc"}}, known)
    with pytest.raises(InputError, match=r"no option 'sofnet'.*softnet"):
        check_probe_options({"network": {"sofnet": False}}, known)
    with pytest.raises(InputError, match="unknown probe 'netwrok'"):
        check_probe_options({"netwrok": {}}, known)


def test_config_file_tables_and_errors(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[collect]\nsegment-seconds = 60\n[probes.network]\nsoftnet = false\n')
    assert load_config(good) == {"collect": {"segment_seconds": 60},
                                 "probes": {"network": {"softnet": False}}}
    bad = tmp_path / "bad.toml"
    bad.write_text("[probes.network\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(bad)
    other = tmp_path / "other.toml"
    other.write_text("[alerts]\nx = 1\n")
    with pytest.raises(InputError, match="unknown table"):
        load_config(other)
    with pytest.raises(InputError, match="cannot read"):
        load_config(tmp_path / "absent.toml")


def test_collect_applies_probe_options_from_the_command_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = _reveal("collect", "--duration", "0.6", "--probes", "network,storage", "--quiet",
                   "--out", str(run), "--probe-option", "network.softnet=false",
                   "--probe-option", "storage.devices=no-such-disk*")
    assert done.returncode == 0, done.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert meta["probe_options"] == {"network": {"softnet": False},
                                     "storage": {"devices": "no-such-disk*"}}
    assert meta["probes"]["storage"]["status"] == "unavailable"  # no disk matches
    channels = read_run(run).channels
    assert any(c.startswith("net.rx_bytes") for c in channels)
    assert not any(c.startswith("softnet.") for c in channels)


def test_config_file_sets_collect_and_probe_options_and_the_command_line_wins(
        tmp_path: Path) -> None:
    config = tmp_path / "reveal.toml"
    config.write_text('[collect]\nduration = 0.6\nprobes = ["network"]\nquiet = true\n'
                      'interval = 0.2\n[probes.network]\nsoftnet = false\nsnmp6 = true\n')
    run = tmp_path / "run"
    done = _reveal("collect", "--config", str(config), "--interval", "0.1", "--out", str(run),
                   "--probe-option", "network.snmp6=false")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().startswith("reveal collect: run")  # quiet: summary only
    meta = json.loads((run / "meta.json").read_text())
    assert meta["interval_s"] == 0.1  # the command line over the file
    assert list(meta["probes"]) and meta["probes"]["network"]["status"] == "ok"
    assert meta["probe_options"] == {"network": {"softnet": False, "snmp6": False}}
    channels = read_run(run).channels
    assert not any(c.startswith(("softnet.", "snmp6.", "cpu.")) for c in channels)


@pytest.mark.parametrize("args, expected", [
    (["--refresh", "0"], "--refresh must be positive"),
    (["--probe-option", "network.sofnet=false"], "no option 'sofnet'"),
    (["--probe-option", "nosuch.x=1"], "unknown probe 'nosuch'"),
    (["--probe-option", "softnet"], "PROBE.KEY=VALUE"),
])
def test_bad_probe_options_are_one_line_before_anything_is_recorded(
        tmp_path: Path, args: list[str], expected: str) -> None:
    run = tmp_path / "run"
    line = _one_line_error(_reveal("collect", "--duration", "1", "--out", str(run), *args))
    assert expected in line
    assert not run.exists()


def test_bad_config_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "reveal.toml"
    config.write_text("[collect]\nintervall = 0.1\n")
    line = _one_line_error(_reveal("collect", "--config", str(config), "--duration", "1",
                                   "--out", str(tmp_path / "run")))
    assert "'intervall'" in line and "interval" in line
    config.write_text("[collect\n")
    assert "not valid TOML" in _one_line_error(_reveal("collect", "--config", str(config)))


def test_probes_lists_options_and_opens_with_them() -> None:
    done = _reveal("probes", "--options", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert {"probe": "network", "option": "softnet"}.items() <= next(
        r for r in rows if r["option"] == "softnet").items()
    assert all(r["help"] for r in rows)
    listed = _reveal("probes", "--json", "--channels", "--probe-option", "network.softnet=0")
    assert listed.returncode == 0, listed.stderr
    network = next(r for r in json.loads(listed.stdout) if r["name"] == "network")
    assert not any(c.startswith("softnet.") for c in network["channel_names"])


def test_a_probe_that_polls_on_its_own_thread_gets_the_sampling_interval(
        tmp_path: Path) -> None:
    from reveal.collect.runner import CollectOptions, Collector

    gpu = registered_probes()["gpu"]
    assert "interval_s" in probe_options_help(gpu)
    collector = Collector(CollectOptions(out=tmp_path / "run", interval_s=0.25,
                                         probe_options={"gpu": {"xid": False}}))
    assert collector._options_of(gpu) == {"xid": False, "interval_s": 0.25}
    given = Collector(CollectOptions(out=tmp_path / "run", interval_s=0.25,
                                     probe_options={"gpu": {"interval_s": 1.0}}))
    assert given._options_of(gpu) == {"interval_s": 1.0}
    assert "interval_s" not in collector._options_of(registered_probes()["cpu"])
