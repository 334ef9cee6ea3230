"""The streaming segment writer: journal cadence, segment files, encodings, schema changes."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from reveal.store.journal import MAGIC, read_journal
from reveal.store.layout import META_FILE, journal_path, segment_path, write_json_atomic
from reveal.store.run_reader import read_run
from reveal.store.run_writer import base_meta
from reveal.store.segment_writer import (
    BatchEncoder,
    SegmentWriter,
    batch_from_rows,
    read_journal_rows,
    segment_table,
)

STEP = 100_000_000  # 100 ms in ns


def _rows(n: int, channels: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ts = 5_000_000_000 + np.arange(n, dtype=np.int64) * STEP
    counters = np.cumsum(rng.integers(0, 50, size=(n, channels // 2)), axis=0).astype(float)
    gauges = rng.normal(size=(n, channels - channels // 2))
    block = np.hstack([counters, gauges])
    block[3, 0] = np.nan
    block[7, -1] = np.nan
    return ts, block


def _meta(run) -> None:
    write_json_atomic(run / META_FILE, base_meta("h", 0.1))


def _journal_rows(path) -> int:
    journal = read_journal(path)
    assert journal.damage is None and journal.schema is not None
    return journal.num_rows


@pytest.mark.parametrize(("n", "width"), [(1, 23), (9, 23), (10, 23), (11, 23), (37, 23),
                                          (10, 0)])
def test_fast_batch_message_is_byte_identical_to_pyarrow(n, width):
    channels = [f"c{i}{{cpu={i % 3}}}" for i in range(width)]
    ts, block = _rows(max(n, 10), 23, seed=n)
    block = block[:, :width]
    ts, block = ts[:n], block[:n]
    encoder = BatchEncoder(channels)
    fast = encoder.batch_message(ts, block)
    slow = batch_from_rows(encoder.schema, ts, block).serialize().to_pybytes()
    assert fast == slow
    stream = encoder.schema_message() + fast + fast
    table = ipc.open_stream(io.BytesIO(stream)).read_all()
    assert table.num_rows == 2 * n
    np.testing.assert_array_equal(table.column("ts_ns").to_numpy()[:n], ts)
    got = np.column_stack([table.column(c).to_numpy()[:n] for c in channels] or
                          [np.zeros((n, 0))])
    np.testing.assert_array_equal(got, block)  # NaN positions included


def test_segment_types_follow_the_values():
    n = 50
    ts = np.arange(n, dtype=np.int64) * STEP
    counter = np.arange(n, dtype=float) * 4096 + 2.0**40
    counter[5] = np.nan
    halves = np.arange(n) / 2.0  # exact in float32
    fine = np.linspace(0, 1, n) + 1e-9  # needs float64
    empty = np.full(n, np.nan)
    huge = np.full(n, 2.0**70 + 2.0**30)  # integral, beyond int64, not exact in float32
    block = np.column_stack([counter, halves, fine, empty, huge])
    names = ["a", "b", "c", "d", "e"]
    table, encodings = segment_table(ts, block, names)
    types = {f.name: f.type for f in table.schema}
    assert types["a"] == pa.int64() and encodings["a"] == "DELTA_BINARY_PACKED"
    assert table.column("a").null_count == 1
    assert types["b"] == pa.float32() and encodings["b"] == "BYTE_STREAM_SPLIT"
    assert types["c"] == pa.float64()
    assert table.column("d").null_count == n
    assert types["e"] == pa.float64()
    back = np.column_stack([table.column(c).cast(pa.float64()).fill_null(np.nan).to_numpy()
                            for c in names])
    np.testing.assert_array_equal(back, block)  # lossless, NaN where missing


def test_journal_gets_a_batch_every_second_and_segments_roll(tmp_path):
    run = tmp_path / "run"
    channels = [f"x{i}" for i in range(40)]
    ts, block = _rows(130, 40)
    writer = SegmentWriter(run, channels, interval_s=0.1, segment_seconds=6.0,
                           flush_seconds=1.0, background=False)
    _meta(run)
    for i in range(9):
        writer.append(int(ts[i]), block[i])
    first = journal_path(run, 1)
    assert first.exists() and _journal_rows(first) == 0  # schema only: < 1 s buffered
    writer.append(int(ts[9]), block[9])
    assert _journal_rows(first) == 10  # one second of rows, flushed as one batch
    for i in range(10, 60):
        writer.append(int(ts[i]), block[i])
    # 60 rows = 6 s: the first segment is closed, its journal removed, a new one open
    assert segment_path(run, 1).exists() and not first.exists()
    assert journal_path(run, 2).exists()
    assert pq.ParquetFile(segment_path(run, 1)).metadata.num_rows == 60
    for i in range(60, 130):
        writer.append(int(ts[i]), block[i])
    mid = read_run(run)  # segments plus the open journal, while recording
    assert mid.n_samples == 130
    writer.close()
    assert not list((run / "journal").iterdir())
    back = read_run(run)
    np.testing.assert_array_equal(back.timestamps_ns, ts)
    np.testing.assert_array_equal(back.values, block)
    assert writer.stats.segments_written == 3
    assert writer.stats.rows_journaled == 130 and writer.stats.dropped_samples == 0


@pytest.mark.parametrize("sizes", [(7,), (10,), (1, 25, 3), (61,), (130,)])
def test_block_appends_write_what_row_appends_write(tmp_path, sizes):
    channels = [f"x{i}" for i in range(40)]
    ts, block = _rows(130, 40)
    rows_run, block_run = tmp_path / "rows", tmp_path / "block"
    by_row = SegmentWriter(rows_run, channels, interval_s=0.1, segment_seconds=6.0,
                           background=False)
    by_block = SegmentWriter(block_run, channels, interval_s=0.1, segment_seconds=6.0,
                             background=False)
    for run in (rows_run, block_run):
        _meta(run)
    for i in range(130):
        by_row.append(int(ts[i]), block[i])
    i, k = 0, 0
    while i < 130:  # blocks of the given sizes, cycling, straddling every roll
        n = min(sizes[k % len(sizes)], 130 - i)
        by_block.append_block(ts[i:i + n], block[i:i + n])
        if i // 60 != (i + n) // 60 and (i + n) % 60:
            # a roll fell inside the block: the segment holds exactly its 60 rows
            assert pq.ParquetFile(segment_path(block_run, 1)).metadata.num_rows == 60
        i, k = i + n, k + 1
        assert i - by_block.stats.rows_journaled < 10  # under a second left unjournaled
    for writer in (by_row, by_block):
        writer.close()
    assert by_block.stats.segments_written == by_row.stats.segments_written == 3
    for number in (1, 2, 3):
        assert pq.read_table(segment_path(block_run, number)).equals(
            pq.read_table(segment_path(rows_run, number)))
    back = read_run(block_run)
    np.testing.assert_array_equal(back.timestamps_ns, ts)
    np.testing.assert_array_equal(back.values, block)


def test_schema_change_starts_a_journal_and_earlier_rows_are_nan(tmp_path):
    run = tmp_path / "run"
    ts, block = _rows(40, 4)
    writer = SegmentWriter(run, ["a", "b", "c"], interval_s=0.1, background=True)
    _meta(run)
    for i in range(15):
        writer.append(int(ts[i]), block[i, :3])
    writer.set_channels(["a", "b", "c", "new{dev=x}"])
    assert writer.journal_number == 2
    for i in range(15, 40):
        writer.append(int(ts[i]), block[i])
    assert journal_path(run, 1).exists() and journal_path(run, 2).exists()
    live = read_run(run)  # both journals read back while recording
    assert np.isnan(live.column("new{dev=x}")[:15]).all()
    writer.close()
    # one segment for the whole span, under the first journal's number, union schema
    assert [p.name for p in (run / "segments").iterdir()] == ["000001.parquet"]
    assert not list((run / "journal").iterdir())
    back = read_run(run)
    assert back.channels == ["a", "b", "c", "new{dev=x}"]
    assert np.isnan(back.column("new{dev=x}")[:15]).all()
    np.testing.assert_array_equal(back.column("new{dev=x}")[15:], block[15:, 3])
    np.testing.assert_array_equal(back.values[:, :3], block[:, :3])


def test_channel_churn_inside_a_segment_makes_one_file(tmp_path):
    run = tmp_path / "run"
    ts, block = _rows(90, 4)
    schemas = [["a", "b"], ["a", "b", "cg{cgroup=x}"], ["a", "b"], ["a", "b", "cg{cgroup=y}"]]
    writer = SegmentWriter(run, schemas[0], interval_s=0.1, segment_seconds=6,
                           background=False)
    _meta(run)
    for i in range(90):
        channels = schemas[min(i // 15, 3)]
        writer.set_channels(channels)
        writer.append(int(ts[i]), block[i, :len(channels)])
    writer.close()
    segments = sorted(p.name for p in (run / "segments").iterdir())
    assert len(segments) == 2  # 60 rows, then 30: one file per 6 s despite four schemas
    tel = read_run(run)
    assert tel.n_samples == 90
    x = tel.column("cg{cgroup=x}")
    assert np.isfinite(x[15:30]).all() and np.isnan(x[:15]).all() and np.isnan(x[30:]).all()
    y = tel.column("cg{cgroup=y}")
    assert np.isnan(y[:45]).all() and np.isfinite(y[45:]).all()
    np.testing.assert_array_equal(tel.values[:, :2], block[:, :2])


def test_unchanged_channels_and_empty_journals_write_nothing(tmp_path):
    run = tmp_path / "run"
    writer = SegmentWriter(run, ["a"], interval_s=0.1, background=False)
    writer.set_channels(["a"])  # same schema: nothing happens
    writer.set_channels(["a", "b"])  # nothing recorded yet: the number is reused
    assert writer.journal_number == 1
    writer.close()
    assert not list((run / "segments").iterdir()) and not list((run / "journal").iterdir())


def test_read_journal_rows_recovers_a_cut_journal(tmp_path):
    run = tmp_path / "run"
    ts, block = _rows(35, 6)
    writer = SegmentWriter(run, list("abcdef"), interval_s=0.1, background=False)
    for i in range(35):
        writer.append(int(ts[i]), block[i])
    path = journal_path(run, 1)
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.truncate(size - 10)  # as if killed in the middle of the third batch
    got_ts, got, channels = read_journal_rows(path)
    assert channels == list("abcdef")
    np.testing.assert_array_equal(got_ts, ts[:20])
    np.testing.assert_array_equal(got, block[:20])


def test_compact_storage_for_counters(tmp_path):
    """Slowly rising counters and constant channels cost well under 0.5 bytes a value."""
    rng = np.random.default_rng(3)
    n, c = 3000, 200
    ts = np.arange(n, dtype=np.int64) * STEP + rng.integers(-200_000, 200_000, n)
    ts.sort()
    block = np.zeros((n, c))
    block[:, :50] = np.cumsum(rng.poisson(3.0, size=(n, 50)), axis=0)  # busy counters
    block[:, 50:150] = 12345.0  # idle counters
    block[:, 150:] = np.cumsum(rng.poisson(0.01, size=(n, 50)), axis=0)  # rare events
    run = tmp_path / "run"
    writer = SegmentWriter(run, [f"m{i}" for i in range(c)], interval_s=0.1,
                           segment_seconds=300, background=False)
    for i in range(n):
        writer.append(int(ts[i]), block[i])
    writer.close()
    size = segment_path(run, 1).stat().st_size
    assert size / block.size < 0.5


def test_column_chunking_does_not_change_the_table():
    ts, block = _rows(40, 9)
    block[:, 2] = block[:, 2] / 4.0  # float32-exact
    names = [f"k{i}" for i in range(9)]
    whole, enc_whole = segment_table(ts, block, names)
    pieces, enc_pieces = segment_table(ts, block, names, chunk=2)
    assert whole.equals(pieces) and enc_whole == enc_pieces


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _page_crc(data: bytes, offset: int) -> int | None:
    """The ``crc`` field (4) of the Thrift-compact PageHeader at ``offset``, if present."""
    pos = offset
    for field_id in (1, 2, 3):  # type, uncompressed_page_size, compressed_page_size: i32
        assert data[pos] == 0x15, f"unexpected page header field {field_id}"
        _, pos = _varint(data, pos + 1)
    if data[pos] != 0x15:  # field 4 (crc, i32) absent: next is the data page header struct
        return None
    zigzag, _ = _varint(data, pos + 1)
    return ((zigzag >> 1) ^ -(zigzag & 1)) & 0xFFFFFFFF


def test_segments_carry_page_checksums_and_journal_records_a_crc(tmp_path):
    run = tmp_path / "run"
    channels = [f"x{i}" for i in range(12)]
    ts, block = _rows(40, 12)
    writer = SegmentWriter(run, channels, interval_s=0.1, segment_seconds=3.0,
                           background=False)
    for i in range(40):  # a segment of 30 rows, then 10 rows journaled
        writer.append(int(ts[i]), block[i])
    journal = journal_path(run, 2)
    data = journal.read_bytes()
    assert data.startswith(MAGIC)
    offset, records = len(MAGIC), 0
    while offset < len(data):  # <length><crc32 of payload><payload>, back to back
        length, crc = struct.unpack_from("<II", data, offset)
        assert zlib.crc32(data[offset + 8:offset + 8 + length]) == crc
        offset, records = offset + 8 + length, records + 1
    assert offset == len(data) and records == 2  # the schema, one batch
    writer.close()
    for path in sorted((run / "segments").iterdir()):
        meta = pq.ParquetFile(path).metadata
        raw = path.read_bytes()
        group = meta.row_group(0)
        for c in range(group.num_columns):
            column = group.column(c)
            page = column.data_page_offset
            stored = _page_crc(raw, page)
            assert stored is not None, f"{path.name} column {column.path_in_schema}"
            # the CRC covers the page's compressed bytes, right after its header
            size = _page_size(raw, page)
            assert zlib.crc32(raw[size[1]:size[1] + size[0]]) == stored
        pq.ParquetFile(path, page_checksum_verification=True).read()


def _page_size(data: bytes, offset: int) -> tuple[int, int]:
    """(compressed page size, offset of the page data) of the PageHeader at ``offset``."""
    pos = offset
    values = []
    for _ in range(4):
        zigzag, pos = _varint(data, pos + 1)
        values.append((zigzag >> 1) ^ -(zigzag & 1))
    return values[2], _header_end(data, pos)  # then the data page header struct


def _header_end(data: bytes, pos: int) -> int:
    """Where the PageHeader whose next field starts at ``pos`` ends (Thrift compact)."""
    depth = 0
    while True:
        byte = data[pos]
        pos += 1
        if byte == 0:  # stop
            if depth == 0:
                return pos
            depth -= 1
            continue
        kind = byte & 0x0F
        if kind == 12:  # struct
            depth += 1
        elif kind in (5, 6, 3, 4):  # i32, i64, i16, varint-encoded
            _, pos = _varint(data, pos)
        elif kind in (1, 2):  # bool in the type nibble
            continue
        elif kind == 8:  # binary: varint length then bytes
            n, pos = _varint(data, pos)
            pos += n
        else:
            raise AssertionError(f"unexpected Thrift type {kind}")
