"""``reveal demo``: the main job on a fresh machine, end to end in about three minutes.

Starts the reference training job, records a clean baseline with the real collector, then
a run with a CPU-contention and a disk-burst episode at known times, analyses it with
detectors fitted on the baseline, prints the anomaly table and writes a report directory
(report.md, report.json, PNG figures, and report.html: the same as one interactive page).

Run again with the same ``--out``, it keeps the earlier report and writes the new one to the
first free ``DIR-2``, ``DIR-3``... (saying so); ``--force`` replaces the report in DIR.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reveal.analysis.derive import derive
from reveal.analysis.presets import TELEMETRY, with_overrides
from reveal.catalog import default_catalog
from reveal.commands.report import write_html
from reveal.errors import InputError, RevealError
from reveal.inject.cleanup import install_signal_handlers
from reveal.inject.scenario import EpisodePlan, Scenario, run_scenario
from reveal.inject.scoring import score_report
from reveal.inject.validation import host_state, host_text
from reveal.model import Reveal, report_run
from reveal.paths import check_writable_dir, check_writable_file
from reveal.report.html import render_html
from reveal.report.markdown_dir import write_report_dir
from reveal.report.terminal import render_text
from reveal.settings import parse_sets
from reveal.store.run_reader import read_run

#: what ``reveal demo`` writes into its directory: all that ``--force`` removes
WRITTEN = frozenset({"runs", "report.md", "report.json", "report.html", "timeline.png",
                     "subsystems.png", "traces"})


def _is_free(path: Path) -> bool:
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


def choose_out(out: Path, force: bool, notice: Callable[[str], None]) -> Path:
    """The directory this demo writes: ``out`` when free; with ``force`` ``out`` emptied
    of an earlier demo's report (refused when it holds anything else); else the first free
    ``out-2``, ``out-3``... Checks that the directory chosen can be written."""

    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a directory", str(out))
    if _is_free(out):
        return check_writable_dir(out)
    if force:
        check_writable_dir(out)
        foreign = sorted(p.name for p in out.iterdir() if p.name not in WRITTEN)
        if foreign:
            raise InputError(f"holds files reveal demo did not write ({', '.join(foreign[:3])}"
                             f"{', ...' if len(foreign) > 3 else ''}); not replacing it",
                             str(out))
        for entry in out.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        notice(f"reveal demo: replacing the earlier report in {out} (--force)")
        return out
    for n in itertools.count(2):
        candidate = out.with_name(f"{out.name}-{n}")
        if _is_free(candidate):
            check_writable_dir(candidate)
            notice(f"reveal demo: {out} already holds a report; this one goes to {candidate} "
                   f"(--force replaces the one in {out})")
            return candidate
    raise AssertionError("unreachable")


def _closest(report: Any, episode: Any) -> str:
    """"closest: 0.92 of the threshold" — the highest combined score of the windows over
    ``episode`` against the combined threshold."""
    table = report.windows
    inside = ((np.asarray(table.start_ns) < episode.end_ns)
              & (np.asarray(table.end_ns) > episode.start_ns))
    threshold = float(report.decision.get("combined_threshold", 0.0))
    if not inside.any() or not threshold > 0:
        return "no window scored over it"
    peak = float(np.nanmax(np.asarray(table.combined, dtype=float)[inside]))
    return f"closest: {peak / threshold:.2f} of the threshold"


#: Seconds of samples beyond the windows themselves: the first sample has no rate, and the
#: collector's first and last ticks may fall outside the recorded span.
BASELINE_MARGIN_S = 10.0


def baseline_seconds() -> float:
    """The shortest baseline (seconds) whose windows are enough to place the threshold
    (the analysis warns below ``min_baseline_windows`` windows)."""
    window = TELEMETRY.window
    return ((TELEMETRY.min_baseline_windows - 1) * window.stride_s + window.size_s
            + BASELINE_MARGIN_S)


def run(args: argparse.Namespace) -> int:
    if args.duration < 30:
        raise RevealError("--duration must be at least 30 seconds")
    if args.html is not None:
        check_writable_file(args.html)
    args.out = choose_out(args.out, args.force,
                          lambda line: print(line, file=sys.stderr, flush=True))

    settings = parse_sets(args.settings)
    with_overrides(TELEMETRY, settings)  # a wrong name fails now, not after the recording
    install_signal_handlers()

    def say(message: str) -> None:
        if not args.quiet:
            print(f"reveal demo: {message}", file=sys.stderr, flush=True)

    d = float(args.duration)
    episode_s = max(8.0, round(d / 6))
    plans = [[EpisodePlan("cpu_contention", "high", round(0.2 * d), episode_s),
              EpisodePlan("disk_burst", "high", round(0.6 * d), episode_s)]]
    scenario = Scenario("demo", False, max(d, baseline_seconds()), d, plans)
    recorded = run_scenario(scenario, args.out / "runs", say, args.workload)
    faulted = recorded.runs[0]
    say("analysing")
    run_tel, base_tel = read_run(faulted.path), read_run(recorded.baseline)
    report = report_run(run_tel, base_tel, model=Reveal(overrides=settings or None))
    scores, _ = score_report(report, faulted.episodes, run=str(faulted.path))
    catalog = default_catalog()
    run_derived, base_derived = derive(run_tel, catalog)[0], derive(base_tel, catalog)[0]
    title = f"Reveal demo: {recorded.workload} with injected faults"
    written = write_report_dir(report, args.out, run_derived, base_derived, faulted.episodes,
                               scores, title=title)
    written["html"] = write_html(render_html(report, run_derived, base_derived,
                                             faulted.episodes, title=title),
                                 args.html or args.out / "report.html")
    print(render_text(report, json_path=str(written["json"]), tty=sys.stdout.isatty()))
    for score, episode in zip(scores, faulted.episodes, strict=True):
        verdict = (f"detected after {score.ttd_s:.1f} s, attributed to {score.attributed}"
                   if score.detected else "not detected")
        if not score.detected:  # how close it came, and what the host was doing meanwhile
            verdict += f" ({_closest(report, episode)}"
            host = host_text(host_state(run_tel, base_tel, episode))
            verdict += f"; host meanwhile: {host}, baseline in brackets)" if host else ")"
        print(f"injected {score.kind} ({score.intensity}): {verdict}")
    print(f"report: {written['md']} (+ report.json and figures in {args.out})")
    print(f"HTML report: {written['html']}")
    return 0
