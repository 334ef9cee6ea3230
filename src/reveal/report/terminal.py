"""The report as a terminal reads it: rich tables fitted to the width, wrapped, in colour
on a terminal; plain text (no colour, no Markdown escapes, ASCII rules) anywhere else.

:func:`render_text` gives the text; callers print it. What it holds, in order: the overview
(run, windows, times), the verdict, the decision (combined threshold, persistence, preset,
self-fit), every warning once, the episodes, then the strongest flagged windows, with a
line for whatever a table leaves out. Every cell is a :class:`rich.text.Text`, never markup:
a tenant's ``[bold]`` in a cgroup name prints as typed, and control characters are removed
(:func:`reveal.report.escape.plain`).
"""

from __future__ import annotations

import io
import os

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from reveal.report.escape import plain
from reveal.report.schema import Report
from reveal.report.text import (
    clock,
    decision_text,
    evidence,
    overview,
    plural,
    shown_episodes,
    shown_windows,
    truncated,
    verdict,
    warnings,
)
from reveal.report.times import span_text

#: Width of plain text (not a terminal) unless ``COLUMNS`` says otherwise.
PLAIN_WIDTH = 120
MIN_WIDTH = 60

SUBSYSTEM_STYLES = {"cpu": "red", "memory": "blue", "storage": "green", "network": "magenta",
                    "gpu": "yellow", "software": "cyan", "unknown": "white"}


def text_width(tty: bool) -> int:
    """Columns to fill: the terminal's on a terminal, else ``COLUMNS`` or
    :data:`PLAIN_WIDTH` (files and pipes get the same text wherever they are written)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), MIN_WIDTH)
    if tty:
        for fd in (1, 2, 0):
            try:
                return max(os.get_terminal_size(fd).columns, MIN_WIDTH)
            except OSError:
                continue
    return PLAIN_WIDTH


def _subsystems(names: list[str], tty: bool) -> Text:
    out = Text()
    for i, name in enumerate(names):
        if i:
            out.append("\n")
        out.append(plain(name, 20), style=SUBSYSTEM_STYLES.get(name, "") if tty else "")
    return out or Text("-")


def _table(tty: bool, title: str) -> Table:
    return Table(title=Text(title, style="bold" if tty else ""), title_justify="left",
                 box=box.ROUNDED if tty else box.ASCII, header_style="bold" if tty else "",
                 show_lines=True, expand=True, pad_edge=True)


def _episodes(report: Report, limit: int, json_path: str | None, tty: bool,
              compact: bool) -> Table:
    c = clock(report)
    shown = shown_episodes(report, limit)
    title = plural(len(report.episodes), "episode").capitalize()
    note = truncated(len(shown), len(report.episodes), "episode", json_path,
                     which="the strongest, in time order")
    table = _table(tty, title + (f": {note}" if note else ""))
    table.add_column("#", justify="right", no_wrap=True)
    if compact:  # fewer, taller columns: the claim keeps its width
        table.add_column("When", min_width=8)
        table.add_column("Windows\npeak", justify="right", no_wrap=True)
    else:
        table.add_column("From", min_width=8)
        table.add_column("Length", min_width=4)
        table.add_column("Windows", justify="right", no_wrap=True)
        table.add_column("Peak", justify="right", no_wrap=True)
    table.add_column("Subsystem", no_wrap=True)
    table.add_column("Claim at the peak", ratio=1, min_width=24)
    for i, e in shown:
        length = span_text((e.end_ns - e.start_ns) / 1e9)
        peak = Text(f"{e.peak_score:.2f}", style="bold" if tty else "")
        cells: list = ([f"{c.at(e.start_ns)}\nfor {length}",
                        Text(f"{len(e.window_ids):,}\n").append_text(peak)] if compact else
                       [c.at(e.start_ns), length, f"{len(e.window_ids):,}", peak])
        table.add_row(str(i), *cells, _subsystems([e.subsystem], tty),
                      Text(plain(e.claim, 400)))
    return table


def _windows(report: Report, limit: int, json_path: str | None, tty: bool,
             compact: bool) -> Table:
    c = clock(report)
    rows = shown_windows(report, limit)
    note = truncated(len(rows), len(report.anomalies), "flagged window", json_path)
    table = _table(tty, "Strongest windows" + (f": {note}" if note else ""))
    if compact:
        table.add_column("Window\ntime", no_wrap=True)
        table.add_column("Score\ndetectors", max_width=10)
    else:
        table.add_column("Window", justify="right", no_wrap=True)
        table.add_column("Time", min_width=8)
        table.add_column("Score", justify="right", no_wrap=True)
        table.add_column("Detectors", min_width=6)
    table.add_column("Subsystems", no_wrap=True)
    table.add_column("Claim", ratio=1, min_width=24, overflow="fold")
    for a in rows:
        claim = Text(plain(a.claim, 400))
        reasons = evidence(a)
        if reasons:
            claim.append("\nReasons: " + "; ".join(plain(r, 120) for r in reasons),
                         style="dim" if tty else "")
        score = Text(f"{a.score:.2f}", style="bold" if tty else "")
        detectors = ", ".join(a.detectors)
        cells: list = ([f"{a.window_id}\n{c.at(a.start_ns)}",
                        score.append("\n" + detectors)] if compact else
                       [str(a.window_id), c.at(a.start_ns), score, detectors])
        table.add_row(*cells, _subsystems(a.subsystems[:2], tty), claim)
    return table


#: Below this width tables merge short columns (window and time, score and detectors).
COMPACT_BELOW = 120


def render_text(report: Report, limit: int = 50, json_path: str | None = None, *,
                tty: bool = False, width: int | None = None) -> str:
    """The report for a terminal (``tty``: colour, rounded rules, the terminal's width) or
    for a pipe or file (plain text, ASCII rules, :data:`PLAIN_WIDTH` columns).

    ``limit``: rows per table at most; ``json_path``: where the JSON report was written
    (None: nowhere), named when a table leaves rows out."""
    out = io.StringIO()
    console = Console(file=out, width=width or text_width(tty), force_terminal=tty,
                      color_system="standard" if tty else None, no_color=not tty,
                      markup=False, emoji=False, highlight=False, soft_wrap=False,
                      legacy_windows=False, force_jupyter=False)
    head, rest = verdict(report)
    console.print(Text(overview(report)))
    said = Text()
    said.append(head, style=("bold green" if report.no_anomaly else "bold red") if tty else "")
    said.append(": " + rest)
    console.print(said)
    if report.decision:
        console.print(Text(decision_text(report), style="dim" if tty else ""))
    for warning in warnings(report):
        console.print(Text("Warning: " + plain(warning, 400), style="yellow" if tty else ""))
    for note in report.steady_states:
        console.print(Text("New steady state: " + plain(note.claim, 600),
                           style="cyan" if tty else ""))
    if not report.no_anomaly:
        compact = console.width < COMPACT_BELOW
        for table in (_episodes(report, limit, json_path, tty, compact),
                      _windows(report, limit, json_path, tty, compact)):
            console.print()
            console.print(table)
    text = out.getvalue()
    if not tty:  # no padding at line ends in files
        text = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    return text
