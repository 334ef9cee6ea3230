"""Benchmark: reading a long run whole, as a 10-minute slice, as a 10-channel subset, and
chunk by chunk; and whole with the previous reader's method (every segment decoded to an
Arrow table first).

The run is synthetic but written with the collector's own :class:`SegmentWriter`: by
default 2 h of 1 000 channels at 100 ms (72 000 rows, 5-minute segments), plus 90 s still
in the journal. Each read runs in a fresh process, which reports its peak RSS during the
read (VmHWM, reset just before; MiB) and its rise over the RSS before the read (imports and
opening the run done), the peak of Python/NumPy allocations
(tracemalloc), the peak of pyarrow's memory pool, and the wall time. Writes
bench/results/store.json.

    python bench/bench_store.py                       # 2 h x 1000 channels (~1 min)
    python bench/bench_store.py --hours 0.25          # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from provenance import arguments, write_result
from reveal.store.journal import read_journal
from reveal.store.layout import META_FILE, data_bytes, write_json_atomic
from reveal.store.run_reader import iter_run, open_run, read_run
from reveal.store.run_writer import base_meta
from reveal.store.segment_writer import SegmentWriter

RESULTS = Path(__file__).resolve().parent / "results" / "store.json"
INTERVAL_NS = 100_000_000
T0 = 1_000_000_000_000  # monotonic ns of the first row
SEGMENT_S = 300.0
JOURNAL_TAIL_S = 90.0  # left in the journal, as in a run still recording


def channel_names(n: int) -> list[str]:
    """Channel names of a plausible host: per-CPU, per-device and host-wide metrics."""
    names = []
    metrics = ("cpu.user", "cpu.system", "cpu.idle", "cpu.iowait", "disk.reads",
               "disk.writes", "net.rx_bytes", "net.tx_bytes", "mem.page_faults", "cgroup.cpu")
    for i in range(n):
        metric = metrics[i % len(metrics)]
        names.append(f"{metric}{{id={i // len(metrics)}}}")
    return names


def write_long_run(run: Path, hours: float, n_channels: int, seed: int = 0) -> dict:
    """Write ``hours`` of ``n_channels`` at 100 ms with the real writer; returns figures."""
    rng = np.random.default_rng(seed)
    names = channel_names(n_channels)
    writer = SegmentWriter(run, names, interval_s=0.1, segment_seconds=SEGMENT_S,
                           background=False)
    write_json_atomic(run / META_FILE, base_meta("bench", 0.1, closed=False,
                                                 start_mono_ns=T0))
    total = round((hours * 3600 + JOURNAL_TAIL_S) / 0.1)
    block_rows = int(SEGMENT_S / 0.1)
    level = np.zeros(n_channels)
    started = time.perf_counter()
    for first in range(0, total, block_rows):
        rows = min(block_rows, total - first)
        # a third counters (raw, rising), a third gauges, a third near-constant levels
        step = np.zeros((rows, n_channels))
        third = n_channels // 3
        step[:, :third] = rng.poisson(20.0, size=(rows, third))
        counters = level[:third] + np.cumsum(step[:, :third], axis=0)
        level[:third] = counters[-1]
        block = np.empty((rows, n_channels))
        block[:, :third] = counters
        block[:, third:2 * third] = np.round(rng.normal(50, 5, size=(rows, third)), 2)
        block[:, 2 * third:] = rng.integers(0, 3, size=(rows, n_channels - 2 * third)) * 1024
        ts = T0 + (first + np.arange(rows, dtype=np.int64)) * INTERVAL_NS
        writer.append_block(ts, block)
    writer.flush()  # the last 90 s stay in the journal: the run reads as still recording
    seconds = time.perf_counter() - started
    return {"rows": total, "channels": n_channels, "write_s": round(seconds, 2),
            "segments": writer.stats.segments_written, "bytes_on_disk": data_bytes(run),
            "journal_rows": total % block_rows}


def read_whole_tables_first(run: Path) -> tuple[int, int]:
    """The previous reader's method, for comparison: every segment and journal decoded to
    an Arrow table first, then copied into one float64 matrix. Returns its shape."""
    tables = [pq.read_table(path) for path in sorted((run / "segments").glob("*.parquet"))]
    for path in sorted((run / "journal").glob("*.journal")):
        journal = read_journal(path)
        if journal.batches:
            tables.append(pa.Table.from_batches(journal.batches, schema=journal.schema))
    channels: dict[str, int] = {}
    for table in tables:
        for name in table.column_names[1:]:
            channels.setdefault(name, len(channels))
    total = sum(t.num_rows for t in tables)
    ts = np.empty(total, dtype=np.int64)
    values = np.full((total, len(channels)), np.nan)
    row = 0
    for table in tables:
        n = table.num_rows
        ts[row:row + n] = table.column(0).to_numpy()
        for name in table.column_names[1:]:
            column = table.column(name).cast(pa.float64()).fill_null(np.nan)
            values[row:row + n, channels[name]] = column.to_numpy(zero_copy_only=False)
        row += n
    return values.shape


def cases(run: Path) -> dict[str, dict]:
    """The reads measured: name → keyword arguments (``chunk_rows`` means iterate)."""
    reader = open_run(run)
    span = reader.span_ns()
    assert span is not None
    middle = (span[0] + span[1]) // 2
    ten = [c for c in reader.channels if c.startswith("disk.reads")][:10]
    return {
        "whole": {},
        "slice_10min": {"start_ns": middle, "end_ns": middle + 600 * 10**9},
        "subset_10ch": {"channels": ten},
        "slice_10min_subset_10ch": {"start_ns": middle, "end_ns": middle + 600 * 10**9,
                                    "channels": ten},
        "metric_prefix_cpu.user": {"metrics": ["cpu.user"]},
        "iterate_whole_chunks_3000": {"chunk_rows": 3000},
        "whole_previous_method": {"previous": True},
    }


def _status_mib(field: str) -> float:
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def measure(run: Path, name: str) -> dict:
    """One read in this (fresh) process: its figures. The RSS peak (VmHWM) is reset just
    before the read (``/proc/self/clear_refs``), so it is the read's own high-water mark."""
    kwargs = cases(run)[name]
    pool = pa.default_memory_pool()
    with open("/proc/self/clear_refs", "w") as handle:  # VmHWM := VmRSS
        handle.write("5")
    rss_before = _status_mib("VmRSS")
    tracemalloc.start()
    arrow_before = pool.max_memory()
    started = time.perf_counter()
    if "previous" in kwargs:
        shape = list(read_whole_tables_first(run))
        extra = {}
    elif "chunk_rows" in kwargs:
        rows = chunks = 0
        total = 0.0
        for chunk in iter_run(run, **kwargs):
            rows += chunk.n_samples
            chunks += 1
            total += float(np.nansum(chunk.values[:, 0]))
        shape = [rows, len(chunk.channels)]
        extra = {"chunks": chunks}
    else:
        tel = read_run(run, **kwargs)
        shape = list(tel.values.shape)
        extra = {}
    seconds = time.perf_counter() - started
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_peak = _status_mib("VmHWM")
    return {"case": name, "args": {k: v for k, v in kwargs.items() if k != "channels"}
            | ({"channels": len(kwargs["channels"])} if "channels" in kwargs else {}),
            "rows": shape[0], "channels": shape[1], "seconds": round(seconds, 3),
            "peak_rss_mib": round(rss_peak, 1), "rss_rise_mib": round(rss_peak - rss_before, 1),
            "tracemalloc_peak_mib": round(traced_peak / 2**20, 1),
            "arrow_pool_peak_mib": round((pool.max_memory() - arrow_before) / 2**20, 1),
            "result_mib": round(shape[0] * shape[1] * 8 / 2**20, 1)} | extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--channels", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--measure", nargs=2, metavar=("RUN", "CASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), args.measure[1])))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        run = work / "run"
        written = write_long_run(run, args.hours, args.channels)
        print(f"wrote {written}", file=sys.stderr)
        results = []
        for name in cases(run):
            done = subprocess.run([sys.executable, __file__, "--measure", str(run), name],
                                  capture_output=True, text=True, check=True)
            results.append(json.loads(done.stdout))
            print(json.dumps(results[-1]), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    whole = next(r for r in results if r["case"] == "whole")
    payload = {
        "benchmark": "store", "command": " ".join(["python", "bench/bench_store.py",
                                                   *sys.argv[1:]]),
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "pyarrow": pa.__version__, "run": written, "reads": results,
        "peak_rss_vs_whole": {r["case"]: round(r["peak_rss_mib"] / whole["peak_rss_mib"], 3)
                              for r in results},
    }
    write_result(args.out, payload, arguments(args), indent=2)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
