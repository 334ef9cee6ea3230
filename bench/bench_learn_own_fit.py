"""What a live watch's own model fit inside its learn does to the model: kept live scenarios
learned again, with the watch's provisional fit left out and as it was.

``reveal watch`` learning for 600 s fits a provisional model 200 s in (so that the rest of
the span holds its scoring work), in a child process that keeps one CPU busy for tens of
seconds. Learned with that burst, the baseline's own reach of the CPU busy share covers a
whole CPU more. For each kept scenario (``bench_live_latency.keep``) this fits the learn
span (``settings.baseline_s`` of the suite's ``validate.json``) both ways — the span of the
provisional fit is where the recording shows it keeping the host busier from 2 s after
``rehearsal_start_s`` on, plus the watch's :data:`OWN_FIT_TAIL_S` (:func:`own_fit_span`) —
then scores the rest of the run from the end of the learn's own fit (read the same way), as
the watch does, and counts per fault the windows flagged inside it,
the first flagged window's end from its start, and the windows flagged outside every fault
and its ``settle_s``.

    python bench/bench_learn_own_fit.py bench/recordings/live_six_kinds_a.tar.xz \\
        bench/recordings/live_held_reads.tar.xz bench/recordings/live_six_kinds_c.tar.xz \\
        --result bench/results/learn_own_fit.json
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from recordings import kept_parser, name_of, opened
from reveal.live.keeper import OWN_FIT_TAIL_S, RECOMMENDED_LEARN_S, rehearsal_start_s
from reveal.model import Reveal
from reveal.store.run_reader import read_run

#: the longest the learn's own fit may take (s): the watch scores from its end on
LEARN_FIT_LONGEST_S = 240.0


def _faults(where: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (where / "events.jsonl").read_text().splitlines()
            if line.strip()]


def score(model: Reveal, rest: Any, faults: list[dict[str, Any]],
          settle_s: float) -> dict[str, Any]:
    """Per fault: windows flagged inside it, of how many, and the first flagged window's
    end (s from its start); windows flagged outside every fault and its settle."""
    analysis = model.score_windows(rest)
    start, end = analysis.windows.start_ns, analysis.windows.end_ns
    flagged = np.asarray(analysis.verdicts.flagged, dtype=bool)
    near_any = np.zeros(len(start), dtype=bool)
    rows = []
    for f in faults:
        inside = (start >= f["start_ns"]) & (end <= f["end_ns"])
        near_any |= (end > f["start_ns"]) & (start < f["end_ns"] + settle_s * 1e9)
        hit = np.flatnonzero(inside & flagged)
        rows.append({"kind": f["kind"], "intensity": f["intensity"],
                     "flagged": int(flagged[inside].sum()), "windows": int(inside.sum()),
                     "first_s": (round(float(end[hit[0]] - f["start_ns"]) / 1e9, 2)
                                 if len(hit) else None)})
    clean = ~near_any
    return {"faults": rows, "clean_flagged": int(flagged[clean].sum()),
            "clean_windows": int(clean.sum()),
            "detected": sum(r["flagged"] > 0 for r in rows), "episodes": len(rows)}


#: CPU time states that are work (``/proc/stat`` fields), and all of them
BUSY = ("cpu.user", "cpu.nice", "cpu.system", "cpu.irq", "cpu.softirq")
ALL = (*BUSY, "cpu.idle", "cpu.iowait", "cpu.steal")


def busy_cpus_per_second(tel: Any) -> tuple[np.ndarray, np.ndarray]:
    """Seconds from the recording's start and the CPUs busy in each (host-wide
    ``/proc/stat`` time, the mean over each second)."""
    index = {c: i for i, c in enumerate(tel.channels)}
    cols = [index[c] for c in ALL if c in index]
    busy = [index[c] for c in BUSY if c in index]
    ticks = np.diff(tel.values[:, cols], axis=0)
    share = ticks[:, [cols.index(b) for b in busy]].sum(axis=1) / np.maximum(
        ticks.sum(axis=1), 1e-9)
    cpus = share * float(tel.meta.get("n_cpus") or 1)
    t = (tel.timestamps_ns[1:] - tel.timestamps_ns[0]) / 1e9
    seconds = np.floor(t).astype(int)
    sums = np.bincount(seconds, weights=cpus)
    counts = np.bincount(seconds)
    return np.arange(len(sums), dtype=float), sums / np.maximum(counts, 1)


def own_fit_span(tel: Any, at_s: float, lead_s: float = 60.0, more_cpus: float = 0.5,
                 wait_s: float = 10.0, longest_s: float = 180.0) -> tuple[float, float]:
    """Where the watch's provisional fit, started from ``at_s`` into ``tel``, kept the host
    busier, read from the recording (seconds from its start, and seconds long): from the
    first second within ``wait_s`` whose busy CPUs are ``more_cpus`` over their median of
    the ``lead_s`` before ``at_s`` (the fit keeps a whole CPU busy) while they stay so, plus
    the watch's :data:`OWN_FIT_TAIL_S`; ``(at_s, OWN_FIT_TAIL_S)`` when none is."""
    t, busy = busy_cpus_per_second(tel)
    before = busy[(t >= at_s - lead_s) & (t < at_s)]
    level = float(np.median(before)) if len(before) else 0.0
    busier = busy >= level + more_cpus
    begun = np.flatnonzero(busier & (t >= at_s) & (t < at_s + wait_s))
    if not len(begun):
        return at_s, OWN_FIT_TAIL_S
    first = int(begun[0])
    ends = np.flatnonzero(~busier[first:first + int(longest_s)])
    held = int(ends[0]) if len(ends) else min(int(longest_s), len(busy) - first)
    return float(t[first]), float(held) + OWN_FIT_TAIL_S


def learned(where: Path) -> tuple[Reveal, Path]:
    """The model the watch of an unpacked kept live scenario ``where`` learns, fitted with
    today's code on its run's learn with the provisional fit's span (read from the
    recording) left out; and the run."""
    suite = json.loads((where / "validate.json").read_text())
    learn_s = float(suite.get("settings", {}).get("baseline_s", 600.0))
    run = sorted((where / "runs").iterdir())[-1]
    first = int(read_run(run, end_ns=None).timestamps_ns[0])
    base = read_run(run, start_ns=first, end_ns=first + int(learn_s * 1e9))
    rehearsal = rehearsal_start_s(learn_s, RECOMMENDED_LEARN_S)
    if rehearsal is None:
        return Reveal().fit(base), run
    at_s, seconds = own_fit_span(base, rehearsal + 2.0)
    span = (first + int(at_s * 1e9), first + int((at_s + seconds) * 1e9))
    return Reveal().fit(base, skip_ns=[span]), run


def measure(kept: Path, own_fit: tuple[float, float] | None = None) -> dict[str, Any]:
    """Both learns of one kept live scenario, scored on the rest of its run; ``own_fit``:
    the provisional fit's start and length in seconds (None: read from the recording,
    :func:`own_fit_span`; a result is made again with the span it stored)."""
    with opened(kept) as where:
        suite = json.loads((where / "validate.json").read_text())
        settings = suite.get("settings", {})
        learn_s = float(settings.get("baseline_s", 600.0))
        settle_s = float(settings.get("settle_s", 10.0))
        run = sorted((where / "runs").iterdir())[-1]
        faults = _faults(where)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            whole = read_run(run)
            first = int(whole.timestamps_ns[0])
            learn_end = first + int(learn_s * 1e9)
            base = read_run(run, start_ns=first, end_ns=learn_end)
            # the watch scores from the end of the learn's own fit (it keeps a CPU busy)
            fit_at, fit_s = own_fit_span(whole, learn_s, longest_s=LEARN_FIT_LONGEST_S)
            scored_from_s = fit_at + fit_s
            rest = read_run(run, start_ns=first + int(scored_from_s * 1e9))
        rehearsal = rehearsal_start_s(learn_s, RECOMMENDED_LEARN_S)
        if rehearsal is None:
            raise SystemExit(f"{kept}: a {learn_s:g} s learn holds no provisional fit")
        at_s, seconds = (own_fit if own_fit is not None
                         else own_fit_span(base, rehearsal + 2.0))
        span = (first + int(at_s * 1e9), first + int((at_s + seconds) * 1e9))
        out: dict[str, Any] = {"recording": name_of(kept), "learn_s": learn_s,
                               "scored_from_s": scored_from_s,
                               "provisional_fit": {"at_s": at_s, "seconds": seconds}}
        for name, skip in (("as_learned", []), ("own_fit_left_out", [span])):
            model = Reveal().fit(base, skip_ns=skip)
            out[name] = {"baseline_windows": int(model.fitted_.baseline_windows),
                         **score(model, rest, faults, settle_s)}
            print(f"{name_of(kept)} {name}: {out[name]['detected']}/{len(faults)} faults, "
                  f"clean {out[name]['clean_flagged']}/{out[name]['clean_windows']}",
                  flush=True)
        return out


def figures(scenarios: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every scenario, both ways: faults with a flagged window, clean windows flagged,
    and the low CPU contentions' flagged share."""
    total: dict[str, Any] = {}
    for name in ("as_learned", "own_fit_left_out"):
        rows = [r for s in scenarios for r in s[name]["faults"]]
        low_cpu = [r for r in rows if r["kind"] == "cpu_contention" and r["intensity"] == "low"]
        total[name] = {
            "detected": sum(r["flagged"] > 0 for r in rows), "episodes": len(rows),
            "clean_flagged": sum(s[name]["clean_flagged"] for s in scenarios),
            "clean_windows": sum(s[name]["clean_windows"] for s in scenarios),
            "low_cpu_contention_flagged": sum(r["flagged"] for r in low_cpu),
            "low_cpu_contention_windows": sum(r["windows"] for r in low_cpu)}
    return total


def main(argv: list[str] | None = None) -> int:
    parser = kept_parser(__doc__)
    args = parser.parse_args(argv)
    started = time.monotonic()
    scenarios = [measure(k) for k in args.kept]
    result = {"benchmark": "learn_own_fit",
              "own_fit_tail_s": OWN_FIT_TAIL_S,
              "recordings": [s["recording"] for s in scenarios],
              "total": figures(scenarios), "scenarios": scenarios}
    write_result(args.result, result, arguments(args), script_argv(__file__, argv), started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
