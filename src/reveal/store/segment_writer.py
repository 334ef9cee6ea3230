"""The collector's streaming, crash-safe writer of a run directory (docs/run-format.md).

Rows (one timestamp plus one float64 per channel) are kept in memory for the open segment.
At least every ``flush_seconds`` the rows not yet journaled are appended to
``journal/NNNNNN.journal`` as one record (an Arrow IPC record batch framed with its length
and CRC32, see :mod:`reveal.store.journal`), written with ``pwrite`` so a SIGKILL loses at
most the rows since the last flush and a failed write (disk full) is cut back with
``ftruncate``, leaving a readable journal. Every ``segment_seconds``, on a schema change
and on close, the segment is written as ``segments/NNNNNN.parquet.tmp`` (zstd; int64
columns delta-encoded, floats byte-stream-split; page checksums), fsynced, renamed, and its
journals removed.
Segment files are written on a background thread so the sampler never waits for them.

A full disk never raises: rows that cannot be journaled are dropped and counted
(``stats.dropped_samples``), one warning is issued per episode, and recording resumes when
space returns; a segment that cannot be written stays as its (readable) journal and is
converted later.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from reveal.store._mapped import mapped_zeros
from reveal.store.journal import MAGIC, frame, journal_arrays, read_journal
from reveal.store.layout import JOURNAL_DIR, SEGMENTS_DIR, TIME_COLUMN, journal_path, segment_path

#: Errors meaning "the storage is full or failing": drop and count, never crash.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})

_INT64_LIMIT = 2.0 ** 63 - 1024.0  # largest magnitude float64 safely cast to int64
ZSTD_LEVEL = 6


@dataclass
class WriterStats:
    """Counters of the writer (rows are samples; sizes in bytes)."""

    rows_journaled: int = 0
    dropped_samples: int = 0
    segments_written: int = 0
    segment_bytes: int = 0  # sum of closed segment files
    journal_bytes: int = 0  # size of the open journal
    journal_bytes_closed: int = 0  # closed journals not yet replaced by their segment
    journal_bytes_total: int = 0  # everything ever appended to journals
    disk_full_episodes: int = 0
    pending_segments: int = 0  # journals still waiting for their Parquet file
    journal_bytes_damaged: int = 0  # bytes of journals a retry found torn or corrupt

    @property
    def bytes_on_disk(self) -> int:
        """Segments plus every journal still on disk, bytes."""
        return self.segment_bytes + self.journal_bytes + self.journal_bytes_closed


# ---------------------------------------------------------------------------------------
# Arrow IPC messages
# ---------------------------------------------------------------------------------------

def journal_schema(channels: list[str]) -> pa.Schema:
    """The journal's schema: ``ts_ns`` int64, then one float64 per channel (NaN = missing)."""
    return pa.schema([pa.field(TIME_COLUMN, pa.int64(), nullable=False)]
                     + [pa.field(name, pa.float64()) for name in channels])


def batch_from_rows(schema: pa.Schema, ts_ns: np.ndarray, block: np.ndarray) -> pa.RecordBatch:
    """A record batch of ``block`` (rows × channels, float64) through pyarrow (slow path)."""
    arrays = [pa.array(np.ascontiguousarray(ts_ns, dtype=np.int64))]
    arrays += [pa.array(np.ascontiguousarray(block[:, i])) for i in range(block.shape[1])]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class BatchEncoder:
    """Encapsulated IPC record-batch messages for one schema, without a column loop.

    With no nulls (NaN is a value) and every buffer a multiple of 8 bytes, a batch message
    is a metadata header that depends only on the row count, followed by the columns'
    bytes back to back. The header for each row count is taken from a batch pyarrow itself
    serialised, and used only after checking that pyarrow's body equals the bytes this class
    would write; otherwise every batch goes through pyarrow.
    """

    def __init__(self, channels: list[str]) -> None:
        self.schema = journal_schema(channels)
        self.n_channels = len(channels)
        self._headers: dict[int, bytes | None] = {}

    def schema_message(self) -> bytes:
        return self.schema.serialize().to_pybytes()

    def _header(self, n: int) -> bytes | None:
        if n not in self._headers:
            ts = np.arange(1, n + 1, dtype=np.int64)
            block = np.arange(n * self.n_channels, dtype=np.float64).reshape(n, self.n_channels)
            block += 0.5
            message = batch_from_rows(self.schema, ts, block).serialize().to_pybytes()
            body = ts.tobytes() + block.T.tobytes()
            ok = len(message) > len(body) and message.endswith(body)
            self._headers[n] = message[:len(message) - len(body)] if ok else None
        return self._headers[n]

    def batch_message(self, ts_ns: np.ndarray, block: np.ndarray) -> bytes:
        """The IPC message holding ``block`` (rows × channels float64) and ``ts_ns``."""
        header = self._header(len(ts_ns))
        if header is None:
            return batch_from_rows(self.schema, ts_ns, block).serialize().to_pybytes()
        return b"".join((header, np.ascontiguousarray(ts_ns, dtype=np.int64).tobytes(),
                         np.ascontiguousarray(block, dtype=np.float64).T.tobytes()))


# ---------------------------------------------------------------------------------------
# Parquet segments
# ---------------------------------------------------------------------------------------

def segment_table(ts_ns: np.ndarray, block: np.ndarray, channels: list[str],
                  chunk: int = 128) -> tuple[pa.Table, dict[str, str]]:
    """The segment's Arrow table and a Parquet encoding per column.

    A column whose values are all integral is stored as int64 (null where NaN) with
    DELTA_BINARY_PACKED (counters and integral gauges: small deltas pack into few bits);
    other columns as float32 when that is exact, else float64, with BYTE_STREAM_SPLIT.
    Columns are examined ``chunk`` at a time so temporaries stay small.
    """
    arrays = [pa.array(np.asarray(ts_ns, dtype=np.int64))]
    encodings = {TIME_COLUMN: "DELTA_BINARY_PACKED"}
    for lo in range(0, len(channels), chunk):
        part = block[:, lo:lo + chunk]
        nan = np.isnan(part)
        finite_or_nan = (np.isfinite(part) | nan).all(axis=0)
        filled = np.where(nan, 0.0, part)
        integral = (finite_or_nan & (filled == np.rint(filled)).all(axis=0)
                    & (np.abs(filled) <= _INT64_LIMIT).all(axis=0))
        as32 = filled.astype(np.float32)
        exact32 = finite_or_nan & (as32.astype(np.float64) == filled).all(axis=0)
        any_nan = nan.any(axis=0)
        for j, name in enumerate(channels[lo:lo + chunk]):
            mask = nan[:, j] if any_nan[j] else None
            if integral[j]:
                arrays.append(pa.array(filled[:, j].astype(np.int64), type=pa.int64(),
                                       mask=mask))
                encodings[name] = "DELTA_BINARY_PACKED"
            elif exact32[j]:
                arrays.append(pa.array(as32[:, j], type=pa.float32(), mask=mask))
                encodings[name] = "BYTE_STREAM_SPLIT"
            else:
                arrays.append(pa.array(part[:, j], type=pa.float64(), mask=mask))
                encodings[name] = "BYTE_STREAM_SPLIT"
    return pa.Table.from_arrays(arrays, names=[TIME_COLUMN, *channels]), encodings


def write_segment_file(path: Path, table: pa.Table, encodings: dict[str, str],
                       zstd_level: int = ZSTD_LEVEL) -> int:
    """Write ``table`` to ``path`` atomically (tmp, fsync, rename); returns its size."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        pq.write_table(
            table, tmp, row_group_size=max(table.num_rows, 1), compression="zstd",
            compression_level=zstd_level, use_dictionary=False, column_encoding=encodings,
            write_statistics=[TIME_COLUMN], store_schema=False, write_page_index=False,
            data_page_size=1 << 22, write_page_checksum=True)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)
    return path.stat().st_size


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_journal_rows(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Every intact record of a journal (either version) as (ts_ns, block, channels)."""
    return journal_arrays(read_journal(path))


# ---------------------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------------------

Notify = Callable[[str, str], None]  # (level "warning" | "notice" | "info", message)


def _quiet(level: str, message: str) -> None:
    del level, message


@dataclass
class _Part:
    """Rows of one journal file (one schema) waiting to become part of a segment."""

    number: int
    ts: np.ndarray
    block: np.ndarray
    channels: list[str]


def merge_parts(parts: list[_Part]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Rows of consecutive parts under the union of their channels (NaN where absent)."""
    if len(parts) == 1:
        return parts[0].ts, parts[0].block, parts[0].channels
    channels: list[str] = []
    index: dict[str, int] = {}
    for part in parts:
        for name in part.channels:
            if name not in index:
                index[name] = len(channels)
                channels.append(name)
    rows = sum(len(p.ts) for p in parts)
    ts = np.concatenate([p.ts for p in parts])
    block = np.full((rows, len(channels)), np.nan)
    row = 0
    for part in parts:
        cols = np.fromiter((index[c] for c in part.channels), dtype=np.intp,
                           count=len(part.channels))
        block[row:row + len(part.ts), cols] = part.block
        row += len(part.ts)
    return ts, block, channels


class SegmentWriter:
    """Append rows to a run directory: journal every ``flush_seconds``, Parquet per segment.

    A segment covers ``segment_seconds`` of samples. When the channels change inside it,
    the open journal is closed and a new one (next number) starts with the new schema; at
    the end of the segment every journal of it is written as **one** Parquet file under the
    first journal's number, with the union of their channels (NaN where a channel was
    absent), so channel churn (containers, cgroups) does not multiply small files.

    Parameters
    ----------
    run : Path
        The run directory (created if absent).
    channels : list of str
        Channel names, one per value of each row.
    interval_s : float
        Nominal sampling interval, seconds (sizes the buffers).
    segment_seconds : float
        Length of a segment, seconds of samples.
    flush_seconds : float
        Longest span of samples held only in memory (what a SIGKILL can lose), seconds.
    notify : callable(level, message)
        Receives the disk-full warning and the matching "resumed" note.
    background : bool
        Write Parquet segments on a worker thread (the collector) or inline (tests, tools).
    """

    def __init__(self, run: Path, channels: list[str], *, interval_s: float = 0.1,
                 segment_seconds: float = 300.0, flush_seconds: float = 1.0,
                 notify: Notify = _quiet, background: bool = True,
                 zstd_level: int = ZSTD_LEVEL) -> None:
        self.run = Path(run)
        (self.run / SEGMENTS_DIR).mkdir(parents=True, exist_ok=True)
        (self.run / JOURNAL_DIR).mkdir(parents=True, exist_ok=True)
        self.interval_ns = max(int(interval_s * 1e9), 1)
        self.segment_ns = int(segment_seconds * 1e9)
        self.flush_ns = int(flush_seconds * 1e9)
        self._flush_due_ns = self.flush_ns - self.interval_ns // 2
        self._roll_due_ns = self.segment_ns - self.interval_ns // 2
        self.zstd_level = zstd_level
        self.notify = notify
        self.stats = WriterStats()
        self._lock = threading.Lock()  # guards stats and pending, touched by the worker
        self._number = self._first_free_number()
        self._parts: list[_Part] = []  # closed journals of the open segment
        self._segment_first_ts: int | None = None
        self._pending: list[list[int]] = []  # journal numbers of segments not yet written
        self._disk_full = False
        self._dropped_in_episode = 0
        self._closed = False
        self._queue: queue.Queue[Callable[[], None] | None] | None = None
        self._worker: threading.Thread | None = None
        if background:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._work, name="segment-writer",
                                            daemon=True)
            self._worker.start()
        self._fd = -1
        self._start_journal(list(channels))

    # -- public ----------------------------------------------------------------------------
    @property
    def channels(self) -> list[str]:
        return list(self._channels)

    @property
    def journal_number(self) -> int:
        """Number of the open journal file."""
        return self._number

    def append(self, ts_ns: int, row: np.ndarray) -> None:
        """Add one sample (``row``: float64 per channel, copied); flush/roll when due."""
        if self._count == len(self._ts):
            self._grow()
        self._ts[self._count] = ts_ns
        self._block[self._count] = row
        self._count += 1
        # Buffered rows cover (last - first + interval) of time: flush once that reaches
        # flush_seconds (10 rows at 100 ms), so a SIGKILL loses at most that much.
        if ts_ns - self._ts[self._flushed] + self.interval_ns >= self._flush_due_ns:
            self.flush()
        first = self._segment_first_ts
        if first is None:
            if self._count:
                self._segment_first_ts = first = int(self._ts[0])
            else:
                return
        if ts_ns - first + self.interval_ns >= self._roll_due_ns:
            self.roll()

    def append_block(self, ts_ns: np.ndarray, rows: np.ndarray) -> None:
        """Add several samples (oldest first; ``rows``: samples × channels), exactly as
        :meth:`append` row by row would, with one copy per segment they fall in."""
        ts_ns = np.asarray(ts_ns, dtype=np.int64)
        i, n = 0, len(ts_ns)
        while i < n:
            first = self._segment_first_ts
            if first is None:
                first = int(self._ts[0]) if self._count else int(ts_ns[i])
            # the row after which the segment is due to roll, if it is in this block
            due = np.flatnonzero(ts_ns[i:] - first + self.interval_ns >= self._roll_due_ns)
            stop = i + int(due[0]) + 1 if due.size else n
            while self._count + (stop - i) > len(self._ts):
                self._grow()
            self._ts[self._count:self._count + stop - i] = ts_ns[i:stop]
            self._block[self._count:self._count + stop - i] = rows[i:stop]
            self._count += stop - i
            if self._segment_first_ts is None:
                self._segment_first_ts = int(self._ts[0])
            last = int(ts_ns[stop - 1])
            if last - self._ts[self._flushed] + self.interval_ns >= self._flush_due_ns:
                self.flush()
            if due.size:
                self.roll()
            i = stop

    def flush(self) -> None:
        """Append the rows not yet journaled as one record batch (drop them on a full disk)."""
        start, stop = self._flushed, self._count
        if stop <= start:
            return
        ok = self._journal_ready or self._write_schema()
        if ok:
            message = self._encoder.batch_message(self._ts[start:stop], self._block[start:stop])
            ok = self._append_journal(frame(message))
        if ok:
            self._flushed = stop
            self.stats.rows_journaled += stop - start
            if self._disk_full:
                self._disk_full = False
                self.notify("notice", f"{self.run}: storage writable again; recording resumed "
                                      f"after {self._dropped_in_episode} dropped samples")
        else:
            self._count = start  # rows that never reached the journal are dropped
            self.stats.dropped_samples += stop - start
            self._dropped_in_episode += stop - start

    def set_channels(self, channels: list[str]) -> None:
        """Continue the segment in a new journal with ``channels`` (when they differ)."""
        if list(channels) == self._channels:
            return
        self.flush()
        self._end_journal()
        self._start_journal(list(channels))

    def roll(self) -> None:
        """End the segment: its journals become one Parquet file; a new segment starts."""
        self.flush()
        self._end_journal()
        self._submit_segment()
        self._start_journal(list(self._channels))

    def close(self) -> None:
        """Flush, write the last segment, wait for the worker, retry pending segments."""
        if self._closed:
            return
        self.flush()
        self._end_journal()
        self._submit_segment()
        self._closed = True
        if self._queue is not None and self._worker is not None:
            self._queue.put(None)
            self._worker.join()
        self._retry_pending()

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the writer's worker thread, after the segments queued before it
        (inline when there is no worker or the writer is closed)."""
        if self._queue is not None and not self._closed:
            self._queue.put(job)
        else:
            job()

    def update_journal_size(self) -> None:
        self.stats.journal_bytes = self._journal_size

    # -- journal -----------------------------------------------------------------------------
    def _first_free_number(self) -> int:
        numbers = [0]
        for folder in (SEGMENTS_DIR, JOURNAL_DIR):
            for path in (self.run / folder).iterdir():
                head = path.name.split(".", 1)[0]
                if head.isdigit():
                    numbers.append(int(head))
        return max(numbers) + 1

    def _start_journal(self, channels: list[str]) -> None:
        if getattr(self, "_channels", None) != channels:
            self._encoder = BatchEncoder(channels)  # keeps its headers while channels stay
            per_flush = max(1, round(self.flush_ns / self.interval_ns))
            for n in (per_flush, per_flush + 1):  # built now, not on the sampling path
                self._encoder.batch_message(np.zeros(n, np.int64),
                                            np.zeros((n, len(channels))))
        self._channels = channels
        capacity = int(self.segment_ns // self.interval_ns) + 16
        self._ts = mapped_zeros((capacity,), np.int64)
        self._block = mapped_zeros((capacity, len(channels)), np.float64)
        self._count = 0
        self._flushed = 0
        self._journal_size = 0
        self._journal_ready = False
        self._fd = -1
        self._write_schema()

    def _end_journal(self) -> None:
        """Close the open journal; keep its rows as a part of the segment (or drop it empty)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.stats.journal_bytes = 0
        if self._count == 0:
            with contextlib.suppress(OSError):
                journal_path(self.run, self._number).unlink()
            return  # nothing recorded: the next journal reuses the number
        self._parts.append(_Part(self._number, self._ts[:self._count],
                                 self._block[:self._count], list(self._channels)))
        with self._lock:
            self.stats.journal_bytes_closed += self._journal_size
        self._number += 1

    def _submit_segment(self) -> None:
        parts, self._parts = self._parts, []
        self._segment_first_ts = None
        if parts:
            self.submit(lambda: self._finish_segment(parts))

    def _grow(self) -> None:
        """More rows than planned (a clock jump, a tiny interval): double the buffers."""
        ts = mapped_zeros((2 * len(self._ts),), np.int64)
        block = mapped_zeros((2 * len(self._block), self._block.shape[1]), np.float64)
        ts[:len(self._ts)] = self._ts
        block[:len(self._block)] = self._block
        self._ts, self._block = ts, block

    def _write_schema(self) -> bool:
        """(Re)create the open journal with just its schema; False on a storage error."""
        if self._fd < 0:
            path = journal_path(self.run, self._number)
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC,
                                   0o644)
            except OSError as exc:
                if exc.errno not in STORAGE_ERRNOS:
                    raise
                self._storage_error(exc)
                return False
        elif self._journal_size:
            os.ftruncate(self._fd, 0)
            self._journal_size = 0
        self._journal_ready = self._append_journal(MAGIC + frame(self._encoder.schema_message()))
        return self._journal_ready

    def _append_journal(self, data: bytes) -> bool:
        """pwrite ``data`` at the end of the journal; on a storage error cut it back."""
        offset = self._journal_size
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self._fd, view, offset)
                view = view[written:]
                offset += written
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._journal_size)
            self._storage_error(exc)
            return False
        self.stats.journal_bytes_total += offset - self._journal_size
        self._journal_size = offset
        self.stats.journal_bytes = offset
        return True

    def _storage_error(self, exc: OSError) -> None:
        if not self._disk_full:
            self._disk_full = True
            self._dropped_in_episode = 0
            self.stats.disk_full_episodes += 1
            self.notify("warning", f"{self.run}: cannot write ({exc.strerror}); dropping "
                                   f"samples until space returns")

    # -- segments ----------------------------------------------------------------------------
    def _work(self) -> None:
        assert self._queue is not None
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                job()
            except Exception as exc:  # never kill the sampler; the journals stay readable
                self.notify("warning", f"{self.run}: background write failed ({exc})")

    def _finish_segment(self, parts: list[_Part]) -> None:
        """Write one segment from its parts; keep the journals when the disk is full."""
        numbers = [p.number for p in parts]
        if self._write_parquet(numbers, *merge_parts(parts)):
            self._retry_pending()
        else:
            with self._lock:
                self._pending.append(numbers)
                self.stats.pending_segments = len(self._pending)

    def _write_parquet(self, numbers: list[int], ts_ns: np.ndarray, block: np.ndarray,
                       channels: list[str]) -> bool:
        """Segment ``numbers[0]`` from the rows of journals ``numbers``; then drop them."""
        table, encodings = segment_table(ts_ns, block, channels)
        target = segment_path(self.run, numbers[0])
        try:
            size = write_segment_file(target, table, encodings, self.zstd_level)
        except OSError as exc:
            if exc.errno not in STORAGE_ERRNOS:
                raise
            self._storage_error(exc)
            return False
        removed = 0
        for number in numbers:  # the first is skipped by readers already (same number)
            path = journal_path(self.run, number)
            with contextlib.suppress(OSError):
                journal_size = path.stat().st_size
                path.unlink()
                removed += journal_size
        with self._lock:
            self.stats.segments_written += 1
            self.stats.segment_bytes += size
            self.stats.journal_bytes_closed = max(0, self.stats.journal_bytes_closed - removed)
        return True

    def _retry_pending(self) -> None:
        """Write segments left as journals by an earlier full disk, oldest first."""
        with self._lock:
            pending = [list(numbers) for numbers in self._pending]
        for numbers in pending:
            parts = []
            try:
                for number in numbers:
                    path = journal_path(self.run, number)
                    if path.exists():
                        journal = read_journal(path)
                        if journal.damage is not None:
                            self.stats.journal_bytes_damaged += journal.damage.dropped_bytes
                            self.notify("warning", f"{self.run}: "
                                                   f"{journal.damage.describe()}")
                        ts, block, channels = journal_arrays(journal)
                        if len(ts):
                            parts.append(_Part(number, ts, block, channels))
            except (OSError, pa.ArrowException):
                break
            if parts and not self._write_parquet(numbers, *merge_parts(parts)):
                break
            with self._lock:
                self._pending.remove(numbers)
                self.stats.pending_segments = len(self._pending)
