"""The test suite's wall time, as a user runs it: ``bash scripts/test.sh``.

Runs the README's test command (its install step included, as on a clean clone when
``--clone`` is given) and records the wall time of the whole command and
of each part (alone, then parallel: see ``scripts/test.sh``), the tests passed, failed and
skipped in each, and the 20 slowest tests, from the parts' JUnit XML. The target is 15
minutes of wall time on the 2-core machine.

    python bench/bench_suite.py [--result bench/results/suite_time.json] [--workers 4]
    python bench/bench_suite.py --clone DIR   # in a clean clone of this commit made at DIR
    python bench/bench_suite.py --clone DIR --ci   # CI's command (.ci/run) there
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from provenance import ROOT, arguments, script_argv, write_result

RESULT = ROOT / "bench" / "results" / "suite_time.json"
TARGET_S = 15 * 60.0
#: Characters of each failed test's message and traceback kept in the result (its end).
FAILURE_CHARS = 3000


def junit_figures(path: Path) -> dict[str, Any]:
    """Counts, summed test time (s), the 20 slowest tests, every module's summed time
    (s, slowest first: where a cut pays) and what each failed test said (the last
    :data:`FAILURE_CHARS` characters, so that a failure seen once can be read again) from
    one part's JUnit XML."""
    if not path.is_file():
        return {"present": False}
    tree = ET.parse(path)
    tests = []
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    failures = []
    for case in tree.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        seconds = float(case.get("time") or 0.0)
        tests.append((seconds, name))
        failure, error = case.find("failure"), case.find("error")
        said = failure if failure is not None else error
        if said is not None:
            text = f"{said.get('message') or ''}\n{said.text or ''}".strip()
            failures.append({"test": name, "said": text[-FAILURE_CHARS:]})
        if failure is not None:
            counts["failed"] += 1
        elif error is not None:
            counts["errors"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    tests.sort(reverse=True)
    modules: dict[str, list[float]] = {}
    for seconds, name in tests:
        modules.setdefault(name.split("::")[0], []).append(seconds)
    by_module = sorted(((sum(t), len(t), m) for m, t in modules.items()), reverse=True)
    return {"present": True, **counts, "tests": len(tests),
            "test_seconds": round(sum(t for t, _ in tests), 1),
            "slowest": [{"test": n, "s": round(t, 1)} for t, n in tests[:20]],
            "modules": [{"module": m, "tests": n, "s": round(t, 1)} for t, n, m in by_module],
            "failures": failures}


def cpu_ticks() -> tuple[int, int]:
    """This host's (idle + iowait, all) CPU time since boot from /proc/stat (clock ticks)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])  # guest time is within user time


def idle_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of this host's CPU time that was idle between two :func:`cpu_ticks`."""
    total = after[1] - before[1]
    return round((after[0] - before[0]) / total, 3) if total > 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--result", type=Path, default=RESULT)
    parser.add_argument("--workers", type=int, default=None,
                        help="REVEAL_TEST_WORKERS: 0 for one serial pytest, N for the "
                             "two parts on N workers (default: the script's own)")
    parser.add_argument("--clone", type=Path, default=None,
                        help="make a clean clone of this commit here and run in it (with "
                             "../shared beside it, as CI does)")
    parser.add_argument("--ci", action="store_true",
                        help="run CI's command (.ci/run: every component required, nothing "
                             "from the environment loosening the skip guard) instead of "
                             "scripts/test.sh")
    args = parser.parse_args(argv)
    command = [".ci/run"] if args.ci else ["scripts/test.sh"]
    where = ROOT
    if args.clone is not None:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(args.clone)], check=True)
        shared = ROOT.parent / "shared"
        if shared.is_dir() and not (args.clone.parent / "shared").exists():
            (args.clone.parent / "shared").symlink_to(shared)
        where = args.clone
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_ADDOPTS", "REVEAL_ALLOW_SKIPS")}
    if args.workers is not None:
        env["REVEAL_TEST_WORKERS"] = str(args.workers)
    started = time.monotonic()
    ticks_before = cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="reveal-suite-") as junit:
        env["REVEAL_TEST_JUNIT"] = junit
        log = Path(junit) / "test.log"
        with open(log, "w") as handle:
            done = subprocess.run(["bash", *command], cwd=where, env=env,
                                  stdout=handle, stderr=subprocess.STDOUT, check=False)
        wall = time.monotonic() - started
        idle_share = idle_between(ticks_before, cpu_ticks())
        parts = {name: junit_figures(Path(junit) / f"{name}.xml")
                 for name in ("alone", "parallel", "all")}
        lines = log.read_text(errors="replace").splitlines()
        tail = lines[-40:]
        told = [line for line in lines if line.startswith("== part 2: the rest, ")]
        part_walls = {m.group(1): int(m.group(2)) for m in map(
            re.compile(r"== part (\w+) took (\d+) s").fullmatch, lines) if m}
    parts = {k: {**v, "wall_s": part_walls.get(k)} for k, v in parts.items() if v["present"]}
    passed = sum(p["passed"] for p in parts.values())
    # the number the script chose (it says so), else what was asked of it
    workers: int | str = (int(told[0].split(", ")[1].split()[0]) if told
                          else env.get("REVEAL_TEST_WORKERS", "the script's default"))
    result = {"benchmark": "suite_time", "command": " ".join(command),
              "exit_code": done.returncode, "workers": workers,
              "wall_s": round(wall, 1), "target_s": TARGET_S, "met": wall <= TARGET_S,
              "cpu_idle_share": idle_share,
              "passed": passed, "failed": sum(p["failed"] + p["errors"] for p in parts.values()),
              "skipped": sum(p["skipped"] for p in parts.values()),
              "parts": parts, "log_tail": tail}
    write_result(args.result, result, {**arguments(args), "where": str(where)},
                 script_argv(__file__, argv), started, repo=Path(where))  # the code that ran
    print(f"suite: {wall:.0f} s wall (target {TARGET_S:.0f} s), {passed} passed, "
          f"{result['failed']} failed, exit {done.returncode}")
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
