"""Run the validation suite and record its figures in ``bench/results/validate.json`` (and
its table in ``validate.md``).

    python bench/bench_validate.py            # full suite (≈ 20–30 min, root)
    python bench/bench_validate.py --quick    # the ≤ 5 min subset

The result holds the totals (episode recall, median time to detect, attribution accuracy,
clean windows flagged), the per-fault rows, the targets and whether each was met, the
wall time of the whole suite, and the machine it ran on. Timings on a shared machine are
noisy: the file says how many CPUs there were and the load average at the start.
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
from reveal.inject.cleanup import install_signal_handlers
from reveal.inject.validation import SuiteOptions, render_markdown, run_suite
from reveal.inject.validation import write_result as write_suite_result

RESULT = Path(__file__).resolve().parent / "results" / "validate.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep runs and reports here (default: a temporary directory)")
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    install_signal_handlers()
    options = SuiteOptions.quick_suite() if args.quick else SuiteOptions()
    load = os.getloadavg()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reveal-bench-") as tmp:
        out = args.out or Path(tmp)
        result = run_suite(options, out, lambda m: print(m, file=sys.stderr, flush=True))
        write_suite_result(result, out)
    bench = {
        "benchmark": "validate", "quick": args.quick,
        "wall_s": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load],
        "targets": result["targets"], "met": result["met"],
        "total": result["summary"]["total"], "rows": result["summary"]["rows"],
        "misses": [e for e in result["episodes"] if not (e["detected"] and e["attribution_ok"])],
        "skipped": result["skipped"], "workloads": result["workloads"],
        "host": result["host"], "kernel": result["kernel"], "started": result["started"],
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
