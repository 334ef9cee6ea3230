"""The kernel's floor under any collector of this host's sources, at the collector's rate.

Opens the collector's default probes (as ``reveal collect`` would), lists the files they
read every tick, and runs ``bench/kernel_floor.c`` (built here with the system C compiler):
a loop that preads every one of those files on the same 100 ms grid and does nothing else.
Its CPU (user and system, getrusage) is what the kernel spends producing the text plus
the cost of waking up: no collector that reads these sources every tick can cost less on
this host. Per file, the thread CPU time of one read (µs) and its size (bytes).

    python bench/bench_kernel_floor.py                  # 60 s → bench/results/kernel_floor.json
    python bench/bench_kernel_floor.py --seconds 20 --out /tmp/floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def collector_files() -> tuple[list[str], int]:
    """Paths the default probes read every tick, and their channel count."""
    from reveal.collect.runner import CollectOptions, Collector

    work = Path(tempfile.mkdtemp(prefix="reveal-floor-"))
    collector = Collector(CollectOptions(out=work / "run", duration_s=0.1))
    collector.open()
    try:
        assert collector.sampler is not None
        paths: list[str] = []
        for probe in collector.sampler.probes:
            for part in getattr(probe, "_parts", {}).values():
                for handle, _ in getattr(part, "_live", []):
                    paths.append(handle.path)
                single = getattr(part, "_file", None)
                reader = getattr(part, "native_reader", lambda: None)()
                # a file read each tick by a C plan (a values array is copied, not read)
                if single is not None and reader is not None and not hasattr(reader, "dtype"):
                    paths.append(single.path)
        return paths, len(collector.sampler.channels)
    finally:
        collector.close()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the loop")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between reads")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/kernel_floor.json")
    args = parser.parse_args(argv)
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        print("bench_kernel_floor: no C compiler (cc or gcc) found", file=sys.stderr)
        return 2
    paths, channels = collector_files()
    with tempfile.TemporaryDirectory(prefix="reveal-floor-") as tmp:
        binary = Path(tmp) / "kernel_floor"
        subprocess.run([compiler, "-O2", "-o", str(binary), str(ROOT / "bench/kernel_floor.c")],
                       check=True)
        print(f"bench_kernel_floor: {len(paths)} files, {args.seconds:.0f} s",
              file=sys.stderr)
        done = subprocess.run([str(binary), str(args.seconds), str(round(args.interval * 1e3))],
                              input="\n".join(paths) + "\n", capture_output=True, text=True,
                              check=True)
    loop: dict[str, Any] = json.loads(done.stdout)
    per_file = loop.pop("per_file_us")
    result = {
        "bench": "kernel_floor", "started_unix": time.time(), "host": socket.gethostname(),
        "n_cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
        "interval_s": args.interval, "collector_channels": channels, **loop,
        "per_tick_us": round(sum(v[0] for v in per_file.values()), 1),
        "per_file": {k: {"us_per_read": v[0], "bytes": v[1]}
                     for k, v in sorted(per_file.items(), key=lambda kv: -kv[1][0])},
        "note": "pct_core is user+system of a loop that only preads the files every "
                "interval: the floor under any collector of these sources on this host",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("files", "pct_core", "user_s", "system_s",
                                             "per_tick_us")}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
