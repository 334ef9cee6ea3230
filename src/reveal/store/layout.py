"""Paths and metadata of a run directory (see docs/run-format.md)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from reveal.errors import InputError
from reveal.jsonfile import read_format_json

FORMAT_NAME = "reveal-run"
#: Version written. 2: journals are ``NNNNNN.journal`` files of checksummed records and
#: segments carry Parquet page checksums; version 1 runs (Arrow IPC ``.arrows`` journals)
#: read the same way.
FORMAT_VERSION = 2
#: Versions this Reveal reads.
READABLE_VERSIONS = (1, 2)
META_FILE = "meta.json"
#: Space the collector keeps so its final ``meta.json`` can be written on a full disk.
META_RESERVE_FILE = "meta.reserve"
SEGMENTS_DIR = "segments"
JOURNAL_DIR = "journal"
EVENTS_FILE = "events.jsonl"
TIME_COLUMN = "ts_ns"


def segment_path(run: Path, number: int) -> Path:
    return run / SEGMENTS_DIR / f"{number:06d}.parquet"


def journal_path(run: Path, number: int) -> Path:
    """The journal file ``number`` as this version writes it (``NNNNNN.journal``)."""
    return run / JOURNAL_DIR / f"{number:06d}.journal"


def file_number(path: Path) -> int:
    """The number a segment or journal file is named after (-1 when it has none)."""
    head = path.name.split(".", 1)[0]
    return int(head) if head.isdigit() else -1


def data_bytes(run: Path) -> int:
    """Bytes of recorded data on disk: the sizes of every segment and journal file."""
    total = 0
    for folder in (SEGMENTS_DIR, JOURNAL_DIR):
        try:
            entries = list(os.scandir(run / folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue  # removed meanwhile (a journal whose segment was written)
    return total


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename (never a half-written file)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_meta(run: Path) -> dict[str, Any]:
    """Read ``meta.json``; a missing file is an error, a bad one names the problem."""
    path = run / META_FILE
    if not path.is_file():
        raise InputError("not a run directory (no meta.json)", str(run))
    meta = read_format_json(path, FORMAT_NAME, "metadata", "metadata file")
    version = meta.get("version")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        understood = ", ".join(str(v) for v in READABLE_VERSIONS)
        raise InputError(f"run format version {json.dumps(version)[:40]} is not one this "
                         f"Reveal reads ({understood})", str(path))
    return meta


def write_meta_file(run: Path, meta: dict[str, Any], final: bool = False) -> None:
    """Write ``meta.json`` atomically, then keep a reserve of space for the final write.

    While recording, a reserve file (:data:`META_RESERVE_FILE`, a few times the size of
    ``meta.json``, at least 64 KiB) is kept beside it. The final write (``final``) gives
    the reserve back when the disk is full and tries once more, so a full disk still gets
    ``closed: true`` written; then the reserve is removed. Raises the ``OSError`` of a
    write that failed even so.
    """
    path = run / META_FILE
    reserve = run / META_RESERVE_FILE
    try:
        write_json_atomic(path, meta)
    except OSError:
        with contextlib.suppress(OSError):
            path.with_name(path.name + ".tmp").unlink()
        if not final or not reserve.exists():
            raise
        reserve.unlink()  # the space kept for this moment
        try:
            write_json_atomic(path, meta)
        except OSError:
            with contextlib.suppress(OSError):
                path.with_name(path.name + ".tmp").unlink()
            raise
    if final:
        with contextlib.suppress(OSError):
            reserve.unlink()
        return
    _keep_reserve(reserve, max(1 << 16, 4 * path.stat().st_size))


def _keep_reserve(reserve: Path, size: int) -> None:
    """Grow ``reserve`` to ``size`` bytes of written zeros (as far as space allows)."""
    size = -(-size // 4096) * 4096
    try:
        have = reserve.stat().st_size
    except OSError:
        have = 0
    if have >= size:
        return
    with contextlib.suppress(OSError), open(reserve, "ab") as handle:
        handle.write(b"\0" * (size - have))  # real blocks, not a sparse file
        handle.flush()
        os.fsync(handle.fileno())


def read_events(run: Path) -> list[dict[str, Any]]:
    """Ground-truth events of a run (empty when there is no events.jsonl)."""
    path = run / EVENTS_FILE
    if not path.is_file():
        return []
    events = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"line {lineno}: bad JSON ({exc.msg})", str(path)) from None
    return events
