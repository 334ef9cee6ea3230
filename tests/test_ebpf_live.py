"""The ebpf probe and the capture against real uprobes, uretprobes and tracepoints.

Stand-in ``libcudart.so.12``, ``libcuda.so.1`` and ``libnccl.so.2`` (tests/fixtures/ebpf,
real symbol names and signatures, each sleeping a known time) are compiled here with gcc,
and ``fakework`` calls them with known arguments. The probe must report exact call counts,
exact bytes per copy kind and NCCL datatype, and latencies consistent with the sleeps.
Needs root and bpftrace; skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reveal.cli import main as cli_main
from reveal.collect.ebpf.capture import capture
from reveal.collect.ebpf.probe import EbpfProbe
from reveal.collect.ebpf.targets import TargetSelector
from reveal.frame import parse_channel

_spec = importlib.util.spec_from_file_location(
    "ebpf_workload", Path(__file__).parent / "fixtures" / "ebpf" / "workload.py")
assert _spec is not None and _spec.loader is not None
workload = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(workload)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (uprobes and tracepoints through bpftrace)"
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    return None


pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_not() is not None,
                                                   reason=_why_not() or "")]

# -- what the stand-ins are called with, and what must come out ---------------------------------
SCRIPT = [
    "cudaLaunchKernel", "cudaLaunchKernel", "cudaLaunchKernelExC",
    "cudaMemcpy 4096 1", "cudaMemcpy 1000 2", "cudaMemcpy 8 99",
    "cudaMemcpyAsync 1048576 3", "cudaMemcpyAsync 512 4",
    "cudaMalloc 1048576", "cudaFree", "cudaMalloc 3000", "cudaFree",
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuLaunchKernel", "cuMemcpyHtoD_v2 256", "cuMemcpyDtoH_v2 512", "cuMemcpyDtoD_v2 1024",
    "cuMemcpyHtoDAsync_v2 2048", "cuMemcpyDtoHAsync_v2 4096", "cuMemcpyDtoDAsync_v2 8192",
    "cuMemcpy 16384", "cuMemcpyAsync 32768", "cuMemAlloc_v2 5000", "cuMemFree_v2",
    "ncclGroupStart", "ncclAllReduce 1000 6", "ncclAllReduce 10 7", "ncclReduce 7 8",
    "ncclBroadcast 5 0", "ncclAllGather 3 9", "ncclReduceScatter 11 4", "ncclSend 13 1",
    "ncclRecv 17 10", "ncclRecv 19 11", "ncclAllReduce 2 3", "ncclAllReduce 2 2",
    "ncclAllReduce 4 5", "ncclAllReduce 7 300", "ncclGroupEnd",
]
ROUNDS = 5

# Written from the headers (cuda_runtime_api.h, nccl.h), independently of the probe's tables.
RUNTIME_KINDS = {0: "HtoH", 1: "HtoD", 2: "DtoH", 3: "DtoD", 4: "Default"}
DRIVER_KINDS = {"cuMemcpyHtoD_v2": "HtoD", "cuMemcpyDtoH_v2": "DtoH", "cuMemcpyDtoD_v2": "DtoD",
                "cuMemcpyHtoDAsync_v2": "HtoD", "cuMemcpyDtoHAsync_v2": "DtoH",
                "cuMemcpyDtoDAsync_v2": "DtoD", "cuMemcpy": "Default", "cuMemcpyAsync": "Default"}
NCCL_TYPES = {0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4),
              4: ("int64", 8), 5: ("uint64", 8), 6: ("float16", 2), 7: ("float32", 4),
              8: ("float64", 8), 9: ("bfloat16", 2), 10: ("float8e4m3", 1),
              11: ("float8e5m2", 1)}
CUDA_ERROR_INVALID_MEMCPY_DIRECTION = 21
NCCL_INVALID_ARGUMENT = 4


def expected(script: list[str], rounds: int) -> dict[str, dict[Any, float]]:
    """Exact totals the probe must report for ``rounds`` replays of ``script``."""
    out: dict[str, dict[Any, float]] = {k: {} for k in (
        "calls", "memcpy_bytes", "memcpy_calls", "nccl_bytes", "nccl_elements", "alloc",
        "free", "errors")}

    def add(table: str, key: Any, value: float) -> None:
        out[table][key] = out[table].get(key, 0) + value * rounds

    last_alloc: dict[str, int] = {}
    for line in script:
        fn, *args = line.split()
        nums = [int(a) for a in args]
        add("calls", fn, 1)
        if fn in ("cudaMemcpy", "cudaMemcpyAsync"):
            kind = RUNTIME_KINDS.get(nums[1], "invalid")
            add("memcpy_bytes", (fn, kind), nums[0])
            add("memcpy_calls", (fn, kind), 1)
            if kind == "invalid":
                add("errors", (fn, str(CUDA_ERROR_INVALID_MEMCPY_DIRECTION)), 1)
        elif fn in DRIVER_KINDS:
            add("memcpy_bytes", (fn, DRIVER_KINDS[fn]), nums[0])
            add("memcpy_calls", (fn, DRIVER_KINDS[fn]), 1)
        elif fn in ("cudaMalloc", "cuMemAlloc_v2"):
            add("alloc", fn, nums[0])
            last_alloc["cudaFree" if fn == "cudaMalloc" else "cuMemFree_v2"] = nums[0]
        elif fn in ("cudaFree", "cuMemFree_v2"):
            add("free", fn, last_alloc[fn])
        elif fn.startswith("nccl") and nums:
            if nums[1] in NCCL_TYPES:
                name, size = NCCL_TYPES[nums[1]]
                add("nccl_bytes", (fn, name), nums[0] * size)
            else:
                add("nccl_elements", (fn, "invalid"), nums[0])
                add("errors", (fn, str(NCCL_INVALID_ARGUMENT)), 1)
    return out


# -- helpers ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return workload.build(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture
def cgroup() -> Iterator[tuple[Path, str] | None]:
    """A fresh cgroup v2 directory and its path as /proc/PID/cgroup shows it."""
    root = workload.cgroup2_root()
    if root is None:
        yield None
        return
    path = root / f"reveal-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        yield path, "/" + path.relative_to(root).as_posix()
    finally:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def wait_values(probe: EbpfProbe, done: Callable[[dict[str, float]], bool],
                timeout_s: float = 30.0) -> dict[str, float]:
    """Refresh and read until ``done(snapshot)`` or the timeout; returns the last snapshot."""
    deadline = time.monotonic() + timeout_s
    while True:
        probe.refresh()
        out = np.empty(len(probe.channels))
        probe.read(out)
        snap = probe.snapshot()
        if done(snap) or time.monotonic() > deadline:
            return snap
        time.sleep(0.2)


def table(snap: dict[str, float], metric: str, pid: int | None = None,
          keys: tuple[str, ...] = ("fn",)) -> dict[Any, float]:
    """Values of ``metric`` (for ``pid``) keyed by the given labels."""
    out: dict[Any, float] = {}
    for name, value in snap.items():
        m, labels = parse_channel(name)
        if m != metric or (pid is not None and labels.get("pid") != str(pid)):
            continue
        key = tuple(labels[k] for k in keys)
        out[key[0] if len(key) == 1 else key] = value
    return out


# -- tests --------------------------------------------------------------------------------------
def test_exact_counts_bytes_and_latencies(libs: Path, tmp_path: Path, cgroup) -> None:
    work = workload.Workload(libs, tmp_path / "w", SCRIPT, ROUNDS)
    try:
        work.wait_for("opened")
        if cgroup is not None:
            (cgroup[0] / "cgroup.procs").write_text(str(work.pid))
        probe = EbpfProbe(groups="cuda,nccl", interval_ms=100)
        probe.open()
        try:
            assert probe.status == "ok", probe.reason
            kinds = {lib["kind"] for lib in probe.info["libraries"]}
            assert kinds == {"cudart", "cuda", "nccl"}
            work.run_calls()
            want = expected(SCRIPT, ROUNDS)
            snap = wait_values(probe, lambda s: table(s, "ebpf.cuda.calls", work.pid)
                               | table(s, "ebpf.nccl.calls", work.pid) == want["calls"])
            calls = table(snap, "ebpf.cuda.calls", work.pid) | table(snap, "ebpf.nccl.calls",
                                                                     work.pid)
            assert calls == want["calls"]
            key2 = ("fn", "kind")
            assert table(snap, "ebpf.cuda.memcpy_bytes", work.pid, key2) == want["memcpy_bytes"]
            assert table(snap, "ebpf.cuda.memcpy_calls", work.pid, key2) == want["memcpy_calls"]
            assert table(snap, "ebpf.nccl.bytes", work.pid, ("fn", "dtype")) == want["nccl_bytes"]
            assert table(snap, "ebpf.nccl.elements", work.pid, ("fn", "dtype")) == \
                want["nccl_elements"]
            assert table(snap, "ebpf.cuda.alloc_bytes", work.pid) == want["alloc"]
            assert table(snap, "ebpf.cuda.free_bytes", work.pid) == want["free"]
            errors = table(snap, "ebpf.cuda.errors", work.pid, ("fn", "code")) | table(
                snap, "ebpf.nccl.errors", work.pid, ("fn", "code"))
            assert errors == want["errors"]

            # latency: every call of a function that sleeps S µs lasts at least S µs
            totals = table(snap, "ebpf.cuda.latency_ns_total", work.pid) | table(
                snap, "ebpf.nccl.latency_ns_total", work.pid)
            hist: dict[str, dict[int, float]] = {}
            for family in ("cuda", "nccl"):
                for (fn, le), count in table(snap, f"ebpf.{family}.lat_hist", work.pid,
                                             ("fn", "le")).items():
                    hist.setdefault(fn, {})[int(le)] = count
            sleeps = workload.DELAYS_US
            slept = {"cudaDeviceSynchronize": sleeps["SYNC_US"],
                     "cudaStreamSynchronize": sleeps["SYNC_US"],
                     "cudaEventSynchronize": sleeps["SYNC_US"],
                     "cudaMemcpy": sleeps["MEMCPY_US"], "cudaMemcpyAsync": sleeps["MEMCPY_US"],
                     "ncclAllReduce": sleeps["COLL_US"], "ncclGroupEnd": sleeps["COLL_US"],
                     "ncclSend": sleeps["COLL_US"]}
            for fn, n in want["calls"].items():
                assert sum(hist[fn].values()) == n, fn  # each completed call in one bucket
                mean_us = totals[fn] / n / 1e3
                floor = slept.get(fn, 0)
                assert floor <= mean_us < floor + 20_000, (fn, mean_us)
                if floor:  # no call shorter than the sleep: buckets start at >= the sleep
                    assert min(le for le in hist[fn]) > floor * 1e3, (fn, sorted(hist[fn]))
            in_flight = table(snap, "ebpf.cuda.in_flight", work.pid)
            assert in_flight and set(in_flight.values()) == {0.0}

            # labels: comm and the cgroup the process was moved to
            some = next(n for n in snap if n.startswith("ebpf.cuda.calls{")
                        and f"pid={work.pid}" in n)
            labels = parse_channel(some)[1]
            assert labels["comm"] == "fakework"
            if cgroup is not None:
                assert labels["cgroup"] == cgroup[1]

            # read() fills the adopted channels with the same values
            probe.refresh()
            out = np.empty(len(probe.channels))
            probe.read(out)
            snap = probe.snapshot()
            for name, value in zip(probe.channels, out, strict=True):
                if name in snap and "calls" in name:
                    assert value == snap[name], name
        finally:
            probe.close()
    finally:
        work.stop()


def test_process_that_loads_the_library_later_is_followed(libs: Path, tmp_path: Path) -> None:
    script = ["cudaLaunchKernel", "ncclAllReduce 100 7"]
    work = workload.Workload(libs, tmp_path / "w", script, 7, late=True)
    probe = EbpfProbe(pids=[work.pid], groups="cuda,nccl", rescan_s=0.0, launch_latency=False)
    try:
        probe.open()
        assert probe.status == "degraded"
        assert "no selected process maps a CUDA or NCCL library" in probe.reason
        assert probe.channels == []
        out = np.empty(0)
        probe.read(out)
        assert not probe.refresh()

        work.touch("open")
        work.wait_for("opened")
        deadline = time.monotonic() + 60
        while probe.status != "ok" and time.monotonic() < deadline:
            probe.refresh()
            time.sleep(0.2)
        assert probe.status == "ok", probe.reason
        assert probe.restarts == 1
        work.run_calls()
        # until every call is counted (the maps are printed while the calls go on)
        snap = wait_values(probe, lambda s: table(s, "ebpf.cuda.calls", work.pid) ==
                           {"cudaLaunchKernel": 7} and sum(table(
                               s, "ebpf.nccl.bytes", work.pid, ("fn", "dtype")).values())
                           >= 7 * 100 * 4)
        assert table(snap, "ebpf.cuda.calls", work.pid) == {"cudaLaunchKernel": 7}
        assert table(snap, "ebpf.nccl.bytes", work.pid, ("fn", "dtype")) == {
            ("ncclAllReduce", "float32"): 7 * 100 * 4}
        # launches were counted at entry only; other calls keep their latency
        assert "cudaLaunchKernel" not in table(snap, "ebpf.cuda.latency_ns_total", work.pid)
        assert "cudaLaunchKernel" not in table(snap, "ebpf.cuda.in_flight", work.pid)
        assert table(snap, "ebpf.nccl.latency_ns_total", work.pid)["ncclAllReduce"] >= \
            7 * workload.DELAYS_US["COLL_US"] * 1e3
    finally:
        probe.close()
        work.stop()


def test_command_pattern_selects_one_of_two_processes(libs: Path, tmp_path: Path) -> None:
    other = tmp_path / "otherwork"
    shutil.copy(libs / "fakework", other)
    a = workload.Workload(libs, tmp_path / "a", ["cudaDeviceSynchronize"], 3)
    b = workload.Workload(libs, tmp_path / "b", ["cudaDeviceSynchronize"], 4, exe=other)
    probe = EbpfProbe(comm="other*", groups="cuda")
    try:
        a.wait_for("opened")
        b.wait_for("opened")
        probe.open()
        assert probe.status == "ok", probe.reason
        a.run_calls()
        b.run_calls()
        wait_values(probe, lambda s: table(s, "ebpf.cuda.calls", b.pid)
                    == {"cudaDeviceSynchronize": 4})
        time.sleep(0.5)  # time for the other process's calls to show, were they counted
        snap = wait_values(probe, lambda s: True)
        assert table(snap, "ebpf.cuda.calls", b.pid) == {"cudaDeviceSynchronize": 4}
        assert not [n for n in snap if f"pid={a.pid}" in n]
    finally:
        probe.close()
        a.stop()
        b.stop()


PY_WORKER = textwrap.dedent("""
    import ctypes, os, sys, time
    state, lib, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cudart = ctypes.CDLL(lib)
    open(os.path.join(state, "opened"), "w").close()
    while not os.path.exists(os.path.join(state, "go")):
        time.sleep(0.01)
    cudart.cudaDeviceSynchronize()
    def f(x):
        return x
    list(map(f, range(n)))
    open(os.path.join(state, "done"), "w").close()
    while not os.path.exists(os.path.join(state, "exit")):
        time.sleep(0.01)
""")


def test_python_function_entries_are_counted(libs: Path, tmp_path: Path) -> None:
    state = tmp_path / "py"
    state.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(PY_WORKER)
    n = 20000
    proc = subprocess.Popen([sys.executable, str(script), str(state),
                             str(libs / "libcudart.so.12"), str(n)])
    probe = EbpfProbe(pids=[proc.pid], groups="cuda,python")
    try:
        deadline = time.monotonic() + 30
        while not (state / "opened").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        probe.open()
        assert probe.status == "ok", probe.reason
        assert probe.info["interpreters"], "the Python interpreter was not found"
        (state / "go").touch()
        while not (state / "done").exists() and time.monotonic() < deadline + 30:
            time.sleep(0.01)
        snap = wait_values(probe, lambda s: table(s, "ebpf.python.calls", proc.pid,
                                                  ("source",)) != {})
        time.sleep(0.3)
        snap = wait_values(probe, lambda s: True)
        counted = table(snap, "ebpf.python.calls", proc.pid, ("source",))
        assert len(counted) == 1
        source, calls = next(iter(counted.items()))
        assert source in ("usdt", "eval_frame")
        assert n <= calls < n + 5000  # f runs n times from C (map); a little more around it
    finally:
        probe.close()
        (state / "exit").touch()
        proc.wait(10)


REAL_WORKER = textwrap.dedent("""
    import ctypes, json, os, sys, time
    import nvidia.cuda_runtime
    state = sys.argv[1]
    libdir = os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib")
    rt = ctypes.CDLL(os.path.join(libdir, "libcudart.so.12"))
    class Dim3(ctypes.Structure):
        _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]
    rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    open(os.path.join(state, "opened"), "w").close()
    while not os.path.exists(os.path.join(state, "go")):
        time.sleep(0.01)
    seen = {}
    def call(name, *args):
        seen.setdefault(name, []).append(getattr(rt, name)(*args))
    buf = ctypes.create_string_buffer(4096)
    ptr = ctypes.c_void_p()
    for _ in range(3):
        call("cudaMalloc", ctypes.byref(ptr), 1 << 20)
    for _ in range(4):
        call("cudaMemcpy", buf, buf, 4096, 1)
    for _ in range(5):
        call("cudaLaunchKernel", None, Dim3(1, 1, 1), Dim3(32, 1, 1), None, 0, None)
    for _ in range(2):
        call("cudaDeviceSynchronize")
    call("cudaStreamSynchronize", None)
    with open(os.path.join(state, "seen.json"), "w") as out:
        json.dump(seen, out)
    open(os.path.join(state, "done"), "w").close()
    while not os.path.exists(os.path.join(state, "exit")):
        time.sleep(0.01)
""")


def test_the_real_cuda_runtime_of_a_pip_wheel(tmp_path: Path) -> None:
    """The libcudart.so.12 PyTorch wheels depend on (nvidia-cuda-runtime-cu12), loaded from
    site-packages as PyTorch loads it. With no driver every call fails; the probe must count
    each call and each return code exactly as the program saw them."""
    if importlib.util.find_spec("nvidia.cuda_runtime") is None:
        pytest.skip("nvidia-cuda-runtime-cu12 is not installed (pip install -e .[test])")
    state = tmp_path / "real"
    state.mkdir()
    script = tmp_path / "real_worker.py"
    script.write_text(REAL_WORKER)
    proc = subprocess.Popen([sys.executable, str(script), str(state)])
    probe = EbpfProbe(pids=[proc.pid], groups="cuda")
    try:
        deadline = time.monotonic() + 30
        while not (state / "opened").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        probe.open()
        assert probe.status == "ok", probe.reason
        (lib,) = probe.info["libraries"]
        assert lib["kind"] == "cudart" and "nvidia/cuda_runtime/lib/libcudart.so.12" in lib["path"]
        assert lib["functions"] >= 14
        (state / "go").touch()
        while not (state / "done").exists() and time.monotonic() < deadline + 30:
            time.sleep(0.01)
        seen = json.loads((state / "seen.json").read_text())
        want_calls = {fn: len(codes) for fn, codes in seen.items()}
        want_errors: dict[tuple[str, str], int] = {}
        for fn, codes in seen.items():
            for code in codes:
                if code:
                    want_errors[(fn, str(code))] = want_errors.get((fn, str(code)), 0) + 1
        snap = wait_values(probe, lambda s: table(s, "ebpf.cuda.calls", proc.pid) == want_calls)
        assert table(snap, "ebpf.cuda.calls", proc.pid) == want_calls
        assert table(snap, "ebpf.cuda.errors", proc.pid, ("fn", "code")) == want_errors
        assert table(snap, "ebpf.cuda.memcpy_bytes", proc.pid, ("fn", "kind")) == {
            ("cudaMemcpy", "HtoD"): 4 * 4096}
        assert "cudaMalloc" not in table(snap, "ebpf.cuda.alloc_bytes", proc.pid)  # all failed
    finally:
        probe.close()
        (state / "exit").touch()
        proc.wait(10)


def _device_of(path: Path) -> str:
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    try:
        text = Path(f"/sys/dev/block/{major}:{minor}/uevent").read_text()
    except OSError:
        return f"{major}:{minor}"
    for line in text.splitlines():
        if line.startswith("DEVNAME="):
            return line.split("=", 1)[1]
    return f"{major}:{minor}"


def test_block_io_and_run_queue_latency(tmp_path: Path) -> None:
    dev = _device_of(tmp_path)
    if not Path(f"/sys/block/{dev}").exists():
        pytest.skip(f"{tmp_path} is not on a block device ({dev})")
    probe = EbpfProbe(groups="block,sched", interval_ms=100)
    probe.open()
    try:
        before = wait_values(probe, lambda s: "ebpf.sched.runq_waits" in s)
        ios_before = table(before, "ebpf.block.ios", None, ("dev",)).get(dev, 0.0)
        count = 200
        subprocess.run(["dd", "if=/dev/zero", f"of={tmp_path / 'direct.bin'}", "bs=4096",
                        f"count={count}", "oflag=direct"], check=True, capture_output=True)
        hogs = [subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\n"
                                  "while time.time()-t<1.5: pass"]) for _ in range(4)]
        for hog in hogs:
            hog.wait()
        snap = wait_values(probe, lambda s: table(s, "ebpf.block.ios", None, ("dev",))
                           .get(dev, 0.0) >= ios_before + count)
        ios = table(snap, "ebpf.block.ios", None, ("dev",))[dev]
        assert ios >= ios_before + count
        total = table(snap, "ebpf.block.latency_ns_total", None, ("dev",))[dev]
        assert total > 0
        waits = snap["ebpf.sched.runq_waits"]
        assert waits > before["ebpf.sched.runq_waits"]
        assert snap["ebpf.sched.runq_latency_ns_total"] > before["ebpf.sched.runq_latency_ns_total"]
        bucketed = sum(v for n, v in snap.items() if n.startswith("ebpf.sched.runq_lat_hist"))
        assert abs(bucketed - waits) <= 0.01 * waits + 100
    finally:
        probe.close()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def test_tcp_retransmissions_per_flow(tmp_path: Path) -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 is not installed")
    tag = uuid.uuid4().hex[:6]
    ns_a, ns_b, va, vb = f"rvt-a-{tag}", f"rvt-b-{tag}", f"rva{tag}", f"rvb{tag}"
    port = 40000 + int(tag[:3], 16) % 20000
    server_code = (f"import socket,time\ns=socket.socket()\ns.bind(('10.77.0.2',{port}))\n"
                   "s.listen()\nc,_=s.accept()\nc.settimeout(20)\n"
                   "while c.recv(65536): pass\n")
    client_code = (f"import socket,time\nc=socket.create_connection(('10.77.0.2',{port}))\n"
                   "c.setblocking(False)\nt=time.time()\n"
                   "while time.time()-t<6:\n"
                   "    try: c.send(b'x'*65536)\n"
                   "    except BlockingIOError: time.sleep(0.01)\n")
    procs: list[subprocess.Popen[bytes]] = []
    probe = EbpfProbe(groups="tcp", interval_ms=100)
    try:
        _ip("netns", "add", ns_a)
        _ip("netns", "add", ns_b)
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", ns_a)
        _ip("link", "set", vb, "netns", ns_b)
        _ip("-n", ns_a, "addr", "add", "10.77.0.1/24", "dev", va)
        _ip("-n", ns_b, "addr", "add", "10.77.0.2/24", "dev", vb)
        _ip("-n", ns_a, "link", "set", va, "up")
        _ip("-n", ns_b, "link", "set", vb, "up")
        probe.open()
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns_b, sys.executable, "-c",
                                       server_code]))
        time.sleep(0.5)
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns_a, sys.executable, "-c",
                                       client_code]))
        time.sleep(1.0)
        _ip("-n", ns_b, "link", "set", vb, "down")  # segments to the server are dropped
        time.sleep(2.5)
        _ip("-n", ns_b, "link", "set", vb, "up")

        def flow(snap: dict[str, float]) -> dict[Any, float]:
            return {k: v for k, v in table(snap, "ebpf.tcp.retransmits", None,
                                           ("daddr", "dport")).items()
                    if k == ("10.77.0.2", str(port))}

        snap = wait_values(probe, lambda s: bool(flow(s)), timeout_s=15)
        assert flow(snap) and next(iter(flow(snap).values())) >= 1
        assert any(n.startswith("ebpf.tcp.retransmits_by_task{") for n in snap)
    finally:
        probe.close()
        for proc in procs:
            proc.kill()
            proc.wait()
        for ns in (ns_a, ns_b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_no_cuda_process_is_a_clear_degraded_status(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    probe = EbpfProbe(pids=[sleeper.pid], groups="cuda,nccl")
    try:
        probe.open()
        assert probe.status == "degraded"
        assert "no selected process maps a CUDA or NCCL library" in probe.reason
        assert f"pid {sleeper.pid}" in probe.reason
        for _ in range(3):
            assert not probe.refresh()
            probe.read(np.empty(0))
    finally:
        probe.close()
        sleeper.kill()
        sleeper.wait()


def test_chrome_trace_capture(libs: Path, tmp_path: Path) -> None:
    script = ["cudaMemcpy 4096 1", "cudaDeviceSynchronize", "ncclAllReduce 1000 9",
              "cudaMalloc 2048", "cudaFree"]
    work = workload.Workload(libs, tmp_path / "w", script, 3)
    try:
        work.wait_for("opened")
        result = capture(TargetSelector(frozenset({work.pid})), 3.0, 10_000,
                         groups=("cuda", "nccl"), on_attached=lambda: work.touch("go"))
        work.wait_for("done")
        assert not result.truncated and result.lost_events == 0
        assert result.counts() == {"cudaMemcpy": 3, "cudaDeviceSynchronize": 3,
                                   "ncclAllReduce": 3, "cudaMalloc": 3, "cudaFree": 3}
        out = tmp_path / "trace.json"
        result.write(out)
        trace = json.loads(out.read_text())
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert all(e["pid"] == work.pid and e["tid"] == work.pid for e in events)
        sync = [e for e in events if e["name"] == "cudaDeviceSynchronize"]
        assert all(e["dur"] >= workload.DELAYS_US["SYNC_US"] for e in sync)
        memcpy = next(e for e in events if e["name"] == "cudaMemcpy")
        assert memcpy["args"] == {"ret": 0, "bytes": 4096, "kind": "HtoD"}
        nccl = next(e for e in events if e["name"] == "ncclAllReduce")
        assert nccl["args"]["dtype"] == "bfloat16" and nccl["args"]["bytes"] == 2000
        free = next(e for e in events if e["name"] == "cudaFree")
        assert free["args"]["bytes"] == 2048
        starts = [e["ts"] for e in events]
        assert starts == sorted(starts)
        names = [e for e in trace["traceEvents"] if e["ph"] == "M"]
        assert any("fakework" in e["args"]["name"] for e in names)
        assert trace["otherData"]["clock"] == "CLOCK_MONOTONIC"
    finally:
        work.stop()


def test_capture_stops_at_the_event_limit(libs: Path, tmp_path: Path) -> None:
    work = workload.Workload(libs, tmp_path / "w", ["cudaLaunchKernel"], 500)
    try:
        work.wait_for("opened")
        result = capture(TargetSelector(frozenset({work.pid})), 20.0, 50, groups=("cuda",),
                         on_attached=lambda: work.touch("go"))
        assert result.truncated
        assert 50 <= result.counts()["cudaLaunchKernel"] < 500
    finally:
        work.stop()


def test_trace_command_status_and_capture(libs: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    work = workload.Workload(libs, tmp_path / "w", ["cudaLaunchKernel"], 2)
    try:
        work.wait_for("opened")
        assert cli_main(["trace", "--status", "--json", "--pid", str(work.pid)]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["environment"]["privileged"] is True
        (proc,) = report["processes"]
        assert proc["pid"] == str(work.pid) and proc["comm"] == "fakework"
        assert {lib["kind"]: lib["traced_functions"] for lib in proc["libraries"]} == {
            "cudart": 9, "cuda": 11, "nccl": 9}

        out = tmp_path / "cli.json"
        assert cli_main(["trace", "--chrome-trace", str(out), "--duration", "1", "--pid",
                         str(work.pid), "--groups", "cuda"]) == 0
        assert "events to" in capsys.readouterr().out
        assert "traceEvents" in json.loads(out.read_text())
        assert cli_main(["trace", "--duration", "0"]) == 2
    finally:
        work.stop()
