"""``reveal report``: render a saved JSON report again, as a self-contained HTML page."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from reveal.errors import InputError
from reveal.paths import check_writable_file
from reveal.report.escape import plain
from reveal.report.html import render_html
from reveal.report.schema import Report
from reveal.store.sources import open_source


def read_report(path: str | Path) -> tuple[Any, list[Any]]:
    """The :class:`Report` saved at ``path`` and the injected faults it lists (a demo's
    ``injected``); one-line :class:`InputError` for a missing, truncated or foreign file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, not a JSON report", str(path)) from None
    except UnicodeDecodeError:
        raise InputError("not a JSON report (not UTF-8 text)", str(path)) from None
    if not text.strip():
        raise InputError("empty file, not a JSON report", str(path))
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        # the text ends where a value, or a string still open, wanted more
        near_end = (exc.pos >= len(text.rstrip()) - 1
                    or exc.msg.startswith("Unterminated string"))
        what = "truncated JSON" if near_end else f"not valid JSON ({exc.msg}, line {exc.lineno})"
        raise InputError(f"{what}: not a complete Reveal report", str(path)) from None
    try:
        report = Report.from_dict(payload)
    except InputError as exc:
        raise InputError(str(exc), str(path)) from None
    faults = []
    for f in payload.get("injected") or []:
        if isinstance(f, dict) and {"start_ns", "end_ns"} <= f.keys():
            faults.append(SimpleNamespace(kind=str(f.get("kind", "fault")),
                                          intensity=str(f.get("intensity", "")),
                                          start_ns=int(f["start_ns"]), end_ns=int(f["end_ns"])))
    return report, faults


def write_html(text: str, out: str | Path) -> Path:
    """Write ``text`` to ``out`` atomically (a partial page never replaces a whole one),
    with the permissions ``out`` has, or a new file's."""
    out = Path(out)
    if out.exists():
        mode = out.stat().st_mode & 0o777
    else:  # what a plain open() would give: 0666 less the umask
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def run(args: argparse.Namespace) -> int:
    if args.baseline and not args.run:
        raise InputError("--baseline draws a band beside the run's traces: give --run too")
    check_writable_file(args.html)
    report, faults = read_report(args.report)

    telemetry = open_source(args.run) if args.run else None
    baseline = open_source(args.baseline) if args.baseline else None
    if telemetry is not None and telemetry.host != report.run.get("host"):
        print(f"reveal report: warning: --run is from host {plain(telemetry.host, 80)!r}, "
              f"the report from {plain(str(report.run.get('host')), 80)!r}", file=sys.stderr)
    page = render_html(report, telemetry, baseline, faults, title=args.title)
    out = write_html(page, args.html)
    print(f"report: {out} ({len(page.encode()) / 1e6:.1f} MB)")
    return 0
