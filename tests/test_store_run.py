"""Run directory round trip and bad-input handling."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from reveal.errors import InputError
from reveal.frame import Telemetry, format_channel, parse_channel
from reveal.store.layout import journal_path
from reveal.store.run_reader import read_run
from reveal.store.run_writer import telemetry_table, write_run


def _telemetry(n: int = 50) -> Telemetry:
    rng = np.random.default_rng(1)
    values = rng.normal(size=(n, 3))
    values[5, 1] = np.nan
    ts = np.arange(n, dtype=np.int64) * 100_000_000 + 7
    return Telemetry("h1", ts, values, ["cpu.user{cpu=0}", "mem.MemFree", "x"])


def test_round_trip_keeps_values_nans_and_interval(tmp_path):
    tel = _telemetry()
    write_run(tel, tmp_path / "run")
    back = read_run(tmp_path / "run")
    assert back.channels == tel.channels
    np.testing.assert_array_equal(back.timestamps_ns, tel.timestamps_ns)
    np.testing.assert_allclose(back.values, tel.values, equal_nan=True)
    assert back.interval_s == pytest.approx(0.1)


def test_version_1_journal_tail_is_recovered_and_truncation_dropped(tmp_path):
    tel = _telemetry(40)
    run = write_run(tel.slice_rows(0, 20), tmp_path / "run")
    path = journal_path(run, 2).with_suffix(".arrows")  # a plain Arrow stream, as v1 wrote
    path.parent.mkdir()
    table = telemetry_table(tel.timestamps_ns[20:], tel.values[20:], tel.channels)
    with open(path, "wb") as handle:
        writer = ipc.new_stream(handle, table.schema)
        for batch in table.to_batches(max_chunksize=10):
            writer.write_batch(batch)
    size = path.stat().st_size
    with open(path, "r+b") as handle:  # cut the last batch in half, as SIGKILL would
        handle.truncate(size - 200)
    with pytest.warns(UserWarning, match="truncated"):
        back = read_run(run)
    assert back.n_samples == 30
    np.testing.assert_allclose(back.values, tel.values[:30], equal_nan=True)


def test_channel_appearing_mid_run_is_nan_before(tmp_path):
    tel = _telemetry(20)
    run = write_run(tel.slice_rows(0, 10).select(["x"]), tmp_path / "run")
    later = tel.slice_rows(10, 20)
    path = journal_path(run, 2).with_suffix(".arrows")
    path.parent.mkdir()
    table = telemetry_table(later.timestamps_ns, later.values, later.channels)
    with open(path, "wb") as handle, ipc.new_stream(handle, table.schema) as writer:
        writer.write_table(table)
    back = read_run(run)
    assert back.channels[0] == "x" and set(back.channels) == set(tel.channels)
    assert np.isnan(back.column("mem.MemFree")[:10]).all()
    np.testing.assert_allclose(back.column("mem.MemFree")[10:], tel.column("mem.MemFree")[10:])


def test_bad_inputs_name_the_file(tmp_path):
    with pytest.raises(InputError, match=r"no meta\.json"):
        read_run(tmp_path)
    run = write_run(_telemetry(), tmp_path / "run")
    seg = next((run / "segments").glob("*.parquet"))
    seg.write_bytes(seg.read_bytes()[:100])
    with pytest.raises(InputError, match=seg.name):
        read_run(run)
    (run / "meta.json").write_text("{not json")
    with pytest.raises(InputError, match=r"meta\.json"):
        read_run(run)
    (run / "meta.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(InputError, match="not a reveal-run"):
        read_run(run)


def test_channel_names_escape_tenant_text():
    name = format_channel("cgroup.cpu", {"cgroup": "evil,name={x}\n"})
    metric, labels = parse_channel(name)
    assert metric == "cgroup.cpu"
    assert labels == {"cgroup": "evil_name__x__"}
    assert pa.field(name, pa.float64()).name == name
