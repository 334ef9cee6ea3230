"""The opt-in eBPF probe from the image built ``--with-bpftrace``, on a process of the host.

A process on the host (outside any container) loads a real CUDA runtime
(``libcudart.so.12`` of the ``nvidia-cuda-runtime-cu12`` wheel, a test extra) and calls
``cudaMalloc`` every ``--period`` seconds; with no GPU each call fails (``code`` 35, no
driver), and a failed call is a call. ``reveal collect --probes cpu,ebpf`` runs in the image
with the host's view (``bench_image.host_view``, docs/deploy.md) while it does. Kept: the
probe's status and environment (bpftrace version, tracefs, uprobes), the library it found
through the host's PID namespace, and the calls it counted against the calls the process
made while the probe was attached (from the probe's first to its last sample).

    bash scripts/build_image.sh --with-bpftrace --tag localhost/reveal:ebpf
    python bench/bench_image_ebpf.py --image localhost/reveal:ebpf  # → results/image_ebpf.json

Needs root, podman and runc.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_ebpf import wheel_cudart  # noqa: E402
from bench_image import host_view  # noqa: E402
from provenance import arguments, script_argv, write_result  # noqa: E402

# the host's process: cudaMalloc in a loop, each call's wall time (ns) on a line
CALLER = """
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
end = time.time() + float(sys.argv[2])
with open(sys.argv[4], "w") as out:
    while time.time() < end:
        p = ctypes.c_void_p()
        out.write(f"{time.time_ns()} {lib.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1024))}\\n")
        out.flush()
        time.sleep(float(sys.argv[3]))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--image", default="localhost/reveal:ebpf",
                        help="an image built with scripts/build_image.sh --with-bpftrace")
    parser.add_argument("--seconds", type=float, default=12.0, help="the collection")
    parser.add_argument("--period", type=float, default=0.01, help="s between calls")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/image_ebpf.json")
    args = parser.parse_args(argv)
    started = time.monotonic()
    inspect = subprocess.run(["podman", "image", "inspect", args.image],
                             capture_output=True, text=True)
    if inspect.returncode != 0:
        print(f"bench_image_ebpf: no image {args.image}: bash scripts/build_image.sh "
              f"--with-bpftrace --tag {args.image} first", file=sys.stderr)
        return 2
    image = json.loads(inspect.stdout)[0]
    library = wheel_cudart()
    if library is None:
        print("bench_image_ebpf: no libcudart.so.12: pip install nvidia-cuda-runtime-cu12 "
              "(a test extra)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="reveal-image-ebpf-") as tmp:
        work = Path(tmp)
        work.chmod(0o777)
        calls_log = work / "calls.txt"
        caller = subprocess.Popen([sys.executable, "-c", CALLER, str(library),
                                   str(args.seconds + 20), str(args.period), str(calls_log)])
        try:
            time.sleep(1.0)
            done = subprocess.run(["podman", "run", "--rm", *host_view(), "-v",
                                   f"{work}:/out", args.image, "collect", "--probes",
                                   "cpu,ebpf", "--duration", f"{args.seconds:g}", "--out",
                                   "/out/run"], capture_output=True, text=True,
                                  timeout=args.seconds + 120)
        finally:
            caller.kill()
            caller.wait()
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        meta = json.loads((work / "run" / "meta.json").read_text())
        from reveal.store.sources import open_source

        run = open_source(work / "run")
        counted = [c for c in run.channels if c.startswith("ebpf.cuda.calls{")
                   and f"pid={caller.pid}" in c]
        errors = [c for c in run.channels if c.startswith("ebpf.cuda.errors{")
                  and f"pid={caller.pid}" in c]
        calls = float(sum(np.nanmax(run.values[:, run.channels.index(c)]) for c in counted))
        # calls made while the probe was attached: its first to its last sample
        column = run.values[:, run.channels.index(counted[0])] if counted else None
        seen = np.flatnonzero(np.isfinite(column)) if column is not None else np.zeros(0)
        wall = run.timestamps_ns + run.wall_offset_ns
        made = 0
        if seen.size:
            lo, hi = wall[seen[0]], wall[seen[-1]]
            made = sum(1 for line in calls_log.read_text().splitlines()
                       if lo - 100_000_000 < int(line.split()[0]) <= hi)
        probe = meta["probes"]["ebpf"]
    result: dict[str, Any] = {
        "bench": "image_ebpf", "image": args.image, "image_size_bytes": image["Size"],
        "image_labels": image["Config"].get("Labels", {}),
        "probe": {"status": probe["status"], "reason": probe.get("reason"),
                  "channels": probe.get("channels"),
                  "environment": probe.get("info", {}).get("environment"),
                  "libraries": probe.get("info", {}).get("libraries"),
                  "probes_attached": probe.get("info", {}).get("probes_attached")},
        "library": str(library),
        "caller_pid": caller.pid,
        "calls_counted": calls, "calls_made_while_attached": made,
        "counted_share": round(calls / made, 4) if made else None,
        "error_channels": errors,
    }
    write_result(args.out, result, {"options": arguments(args)}, script_argv(__file__, argv),
                 started)
    print(json.dumps({k: result[k] for k in ("calls_counted", "calls_made_while_attached",
                                             "counted_share", "error_channels")}, indent=1))
    print(f"written: {args.out}")
    ok = probe["status"] == "ok" and made > 0 and calls > 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
