"""Journal files: the open segment's rows, appended once a second (docs/run-format.md).

Two record formats are read:

- **version 2** (``NNNNNN.journal``, written now): the 8-byte magic :data:`MAGIC`, then
  records ``<u32 length><u32 crc32><payload>`` (little-endian; ``crc32`` is
  :func:`zlib.crc32` of the payload). Each payload is one Arrow IPC encapsulated message:
  the schema first, then one record batch per flush.
- **version 1** (``NNNNNN.arrows``, earlier runs): a plain Arrow IPC stream without an
  end-of-stream marker; no checksums, so only a cut tail is detected.

A reader keeps every record before the first one that is incomplete (a torn tail after
SIGKILL or power loss) or whose checksum fails (corruption), and reports what it dropped.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from reveal.store.layout import TIME_COLUMN

MAGIC = b"RVLJRN\x00\x02"  # "Reveal journal", record format 2
SUFFIX_V2 = ".journal"
SUFFIX_V1 = ".arrows"
JOURNAL_SUFFIXES = (SUFFIX_V2, SUFFIX_V1)
_FRAME = struct.Struct("<II")  # payload length, crc32 of the payload


def frame(payload: bytes) -> bytes:
    """One version-2 record: length and CRC32 of ``payload``, then ``payload``."""
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


@dataclass
class JournalDamage:
    """What a reader dropped from one journal file (sizes in bytes)."""

    file: str
    reason: str  # "truncated", "checksum mismatch", "unreadable record", "not a journal"
    record: int  # index of the first dropped record (0 = the schema)
    offset: int  # byte offset of the first dropped record
    dropped_bytes: int  # from ``offset`` to the end of the file
    kept_records: int
    kept_rows: int

    def describe(self) -> str:
        return (f"journal {self.file}: {self.reason} at record {self.record} (byte "
                f"{self.offset}); kept {self.kept_rows} rows in {self.kept_records} records, "
                f"dropped the last {self.dropped_bytes} bytes")

    def as_dict(self) -> dict[str, object]:
        return {"file": self.file, "reason": self.reason, "record": self.record,
                "offset": self.offset, "dropped_bytes": self.dropped_bytes,
                "kept_records": self.kept_records, "kept_rows": self.kept_rows}


@dataclass
class Journal:
    """The readable content of one journal file."""

    path: Path
    schema: pa.Schema | None  # None when not even the schema could be read
    batches: list[pa.RecordBatch] = field(default_factory=list)
    damage: JournalDamage | None = None

    @property
    def channels(self) -> list[str]:
        if self.schema is None:
            return []
        return [name for name in self.schema.names if name != TIME_COLUMN]

    @property
    def num_rows(self) -> int:
        return sum(b.num_rows for b in self.batches)


def read_journal(path: Path) -> Journal:
    """Every intact record of a journal (either version); ``damage`` says what was dropped.

    Raises ``OSError`` only when the file cannot be opened or read at all.
    """
    if path.name.endswith(SUFFIX_V1):
        return _read_v1(path)
    return _read_v2(path)


def _read_v2(path: Path) -> Journal:
    data = path.read_bytes()
    size = len(data)
    journal = Journal(path, None)

    def damaged(reason: str, record: int, offset: int) -> Journal:
        journal.damage = JournalDamage(path.name, reason, record, offset, size - offset,
                                       len(journal.batches) + (journal.schema is not None),
                                       journal.num_rows)
        return journal

    if not data.startswith(MAGIC):
        if MAGIC.startswith(data):  # cut while the file was being created
            return damaged("truncated", 0, 0) if data else journal
        return damaged("not a journal", 0, 0)
    buffer = pa.py_buffer(data)
    view = memoryview(data)
    offset, record = len(MAGIC), 0
    while offset < size:
        if size - offset < _FRAME.size:
            return damaged("truncated", record, offset)
        length, crc = _FRAME.unpack_from(data, offset)
        start = offset + _FRAME.size
        if start + length > size:
            return damaged("truncated", record, offset)
        if zlib.crc32(view[start:start + length]) != crc:
            return damaged("checksum mismatch", record, offset)
        try:
            message = ipc.read_message(buffer.slice(start, length))
            if journal.schema is None:
                journal.schema = ipc.read_schema(message)
            else:
                journal.batches.append(ipc.read_record_batch(message, journal.schema))
        except (OSError, ValueError, pa.ArrowException):
            return damaged("unreadable record", record, offset)
        offset, record = start + length, record + 1
    return journal


def _read_v1(path: Path) -> Journal:
    journal = Journal(path, None)
    data = path.read_bytes()
    reader_offset = 0
    try:
        reader = ipc.open_stream(pa.BufferReader(pa.py_buffer(data)))
    except (OSError, ValueError, pa.ArrowException):
        if data:
            journal.damage = JournalDamage(path.name, "truncated", 0, 0, len(data), 0, 0)
        return journal
    journal.schema = reader.schema
    while True:
        try:
            journal.batches.append(reader.read_next_batch())
        except StopIteration:
            return journal
        except (OSError, ValueError, pa.ArrowException):
            break
    # Arrow streams carry no offsets: the dropped size is what the kept messages leave.
    reader_offset = len(journal.schema.serialize()) + sum(
        b.serialize().size for b in journal.batches)
    reader_offset = min(reader_offset, len(data))
    journal.damage = JournalDamage(path.name, "truncated", len(journal.batches) + 1,
                                   reader_offset, len(data) - reader_offset,
                                   len(journal.batches) + 1, journal.num_rows)
    return journal


def journal_arrays(journal: Journal) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A journal's rows as (ts_ns int64, block float64 rows × channels, channels)."""
    channels = journal.channels
    if not journal.batches:
        return np.zeros(0, np.int64), np.zeros((0, len(channels))), channels
    assert journal.schema is not None
    table = pa.Table.from_batches(journal.batches, schema=journal.schema)
    ts = table.column(TIME_COLUMN).to_numpy()
    block = np.empty((table.num_rows, len(channels)), dtype=np.float64)
    for i, name in enumerate(channels):
        column = table.column(name).cast(pa.float64()).fill_null(np.nan)
        block[:, i] = column.to_numpy(zero_copy_only=False)
    return ts, block, channels
