"""When a live watch scores a fault's windows: a kept live scenario replayed through the
watch's own scorer, with the model it learned.

``reveal validate --live`` measures fault start → alert received at a webhook; that time is
the window's length and persistence, plus how long the watch waits before it scores a closed
window (``--score-every``, and at once when the look between calls sees a change,
``LiveScorer.change_seen``), plus delivery. This replays the recording of such a run with
today's code and the watch's own model, row by row as the collector hands them over, and
says for each fault when the first window above the threshold closed and when it was
scored, and the same for the first flagged window (an alert opens then), for every phase
of the scoring batches, with the look between calls and without it (``batches_only``):
how much of the live time was the scorer waiting, re-measurable on the kept recording.

    python bench/bench_live_latency.py bench/recordings/live_oom_early.tar.xz \\
        --result bench/results/live_latency_oom.json

A kept live scenario (``bench/recordings.py``) holds the run (``runs/``), the watch's
``model.reveal``, the faults' ``events.jsonl`` and the suite's ``validate.json``:
:func:`keep` makes one from ``reveal validate --live --out OUT`` (``OUT/live/NAME``).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from recordings import kept_parser, name_of, opened, pack
from reveal.live.scorer import LiveScorer, replay
from reveal.model import Reveal, load_source

#: seconds of the recording replayed before a fault's start (the scorer's history fills)
LEAD_S = 40.0
#: seconds replayed after it
AFTER_S = 25.0


def keep(out: Path, archive: Path, scenario: str = "single") -> Path:
    """Pack the live scenario ``scenario`` of ``reveal validate --live --out OUT`` into
    ``archive``: its run, model, fault events, alerts and the suite's result."""
    live = out / "live" / scenario
    with tempfile.TemporaryDirectory(prefix="reveal-live-keep-") as tmp:
        stage = Path(tmp)
        shutil.copytree(live / "state" / "runs", stage / "runs")
        for source in (live / "state" / "model.reveal", live / "events.jsonl",
                       live / "state" / "alerts.json", out / "validate.json"):
            shutil.copy2(source, stage / source.name)
        return pack(stage, archive)


def fault_latency(model: Reveal, tel: Any, fault: dict[str, Any], score_every: int,
                  early: bool) -> dict[str, Any]:
    """The replayed times (seconds from ``fault``'s start) at which its first window above
    the threshold and its first flagged window closed and were scored, for each phase of
    the scoring batches (a watch's batches fall where its scoring began: the replay starts
    on each of ``score_every`` consecutive windows in turn), and the slowest of them."""
    ts = tel.timestamps_ns
    scorer = LiveScorer(model)  # where each window closes (the same in every slice)
    stride = scorer.stride
    # a slice starting on the recording's own window grid (multiples of the stride)
    base = int(np.searchsorted(ts, fault["start_ns"] - LEAD_S * 1e9))
    base -= base % stride
    last = int(np.searchsorted(ts, fault["start_ns"] + AFTER_S * 1e9))
    out: dict[str, Any] = {"kind": fault["kind"], "intensity": fault["intensity"]}
    for name in ("above", "flagged"):
        out[name] = {"closed_s": [], "scored_s": [], "claim": None}
    for phase in range(score_every):
        part = tel.slice_rows(base + phase * stride, last)
        at: list[int] = []
        windows = replay(model, part, chunk_rows=1, score_every=score_every, early=early,
                         scored_at=at)

        def offset(row: int, part: Any = part) -> float:
            return round(float(part.timestamps_ns[min(row, part.n_samples) - 1]
                               - fault["start_ns"]) / 1e9, 2)

        for name, test in (("above", lambda w: w.above), ("flagged", lambda w: w.flagged)):
            hit = next((i for i, w in enumerate(windows)
                        if test(w) and w.end_ns > fault["start_ns"]
                        and w.start_ns < fault["end_ns"]), None)
            if hit is None:
                continue
            out[name]["closed_s"].append(offset(scorer.rows_of(windows[hit].window_id)[1]))
            out[name]["scored_s"].append(offset(at[hit]))
            out[name]["claim"] = out[name]["claim"] or windows[hit].claim
    for name in ("above", "flagged"):
        scored = out[name]["scored_s"]
        out[name]["slowest_scored_s"] = max(scored) if scored else None
    return out


def measure(kept: Path, score_every: int) -> dict[str, Any]:
    """Every fault of the kept live scenario at ``kept``, replayed with and without the
    look between scoring calls."""
    with opened(kept) as where:
        model = Reveal.load(where / "model.reveal")
        run = next(p for p in sorted((where / "runs").iterdir()) if p.is_dir())
        tel = load_source(run)
        faults = [json.loads(line) for line in
                  (where / "events.jsonl").read_text().splitlines() if line.strip()]
        suite = json.loads((where / "validate.json").read_text())
    live = {(r["kind"], r["intensity"]): r.get("median_alert_s")
            for r in suite["summary"]["rows"]}
    rows = []
    for fault in faults:
        row = {**fault_latency(model, tel, fault, score_every, early=True),
               "batches_only": fault_latency(model, tel, fault, score_every, early=False),
               "live_alert_s": live.get((fault["kind"], fault["intensity"]))}
        rows.append(row)
        print(f"{fault['kind']} ({fault['intensity']}): first flagged window scored "
              f"{row['flagged']['scored_s']} s in (by phase), batches only "
              f"{row['batches_only']['flagged']['scored_s']} s; live alert "
              f"{row['live_alert_s']} s", file=sys.stderr)
    return {"recording": name_of(kept), "suite_started": suite.get("started"),
            "suite_settings": suite.get("settings"), "faults": rows}


def figures(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures ``bench/rescore.py`` compares: per kept scenario and fault, the slowest
    phase's time to score its first window above the threshold and its first flagged window,
    with the look and by batches alone (None: no such window)."""
    out: dict[str, Any] = {}
    for scenario in scenarios:
        for fault in scenario["faults"]:
            where = f"{scenario['recording']}:{fault['kind']}-{fault['intensity']}"
            for name in ("above", "flagged"):
                out[f"{where}:{name}_scored_s"] = fault[name]["slowest_scored_s"]
                out[f"{where}:batches_only_{name}_scored_s"] = \
                    fault["batches_only"][name]["slowest_scored_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = kept_parser(__doc__)
    parser.add_argument("--score-every", type=int, default=5,
                        help="windows per scoring call, as the watch's --score-every "
                             "(default 5)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    scenarios = [measure(k, args.score_every) for k in args.kept]
    result = {"benchmark": "live_latency", "lead_s": LEAD_S, "after_s": AFTER_S,
              "score_every": args.score_every,
              "recordings": [s["recording"] for s in scenarios],
              "total": figures(scenarios), "scenarios": scenarios}
    write_result(args.result, result, arguments(args), script_argv(__file__, argv), started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
