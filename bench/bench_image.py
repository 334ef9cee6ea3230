"""``reveal watch`` in its OCI image against the same watch run natively, side by side.

Both start together on this host, each with a fresh state directory and the same options:
the native one from this clone, the other in the image (``scripts/build_image.sh``) run by
podman with the host's PID, network and cgroup namespaces, the mounts and capabilities of
docs/deploy.md. Once both score:

1. **Channels**: each one's ``reveal_collector_channels`` and the model's channels.
2. **CPU**: over one window of ``--seconds``, the CPU time of each watch's process tree
   (every thread of it and of its children, schedstat), and their ratio (image / native).
3. **Fault → alert**: ``--faults`` faults of ``--fault-kinds`` in turn (the validation
   suite's :mod:`reveal.inject.faults`), each once neither watch has an episode open; the
   time from its start to each watch's ``firing`` event at a webhook of this process.

    python bench/bench_image.py                  # → bench/results/image.json
    python bench/bench_image.py --learn 90s --seconds 60 --faults 2 --out /tmp/image.json

Needs root, podman and runc, and the image (``bash scripts/build_image.sh``; ``--image``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_watch import Receiver, Scraper, _free_port, tree_cpu_ns, wait  # noqa: E402
from provenance import arguments, script_argv, write_result  # noqa: E402
from reveal._version import __version__  # noqa: E402
from reveal.inject.faults import FaultContext, make_fault  # noqa: E402


def host_view() -> list[str]:
    """``podman run`` options for a watch in the image with the host's view, as
    docs/deploy.md gives them: runc, ulimits within this shell's hard limits (podman's
    defaults can exceed them), the host's PID, network and cgroup namespaces, root with the
    documented capabilities, and the mounts (``/run/netns`` made where it is missing)."""
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    files = 65536 if files == resource.RLIM_INFINITY else min(files, 65536)
    os.makedirs("/run/netns", exist_ok=True)
    return ["--runtime", "runc", "--ulimit", f"nofile={files}:{files}",
            "--ulimit", "nproc=4096:4096", "--pid", "host", "--network", "host",
            "--cgroupns", "host", "--user", "0",
            "--cap-add", "SYS_ADMIN,SYS_PTRACE,PERFMON,BPF,DAC_READ_SEARCH,SYS_RESOURCE,"
            "SYS_NICE", "--security-opt", "seccomp=unconfined",
            "-v", "/sys:/sys:ro", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "-v", "/run/netns:/run/netns:ro,rslave"]


def _latency(receiver: Receiver, seen: int, t0: float) -> float | None:
    """Seconds from ``t0`` to the first ``firing`` event after the ``seen`` first ones."""
    for t, event in receiver.events[seen:]:
        if event["event"] == "firing":
            return round(t - t0, 3)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--image", default=f"localhost/reveal:{__version__}")
    parser.add_argument("--learn", default="90s", help="both watches' --learn")
    parser.add_argument("--seconds", type=float, default=120.0, help="the CPU window")
    parser.add_argument("--faults", type=int, default=4)
    parser.add_argument("--fault-kinds", default="cpu_contention,memory_pressure")
    parser.add_argument("--intensity", default="high")
    parser.add_argument("--fault-s", type=float, default=30.0,
                        help="longest a fault runs waiting for both alerts")
    parser.add_argument("--resolve-after", default="5s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/image.json")
    args = parser.parse_args(argv)
    inspect = subprocess.run(["podman", "image", "inspect", args.image], capture_output=True,
                             text=True)
    if inspect.returncode != 0:
        print(f"bench_image: no image {args.image}: bash scripts/build_image.sh first",
              file=sys.stderr)
        return 2
    image = json.loads(inspect.stdout)[0]
    receivers = {k: Receiver() for k in ("native", "image")}  # one webhook per watch
    ports = {k: _free_port() for k in receivers}
    name = f"reveal-bench-image-{int(time.time())}"
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="reveal-image-bench-") as tmp:
        work = Path(tmp)
        common = ["--learn", args.learn, "--allow-short-learn", "--resolve-after",
                  args.resolve_after]
        (work / "native").mkdir()
        (work / "image").mkdir()
        native_log = open(work / "native.log", "wb")  # noqa: SIM115 (the child keeps it)
        native = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(work / "native"),
             *common, "--listen", f"127.0.0.1:{ports['native']}",
             "--alert-webhook", receivers["native"].url],
            stdout=subprocess.DEVNULL, stderr=native_log)
        subprocess.run(["podman", "run", "-d", "--name", name, *host_view(),
                        "-v", f"{work / 'image'}:/var/lib/reveal",
                        args.image, "watch", *common,
                        "--listen", f"127.0.0.1:{ports['image']}",
                        "--alert-webhook", receivers["image"].url],
                       check=True, capture_output=True)
        scrapers = {k: Scraper(ports[k]) for k in receivers}
        for s in scrapers.values():
            s.start()
        result: dict[str, Any] = {"bench": "image", "image": args.image,
                                  "image_size_bytes": image["Size"],
                                  "image_labels": image["Config"].get("Labels", {})}
        try:
            print(f"bench_image: both learning ({args.learn})", file=sys.stderr)
            for k, s in scrapers.items():
                if not wait(lambda s=s: s.value("reveal_learning") == 0
                            and s.value("reveal_model_generation") >= 1, 3600, 1.0):
                    raise RuntimeError(f"the {k} watch did not start scoring")
            time.sleep(10)
            pid = int(subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", name],
                                     capture_output=True, text=True, check=True).stdout)
            pids = {"native": native.pid, "image": pid}
            result["channels"] = {k: {"collector": s.value("reveal_collector_channels"),
                                      "model": s.value("reveal_model_channels")}
                                  for k, s in scrapers.items()}
            print(f"bench_image: CPU over {args.seconds:.0f} s", file=sys.stderr)
            before = {k: tree_cpu_ns(p) for k, p in pids.items()}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            wall = time.monotonic() - t0
            cpu = {k: (tree_cpu_ns(p) - before[k]) / 1e9 / wall for k, p in pids.items()}
            result["cpu"] = {"window_s": round(wall, 1),
                             **{f"{k}_cores": round(v, 4) for k, v in cpu.items()},
                             "ratio_image_to_native": round(cpu["image"] / cpu["native"], 3)}
            kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
            context = FaultContext(work / "faults")
            context.workdir.mkdir()
            faults = []
            for i in range(args.faults):
                kind = kinds[i % len(kinds)]
                quiet = wait(lambda: all(s.value("reveal_active_anomalies") == 0
                                         for s in scrapers.values()), 180)
                fault = make_fault(kind, args.intensity, context)
                reason = fault.check()
                if reason:
                    raise RuntimeError(f"fault {kind} cannot run here: {reason}")
                seen = {k: len(r.events) for k, r in receivers.items()}
                t0 = time.time()
                try:
                    fault.begin()
                    wait(lambda n=seen, t=t0: all(_latency(r, n[k], t) is not None
                                                  for k, r in receivers.items()),
                         args.fault_s, 0.05)
                finally:
                    fault.end()
                got = {k: _latency(r, seen[k], t0) for k, r in receivers.items()}
                faults.append({"kind": kind, "quiet_before": quiet, **got})
                print(f"bench_image: fault {i + 1} ({kind}): {got}", file=sys.stderr)
                time.sleep(5)
            result["faults"] = faults

            def median(k: str) -> float | None:
                values = [f[k] for f in faults if f[k] is not None]
                return statistics.median(values) if values else None

            result["fault_to_alert_s"] = {
                k: {"alerted": sum(f[k] is not None for f in faults), "of": len(faults),
                    "median": median(k)} for k in receivers}
            both = [f["image"] - f["native"] for f in faults
                    if f["image"] is not None and f["native"] is not None]
            result["fault_to_alert_s"]["image_minus_native_median"] = (
                round(statistics.median(both), 3) if both else None)
        finally:
            for s in scrapers.values():
                s.stopped.set()
            native.send_signal(signal.SIGTERM)
            subprocess.run(["podman", "stop", "-t", "60", name], capture_output=True)
            logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
            subprocess.run(["podman", "rm", "-f", name], capture_output=True)
            try:
                native.wait(60)
            except subprocess.TimeoutExpired:
                native.kill()
            (work / "image.log").write_text(logs.stdout + logs.stderr)
            result["logs_tail"] = {k: (work / f"{k}.log").read_text(errors="replace")[-1500:]
                                   for k in receivers}
    write_result(args.out, result, arguments(args), script_argv(__file__, argv),
                 started=started)
    print(json.dumps({k: result.get(k) for k in ("channels", "cpu", "fault_to_alert_s")},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
