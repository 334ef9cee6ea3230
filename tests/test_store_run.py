"""Run directory round trip, range / subset / chunked reads, journal integrity and
bad-input handling."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from reveal.errors import InputError
from reveal.frame import Telemetry, format_channel, parse_channel
from reveal.store.journal import MAGIC, frame, read_journal
from reveal.store.layout import META_FILE, journal_path, segment_path, write_json_atomic
from reveal.store.run_reader import iter_run, open_run, read_run
from reveal.store.run_writer import base_meta, telemetry_table, write_run
from reveal.store.segment_writer import BatchEncoder, SegmentWriter


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


# -- ranges, subsets and chunks of a run written by the collector's writer ----------------

STEP = 100_000_000  # 100 ms in ns
T0 = 7_000_000_000


def _recorded_run(tmp_path: Path, close: bool = False) -> Path:
    """A run of 280 rows (28 s): segments of 6 s, a channel appearing at row 70 and one
    vanishing at row 160, the last rows still in journals unless ``close``."""
    run = tmp_path / "rec"
    rng = np.random.default_rng(7)
    base = ["cpu.user{cpu=0}", "cpu.user{cpu=1}", "cpu.system{cpu=0}", "mem.free",
            "disk.reads{dev=sda}", "net.rx{dev=eth0}"]
    writer = SegmentWriter(run, base, interval_s=0.1, segment_seconds=6.0,
                           background=False)
    write_json_atomic(run / META_FILE, base_meta("h", 0.1, closed=close))
    counters = np.cumsum(rng.integers(0, 9, size=(280, 8)), axis=0).astype(float)
    gauges = rng.normal(size=(280, 8))
    for i in range(280):
        names = list(base)
        row = list(counters[i, :3]) + list(gauges[i, :3])
        if i >= 70:
            names.append("gpu.util{gpu=0}")
            row.append(gauges[i, 6])
        if i < 160:
            names.append("cgroup.cpu{cgroup=a}")
            row.append(counters[i, 7])
        writer.set_channels(names)
        writer.append(T0 + i * STEP, np.array(row))
    if close:
        writer.close()
    return run


def test_range_and_subset_reads_equal_slices_of_the_whole_read(tmp_path):
    run = _recorded_run(tmp_path)
    assert list((run / "journal").iterdir())  # the open segment is read from journals
    whole = read_run(run)
    assert whole.n_samples == 280
    ts = whole.timestamps_ns
    cases = [(None, None), (T0 + 13 * STEP, T0 + 97 * STEP), (T0 + 60 * STEP, T0 + 120 * STEP),
             (T0 + 59 * STEP + 1, T0 + 60 * STEP + 1), (T0 + 230 * STEP, None),
             (None, T0 + 5 * STEP), (T0 - 10 * STEP, T0 + 400 * STEP)]
    subsets = [(None, None), (["mem.free", "gpu.util{gpu=0}"], None), (None, ["cpu."]),
               (["net.rx{dev=eth0}"], ["cgroup.", "disk.reads"]), ("mem.free", None)]
    for start, end in cases:
        lo = 0 if start is None else int(np.searchsorted(ts, start))
        hi = len(ts) if end is None else int(np.searchsorted(ts, end))
        for channels, metrics in subsets:
            part = read_run(run, start, end, channels=channels, metrics=metrics)
            if channels is None and metrics is None:
                assert part.channels == whole.channels
            expected = whole.slice_rows(lo, hi).select(part.channels)
            np.testing.assert_array_equal(part.timestamps_ns, expected.timestamps_ns)
            np.testing.assert_array_equal(part.values, expected.values)
    assert read_run(run, metrics="cpu.").channels == [
        "cpu.user{cpu=0}", "cpu.user{cpu=1}", "cpu.system{cpu=0}"]
    assert read_run(run, T0 + 1000 * STEP, T0 + 1001 * STEP).n_samples == 0


def test_chunks_cover_the_run_exactly_once_in_time_order(tmp_path):
    run = _recorded_run(tmp_path)
    whole = read_run(run)
    for chunk_rows in (1, 7, 60, 61, 279, 280, 1000):
        chunks = list(iter_run(run, chunk_rows))
        sizes = [c.n_samples for c in chunks]
        assert all(s == chunk_rows for s in sizes[:-1]) and 0 < sizes[-1] <= chunk_rows
        assert all(c.channels == whole.channels for c in chunks)
        ts = np.concatenate([c.timestamps_ns for c in chunks])
        np.testing.assert_array_equal(ts, whole.timestamps_ns)
        np.testing.assert_array_equal(np.vstack([c.values for c in chunks]), whole.values)
    start, end = T0 + 33 * STEP, T0 + 201 * STEP
    part = read_run(run, start, end, metrics=["gpu.", "cgroup."])
    chunks = list(open_run(run).iter_chunks(16, start, end, metrics=["gpu.", "cgroup."]))
    np.testing.assert_array_equal(np.vstack([c.values for c in chunks]), part.values)
    np.testing.assert_array_equal(np.concatenate([c.timestamps_ns for c in chunks]),
                                  part.timestamps_ns)


def test_a_range_read_skips_segments_outside_it(tmp_path):
    """Segment pruning by the ts_ns statistics: a segment whose pages are damaged is never
    decoded by a read of another time range; a read that needs it fails its checksum."""
    run = _recorded_run(tmp_path, close=True)
    first = segment_path(run, 1)
    meta = pq.ParquetFile(first).metadata
    column = meta.row_group(0).column(3)
    data = bytearray(first.read_bytes())
    data[column.data_page_offset + column.total_compressed_size - 5] ^= 0x40
    first.write_bytes(bytes(data))
    reader = open_run(run)
    later = reader.read(T0 + 100 * STEP, T0 + 200 * STEP)
    assert later.n_samples == 100
    with pytest.raises(InputError, match=rf"{first.name}.*(CRC|checksum)"):
        reader.read(T0 + 10 * STEP, T0 + 20 * STEP)


def test_repeated_rows_of_a_merged_segment_and_its_journal_are_read_once(tmp_path):
    run = _recorded_run(tmp_path, close=True)
    whole = read_run(run)
    # a crash between writing segment 2 (journals 2 and 3 merged: a channel appeared) and
    # removing journal 3
    assert segment_path(run, 2).exists() and not segment_path(run, 3).exists()
    seg = pq.read_table(segment_path(run, 2))
    rows = seg.num_rows
    block = np.column_stack([seg.column(c).cast(pa.float64()).fill_null(np.nan).to_numpy()
                             for c in seg.column_names[1:]])
    encoder = BatchEncoder(seg.column_names[1:])
    journal_path(run, 3).write_bytes(
        MAGIC + frame(encoder.schema_message())
        + frame(encoder.batch_message(seg.column("ts_ns").to_numpy()[rows // 2:],
                                      block[rows // 2:])))
    back = read_run(run)
    np.testing.assert_array_equal(back.timestamps_ns, whole.timestamps_ns)
    np.testing.assert_array_equal(back.values, whole.values)
    assert any("repeated timestamps" in w for w in back.meta["warnings"])
    chunks = list(iter_run(run, 64))
    np.testing.assert_array_equal(np.concatenate([c.timestamps_ns for c in chunks]),
                                  whole.timestamps_ns)


def test_a_flipped_byte_in_a_journal_record_is_detected_and_earlier_records_kept(tmp_path):
    run = _recorded_run(tmp_path)
    path = max((run / "journal").iterdir())
    journal = read_journal(path)
    assert journal.damage is None and len(journal.batches) >= 3
    whole = read_run(run)
    # offsets of the records: magic, then <length><crc><payload> each
    data = bytearray(path.read_bytes())
    offsets, offset = [], len(MAGIC)
    while offset < len(data):
        offsets.append(offset)
        offset += 8 + int.from_bytes(data[offset:offset + 4], "little")
    bad = 2  # the schema, one batch, then this one
    data[offsets[bad] + 8 + (offsets[bad + 1] - offsets[bad] - 8) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    kept = journal.batches[0].num_rows
    lost = journal.num_rows - kept
    with pytest.warns(UserWarning, match=rf"{path.name}: checksum mismatch at record {bad}"):
        back = read_run(run)
    assert back.n_samples == whole.n_samples - lost
    np.testing.assert_array_equal(back.values, whole.values[:back.n_samples])
    recovery = back.meta["recovery"]
    assert recovery["dropped_bytes"] == len(data) - offsets[bad]
    assert recovery["journals"][0]["kept_rows"] == kept
    assert recovery["journals"][0]["reason"] == "checksum mismatch"
    assert any("checksum mismatch" in w for w in back.meta["warnings"])


def test_unknown_channels_and_empty_ranges_are_clear_errors(tmp_path):
    run = _recorded_run(tmp_path)
    with pytest.raises(InputError, match=r"no channel 'cpu\.idle'"):
        read_run(run, channels=["cpu.user{cpu=0}", "cpu.idle"])
    with pytest.raises(InputError, match="empty time range"):
        read_run(run, T0 + 5, T0 + 5)
    with pytest.raises(InputError, match="chunk_rows"):
        list(iter_run(run, 0))


@pytest.mark.parametrize("version", ["two", "1", None, 3, 0, 1.5, True, [1]])
def test_unreadable_format_versions_are_one_clear_error(tmp_path, version):
    run = write_run(_telemetry(), tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    if version is None:
        del meta["version"]
    else:
        meta["version"] = version
    (run / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(InputError) as info:
        read_run(run)
    message = str(info.value)
    assert "meta.json" in message and "\n" not in message
    assert f"version {json.dumps(version)}" in message
    assert "(1, 2)" in message


def test_version_1_runs_still_read(tmp_path):
    run = write_run(_telemetry(), tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    meta["version"] = 1
    (run / "meta.json").write_text(json.dumps(meta))
    assert read_run(run).n_samples == 50
