"""How long the watch keeps its recordings, and what it keeps of them around alerts.

Every ``RETENTION_EVERY_S`` the watch prunes its ``runs/`` (:func:`prune`): the oldest
finished recordings go once they are older than ``retain_s`` or the recordings together
exceed ``retain_bytes``; before one goes, its segments within :data:`ALERT_MARGIN_S` of an
alert episode are copied to ``kept/RUN`` (a run directory ``reveal analyze`` reads), and
those copies go after ``retain_alerts_s``. The recording being written is never touched.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reveal.errors import InputError
from reveal.live.alerts import Episode
from reveal.store.layout import META_FILE
from reveal.store.run_reader import open_run

#: data kept around every alert episode when its recording is removed (seconds each side)
ALERT_MARGIN_S = 300.0


@dataclass(frozen=True)
class Retention:
    """What is kept: recordings for ``retain_s`` seconds and at most ``retain_bytes``
    bytes; the data around alerts for ``retain_alerts_s`` seconds."""

    retain_s: float = 86400.0
    retain_bytes: int = 2 << 30
    retain_alerts_s: float = 30 * 86400.0


def prune(runs_dir: Path, kept_dir: Path, current: Path | None,
          episodes: Sequence[Episode], policy: Retention,
          notify: Callable[[str, str], None]) -> None:
    """Remove the oldest finished recordings of ``runs_dir`` beyond ``policy`` (``current``,
    the one being written, stays); the segments within :data:`ALERT_MARGIN_S` of one of
    ``episodes`` are first copied to ``kept_dir/RUN``, removed after
    ``policy.retain_alerts_s``. A recording whose alert data cannot be copied is kept, and
    said so through ``notify``."""
    runs = sorted((p for p in runs_dir.iterdir() if p.is_dir()),
                  key=lambda p: p.stat().st_mtime)
    sizes = {p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in runs}
    total = sum(sizes.values())
    now = time.time()
    for p in runs:
        if p == current:
            continue
        old = now - p.stat().st_mtime > policy.retain_s
        if old or total > policy.retain_bytes:
            try:
                keep_alert_data(p, kept_dir, episodes)
            except (OSError, InputError) as exc:
                notify("warning", f"{p}: the data around its alerts could not be "
                                  f"kept ({exc}); the recording is kept instead")
                continue
            shutil.rmtree(p, ignore_errors=True)
            total -= sizes[p]
    if kept_dir.is_dir():
        for p in kept_dir.iterdir():
            if now - p.stat().st_mtime > policy.retain_alerts_s:
                shutil.rmtree(p, ignore_errors=True)


def keep_alert_data(run: Path, kept_dir: Path, episodes: Sequence[Episode]) -> None:
    """Copy the segments of ``run`` within :data:`ALERT_MARGIN_S` of one of ``episodes``
    to ``kept_dir/RUN`` (with its meta.json): ``reveal analyze`` reads it as a run."""
    if not episodes:
        return

    meta = json.loads((run / META_FILE).read_text(encoding="utf-8"))
    offset = int(meta.get("wall_offset_ns") or 0)
    margin = int(ALERT_MARGIN_S * 1e9)
    spans = [(ep.start_ns + ep.wall_offset_ns - margin, ep.end_ns + ep.wall_offset_ns
              + margin) for ep in episodes]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        reader = open_run(run)
    chosen = []
    for source in reader.sources:
        lows = [g.ts_min for g in source.groups if g.ts_min is not None]
        highs = [g.ts_max for g in source.groups if g.ts_max is not None]
        if source.journal is not None or not lows:
            chosen.append(source.path)  # a journal left by a kill: small, kept whole
            continue
        lo, hi = min(lows) + offset, max(highs) + offset
        if any(lo <= b and a <= hi for a, b in spans):
            chosen.append(source.path)
    if not chosen:
        return
    target = kept_dir / run.name
    for path in chosen:
        dest = target / path.relative_to(run)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    shutil.copy2(run / META_FILE, target / META_FILE)
