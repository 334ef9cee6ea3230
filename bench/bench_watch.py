"""What ``reveal watch`` costs, and how soon it alerts.

Starts ``reveal watch`` (a fresh state directory: it learns for ``--learn``), then, once it
scores:

1. **CPU and memory.** Over one steady window of ``--seconds``, the CPU of the whole watch
   process tree (every thread of it and of its children, schedstat) beside
   ``bench/kernel_floor.c`` — the loop that only reads the collector's sources every tick,
   the kernel's floor (see ``bench_kernel_floor.py``) — run at the same time, and their
   ratio; the watch's RSS every 5 s: start, end, peak, growth (also from 5 minutes in),
   and each minute's peak.
2. **Fault → alert latency.** ``--faults`` times: wait until no episode is open, begin the
   next of the validation suite's host faults (``--fault-kinds``, in turn: CPU contention,
   memory pressure, a writeback storm, a disk burst, at ``--intensity``; the same
   :mod:`reveal.inject.faults` classes ``reveal validate`` injects), and time from its
   start to the ``firing`` event at a webhook (an HTTP server in this process); end it at
   the alert or after ``--fault-s``, and wait for the resolution.

    python bench/bench_watch.py                        # → bench/results/watch.json
    python bench/bench_watch.py --seconds 60 --faults 3 --learn 90s --out /tmp/watch.json
    python bench/bench_watch.py --seconds 3600 --out bench/results/watch_hour.json  # an hour
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_kernel_floor import (  # noqa: E402 (beside this file)
    collector_files,
    perf_group_fds,
    process_cpu_ns,
    thread_cpu_ns,
)
from provenance import analysis_settings, arguments, script_argv, write_result  # noqa: E402
from reveal.inject.faults import FaultContext, make_fault  # noqa: E402
from reveal.inject.live_suite import rss_bytes  # noqa: E402


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as handle:
                todo += [int(c) for c in handle.read().split()]
        except OSError:
            pass
    return out


def tree_cpu_ns(pid: int) -> int:
    return sum(process_cpu_ns(p) for p in tree_pids(pid))


class Receiver:
    def __init__(self) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        events = self.events

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                events.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def metric_value(text: str, name: str) -> float:
    """Sum of the samples of metric ``name`` in an exposition ``text``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Scraper(threading.Thread):
    """Scrapes ``/metrics`` every ``every_s`` seconds from the watch's start, as Prometheus
    would: its loopback traffic is then part of what the watch learns, not a change the
    bench makes once scoring starts (polling only then reads as a network anomaly)."""

    def __init__(self, port: int, every_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.every_s = every_s
        self.text = ""
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every_s):
            try:
                self.text = urllib.request.urlopen(self.url, timeout=5).read().decode()
            except OSError:
                continue

    def value(self, name: str) -> float:
        if not self.text:
            raise OSError("no scrape yet")
        return metric_value(self.text, name)


RSS_EVERY_S = 5.0  # the watch's RSS is read this often in the steady window
RSS_SETTLE_S = 300.0  # growth is also given from this far into the window on


def rss_summary(rss: list[int], every_s: float) -> dict[str, Any]:
    """The watch's RSS (bytes) in the steady window: start, end, peak and growth; growth
    and peak again from :data:`RSS_SETTLE_S` on (after the first segments are written and
    the heap has taken its working size); and the peak of every minute, to show a trend."""
    per_minute = max(1, round(60.0 / every_s))
    settled = rss[min(len(rss) - 1, round(RSS_SETTLE_S / every_s)):]
    return {"every_s": every_s, "start": rss[0], "end": rss[-1], "max": max(rss),
            "growth": rss[-1] - rss[0],
            "settled_after_s": RSS_SETTLE_S, "settled_start": settled[0],
            "settled_max": max(settled), "settled_growth": settled[-1] - settled[0],
            "max_per_minute": [max(rss[i:i + per_minute])
                               for i in range(0, len(rss), per_minute)]}


def wait(check, timeout: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except OSError:
            pass
        time.sleep(every)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0, help="the steady window")
    parser.add_argument("--learn", default="10m", help="the watch's --learn")
    parser.add_argument("--faults", type=int, default=12, help="faults to time")
    parser.add_argument("--fault-kinds", default="cpu_contention,memory_pressure,"
                        "writeback_storm,disk_burst", help="faults injected in turn")
    parser.add_argument("--intensity", default="high", help="their intensity")
    parser.add_argument("--fault-s", type=float, default=15.0,
                        help="longest a fault runs without an alert")
    parser.add_argument("--resolve-after", default="5s")
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--score-every", type=int, default=5, help="the watch's --score-every")
    parser.add_argument("--no-early", dest="early", action="store_false",
                        help="the watch's --no-early (batches only)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/watch.json")
    args = parser.parse_args(argv)
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        print("bench_watch: no C compiler (cc or gcc) found", file=sys.stderr)
        return 2
    receiver = Receiver()
    port = _free_port()
    paths, channels = collector_files(args.interval)
    with tempfile.TemporaryDirectory(prefix="reveal-watch-bench-") as tmp:
        binary = Path(tmp) / "kernel_floor"
        subprocess.run([compiler, "-O2", "-o", str(binary), str(ROOT / "bench/kernel_floor.c")],
                       check=True)
        perf, perf_fds = perf_group_fds()
        paths = paths + [f"fd:{fd}" for fd in perf_fds]
        log = Path(tmp) / "watch.log"
        short = ["--allow-short-learn"] if not args.learn.endswith(("m", "h")) else []
        watch = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(Path(tmp) / "state"),
             "--learn", args.learn, *short, "--interval", str(args.interval),
             "--resolve-after", args.resolve_after, "--listen", f"127.0.0.1:{port}",
             "--alert-webhook", receiver.url, "--score-every", str(args.score_every),
             *([] if args.early else ["--no-early"])],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))  # noqa: SIM115
        scraper = Scraper(port)
        scraper.start()
        try:
            print(f"bench_watch: learning ({args.learn})", file=sys.stderr)
            if not wait(lambda: "; scoring" in log.read_text(), 7200, 1.0):
                raise RuntimeError(f"the watch did not start scoring: {log.read_text()[-800:]}")
            time.sleep(10)  # the first windows; imports settled
            print(f"bench_watch: steady window of {args.seconds:.0f} s beside the kernel "
                  f"floor", file=sys.stderr)
            loop = subprocess.Popen([str(binary), str(args.seconds + 5),
                                     str(round(args.interval * 1e3))], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True,
                                    pass_fds=tuple(perf_fds))
            assert loop.stdin is not None
            loop.stdin.write("\n".join(paths) + "\n")
            loop.stdin.close()
            time.sleep(2)
            rss = [rss_bytes(watch.pid)]
            calls_before = (scraper.value("reveal_scoring_calls_total"),
                            scraper.value("reveal_scoring_calls_early_total"))
            threads_before = thread_cpu_ns(watch.pid)
            before = (tree_cpu_ns(watch.pid), process_cpu_ns(loop.pid), time.monotonic())
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                time.sleep(min(RSS_EVERY_S, max(0.0, deadline - time.monotonic())))
                rss.append(rss_bytes(watch.pid))
            after = (tree_cpu_ns(watch.pid), process_cpu_ns(loop.pid), time.monotonic())
            threads_after = thread_cpu_ns(watch.pid)
            loop.wait()
            wall = after[2] - before[2]
            watch_pct = 100 * (after[0] - before[0]) / 1e9 / wall
            floor_pct = 100 * (after[1] - before[1]) / 1e9 / wall
            scoring_s = scraper.value("reveal_scoring_duration_seconds")
            time.sleep(1.5)  # a scrape after the window's end
            calls = {"calls": scraper.value("reveal_scoring_calls_total") - calls_before[0],
                     "early": scraper.value("reveal_scoring_calls_early_total")
                     - calls_before[1]}
            latencies, missed, not_quiet = [], 0, 0
            kinds = [k.strip() for k in args.fault_kinds.split(",") if k.strip()]
            by_kind: dict[str, list[float | None]] = {k: [] for k in kinds}
            context = FaultContext(Path(tmp) / "faults")
            context.workdir.mkdir()
            for i in range(args.faults):
                kind = kinds[i % len(kinds)]
                quiet = wait(lambda: scraper.value("reveal_active_anomalies") == 0, 120)
                if not quiet:  # a fault now would only extend the open episode
                    not_quiet += 1
                    print(f"bench_watch: fault {i + 1}: not started, an episode stayed open "
                          f"for 120 s", file=sys.stderr)
                    continue
                fault = make_fault(kind, args.intensity, context)
                reason = fault.check()
                if reason:
                    raise RuntimeError(f"fault {kind} cannot run here: {reason}")
                seen = len(receiver.events)
                t0 = time.time()
                try:
                    fault.begin()
                    got = wait(lambda n=seen: any(e["event"] == "firing"
                                                  for _, e in receiver.events[n:]),
                               args.fault_s, 0.05)
                finally:
                    fault.end()
                if got:
                    t1 = next(t for t, e in receiver.events[seen:] if e["event"] == "firing")
                    latencies.append(round(t1 - t0, 3))
                else:
                    missed += 1
                by_kind[kind].append(latencies[-1] if got else None)
                print(f"bench_watch: fault {i + 1} ({kind}): "
                      f"{latencies[-1] if got else 'no alert'}", file=sys.stderr)
                time.sleep(2)
        finally:
            scraper.stopped.set()
            watch.send_signal(signal.SIGTERM)
            try:
                watch.wait(60)
            except subprocess.TimeoutExpired:
                watch.kill()
            if perf is not None:
                perf.close()
    by_thread: dict[str, float] = {}
    for key, ns in threads_after.items():  # by thread name (Python threads share one)
        name = key.split(":")[0]
        spent = 100 * (ns - threads_before.get(key, 0)) / 1e9 / wall
        by_thread[name] = round(by_thread.get(name, 0.0) + spent, 4)
    ordered = sorted(latencies)
    result = {
        "bench": "watch", "started_unix": time.time(), "host": socket.gethostname(),
        "n_cpus": os.cpu_count(), "loadavg_end": os.getloadavg(), "interval_s": args.interval,
        "collector_channels": channels, "learn": args.learn, "score_every": args.score_every,
        "window_s": round(wall, 1),
        "watch_pct_core": round(watch_pct, 3), "floor_pct_core": round(floor_pct, 3),
        "watch_pct_core_by_thread": by_thread,
        "ratio_to_floor": round(watch_pct / floor_pct, 2) if floor_pct > 0 else None,
        "last_scoring_call_s": round(scoring_s, 4),
        "early": args.early, "scoring_calls_in_window": calls,
        "rss_bytes": rss_summary(rss, RSS_EVERY_S),
        "fault_to_alert_s": {
            "faults": args.faults, "alerted": len(latencies), "missed": missed,
            "not_started_episode_open": not_quiet,
            "median": statistics.median(ordered) if ordered else None,
            "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else None,
            "all": latencies, "by_kind": by_kind, "intensity": args.intensity,
            "longest_fault_s": args.fault_s},
    }
    # the watch analyses with the telemetry preset and no --set
    write_result(args.out, result,
                 {**arguments(args), "rss_every_s": RSS_EVERY_S, "rss_settle_s": RSS_SETTLE_S,
                  "analysis": analysis_settings()},
                 script_argv(__file__, argv), indent=2)
    print(json.dumps(result, indent=1), file=sys.stderr)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
