"""Paths and metadata of a run directory (see docs/run-format.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from reveal.errors import InputError

FORMAT_NAME = "reveal-run"
FORMAT_VERSION = 1
META_FILE = "meta.json"
SEGMENTS_DIR = "segments"
JOURNAL_DIR = "journal"
EVENTS_FILE = "events.jsonl"
TIME_COLUMN = "ts_ns"


def segment_path(run: Path, number: int) -> Path:
    return run / SEGMENTS_DIR / f"{number:06d}.parquet"


def journal_path(run: Path, number: int) -> Path:
    return run / JOURNAL_DIR / f"{number:06d}.arrows"


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
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable metadata ({exc})", str(path)) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise InputError(f"not a {FORMAT_NAME} metadata file", str(path))
    if int(meta.get("version", 0)) > FORMAT_VERSION:
        raise InputError(f"run format version {meta.get('version')} is newer than this "
                         f"Reveal reads ({FORMAT_VERSION})", str(path))
    return meta


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
