"""Which subsystem each fault's first claim names, replayed from kept live runs.

A kept live scenario (``reveal validate --live --out OUT``, packed with
``bench/recordings.py``) holds the watch's run and the faults it injected
(``events.jsonl``). The model is fitted again with today's code on the run's learn, the
watch's own provisional fit left out as the watch leaves it out
(:func:`bench_learn_own_fit.learned`), so that what the fit now keeps is there. Each fault
is scored from a minute before it to its end, and its first flagged window (one that ends
after the fault began and starts at most a window before it) gives the claim: its first
reason's channel and the window's leading subsystem, against the fault's own. This is the
batch scorer, not the watch's stream: a window can differ by a second from the alert the
live run received, but the claim is made by the same code.

    python bench/bench_first_claims.py bench/recordings/live_via_alertmanager_alone.tar.xz \\
        --result bench/results/first_claims_live.json
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from bench_learn_own_fit import learned
from provenance import arguments, script_argv, write_result
from recordings import kept_parser, name_of, opened
from reveal.store.run_reader import read_run

#: seconds of the run scored before each fault (the windows' history)
LEAD_S = 60.0
#: a window that starts this many seconds before the fault can be its first
WINDOW_S = 3.0


def first_claims(kept: Path) -> dict[str, Any]:
    """The first claim of every fault of one kept live scenario."""
    with opened(kept) as where:
        run = sorted((where / "runs").iterdir())[-1]
        faults = [json.loads(line) for line in
                  (where / "events.jsonl").read_text().splitlines() if line.strip()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model, _ = learned(where)
            rows = []
            for fault in faults:
                part = read_run(run, start_ns=fault["start_ns"] - int(LEAD_S * 1e9),
                                end_ns=fault["end_ns"])
                analysis = model.score_windows(part)
                first = next((e for e in analysis.evidence if e.end_ns > fault["start_ns"]
                              and e.start_ns >= fault["start_ns"] - WINDOW_S * 1e9), None)
                lead = first.reasons[0] if first is not None and first.reasons else None
                named = first.subsystems[0] if first is not None and first.subsystems else None
                rows.append({"kind": fault["kind"], "intensity": fault["intensity"],
                             "subsystem": fault["subsystem"], "claimed": named,
                             "ok": named == fault["subsystem"],
                             "first_s": (round((first.end_ns - fault["start_ns"]) / 1e9, 2)
                                         if first is not None else None),
                             "channel": lead.channel if lead else None,
                             "feature": lead.feature if lead else None})
                print(f"{name_of(kept)} {fault['kind']} {fault['intensity']}: "
                      f"{named} ({fault['subsystem']})", flush=True)
    claimed = [r for r in rows if r["claimed"] is not None]
    return {"recording": name_of(kept), "faults": rows,
            "claimed": len(claimed), "in_subsystem": sum(r["ok"] for r in claimed)}


def main(argv: list[str] | None = None) -> int:
    parser = kept_parser(__doc__)
    args = parser.parse_args(argv)
    started = time.monotonic()
    scenarios = [first_claims(k) for k in args.kept]
    claimed = sum(s["claimed"] for s in scenarios)
    right = sum(s["in_subsystem"] for s in scenarios)
    result = {"benchmark": "first_claims", "lead_s": LEAD_S, "window_s": WINDOW_S,
              "recordings": [s["recording"] for s in scenarios],
              "total": {"faults": sum(len(s["faults"]) for s in scenarios),
                        "claimed": claimed, "in_subsystem": right,
                        "share": round(right / claimed, 3) if claimed else None},
              "scenarios": scenarios}
    write_result(args.result, result, arguments(args), script_argv(__file__, argv), started)
    print(f"first claims in the injected subsystem: {right}/{claimed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
