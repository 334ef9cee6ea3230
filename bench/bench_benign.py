"""Run the benign-change suite and record its figures in ``bench/results/benign.json``
(and its table in ``benign.md``).

    python bench/bench_benign.py              # all kinds, 90 s baseline + 90 s run each (root)
    python bench/bench_benign.py --quick      # three kinds, 45 s each (≈ 6 min)
    python bench/bench_benign.py --reanalyse DIR   # score a recorded suite again

The result holds the totals (share of windows flagged over all runs and from the activity
on, report episodes, informational kinds flagged), one row per kind, the target and
whether it was met, the wall time, and the machine it ran on (CPUs, load average at the
start: timings on a shared machine are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from provenance import (
    analysis_settings,
    arguments,
    dataclass_settings,
    script_argv,
    write_result,
)
from reveal.inject.benign.suite import (
    BenignOptions,
    reanalyse,
    render_markdown,
    run_benign_suite,
)
from reveal.inject.benign.suite import write_result as write_suite_result
from reveal.inject.cleanup import install_signal_handlers

RESULT = Path(__file__).resolve().parent / "results" / "benign.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep runs and reports here (default: a temporary directory)")
    parser.add_argument("--reanalyse", type=Path, default=None, metavar="DIR",
                        help="record nothing: score the suite recorded in DIR again")
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    install_signal_handlers()
    options = BenignOptions.quick_suite() if args.quick else BenignOptions()
    load = os.getloadavg()
    started = time.monotonic()

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="reveal-bench-") as tmp:
        out = args.out or Path(tmp)
        if args.reanalyse is not None:
            result = reanalyse(args.reanalyse, options, say, reports_to=out / "reports")
        else:
            result = run_benign_suite(options, out, say)
        write_suite_result(result, out)
    bench = {
        "benchmark": "benign", "quick": args.quick,
        "wall_s": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load],
        "targets": result["targets"], "met": result["met"], "total": result["total"],
        "settings": result["settings"], "rows": result["rows"],
        "workloads": result["workloads"], "host": result["host"],
        "kernel": result["kernel"], "started": result["started"],
    }
    write_result(args.result, bench,
                 {**arguments(args), "suite": dataclass_settings(options),
                  "analysis": analysis_settings(options.settings, options.interval_s)},
                 script_argv(__file__, argv), started, default=str)
    args.result.with_suffix(".md").write_text(render_markdown(result), encoding="utf-8")
    print(json.dumps(bench["total"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
