"""eBPF tracing parts that need no privilege: ELF reading, target discovery on the real
/proc, tenant-safe labels and paths, program generation, bpftrace output parsing, and the
"cannot trace here" reasons (not root, no bpftrace, no tracefs)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from reveal.collect.ebpf.elf import ElfError, ElfInfo, read_elf
from reveal.collect.ebpf.functions import FUNCTION_IDS, FUNCTIONS, functions_of
from reveal.collect.ebpf.parse import BatchAssembler, BatchConverter, parse_key
from reveal.collect.ebpf.planning import (
    ExportCache,
    ProcessLabels,
    choose_python_source,
    library_plans,
)
from reveal.collect.ebpf.probe import EbpfProbe, parse_groups, parse_pids
from reveal.collect.ebpf.scripts import (
    ATTACHED_MARKER,
    BATCH_MARKER,
    FINAL_MARKER,
    InterpreterPlan,
    LibraryPlan,
    ProgramPlan,
    aggregation_program,
    capture_program,
    checked_path,
)
from reveal.collect.ebpf.targets import (
    TargetSelector,
    descendants,
    read_cgroup,
    safe_label,
    scan,
)
from reveal.collect.gpu_procs import GpuProcessProbe
from reveal.collect.probe import REGISTRY, ProbeUnavailable
from reveal.frame import format_channel, parse_channel

_spec = importlib.util.spec_from_file_location(
    "ebpf_workload", Path(__file__).parent / "fixtures" / "ebpf" / "workload.py")
assert _spec is not None and _spec.loader is not None
workload = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(workload)

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    return workload.build(tmp_path_factory.mktemp("fakecuda"))


# -- ELF --------------------------------------------------------------------------------------
def test_elf_exports_of_the_stand_in_libraries(libs: Path) -> None:
    for name, kind in (("libcudart.so.12", "cudart"), ("libcuda.so.1", "cuda"),
                       ("libnccl.so.2", "nccl")):
        exported = read_elf(str(libs / name)).functions
        traced = {fn.name for fn in functions_of(kind)}
        assert traced & set(exported), name
        defined_in_c = {fn for fn in traced
                        if f" {fn}(" in (workload.HERE / dict(
                            (n, s) for s, n in workload.LIBRARIES)[name]).read_text()}
        assert defined_in_c <= set(exported)
        assert not (set(exported) - defined_in_c) & traced


def test_elf_rejects_what_is_not_elf64(tmp_path: Path, libs: Path) -> None:
    text = tmp_path / "libcudart.so.12"
    text.write_text("#!/bin/sh\n")
    with pytest.raises(ElfError):
        read_elf(str(text))
    cut = tmp_path / "cut.so"
    cut.write_bytes((libs / "libnccl.so.2").read_bytes()[:200])
    with pytest.raises(ElfError):
        read_elf(str(cut))


def test_elf_finds_python_usdt_notes() -> None:
    python = Path("/usr/bin/python3.11")
    if not python.exists():
        pytest.skip("no Debian python3.11 with USDT notes here")
    info = read_elf(str(python))
    if not info.usdt:
        pytest.skip(f"{python} was built without USDT probes")
    assert ("python", "function__entry") in info.usdt
    assert "_PyEval_EvalFrameDefault" in info.functions


def test_python_source_choice() -> None:
    both = ElfInfo({"_PyEval_EvalFrameDefault": 1}, {("python", "function__entry")})
    frame_only = ElfInfo({"_PyEval_EvalFrameDefault": 1})
    usdt_only = ElfInfo({}, {("python", "function__entry")})
    assert choose_python_source(both, (3, 10)) == "usdt"
    assert choose_python_source(both, (3, 11)) == "eval_frame"  # 3.11 fires USDT only when
    assert choose_python_source(both, None) == "eval_frame"     # line tracing is on
    assert choose_python_source(frame_only, (3, 9)) == "eval_frame"
    assert choose_python_source(usdt_only, (3, 12)) == "usdt"
    assert choose_python_source(ElfInfo(), (3, 10)) is None
    assert choose_python_source(both, (3, 12), "usdt") == "usdt"
    assert choose_python_source(frame_only, (3, 10), "usdt") is None


# -- function table ----------------------------------------------------------------------------
def test_function_table_is_consistent() -> None:
    names = [fn.name for fn in FUNCTIONS]
    assert len(names) == len(set(names))
    assert {n: i for i, n in enumerate(names)} == FUNCTION_IDS
    for fn in FUNCTIONS:
        if fn.role == "memcpy":
            assert fn.bytes_arg is not None and (fn.kind_arg is None) != (fn.kind is None)
        if fn.role == "nccl":
            assert fn.bytes_arg is not None and fn.dtype_arg is not None
        if fn.role in ("malloc", "free"):
            assert fn.ptr_arg is not None
    wanted = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpy", "cudaMemcpyAsync",
              "cudaMalloc", "cudaFree", "cudaDeviceSynchronize", "cudaStreamSynchronize",
              "cudaEventSynchronize", "cuLaunchKernel", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2",
              "cuMemAlloc_v2", "ncclAllReduce", "ncclReduce", "ncclBroadcast", "ncclAllGather",
              "ncclReduceScatter", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"}
    assert wanted <= set(names)


# -- program generation -----------------------------------------------------------------------
@pytest.mark.parametrize("path", ['/tmp/a"b/libcudart.so', "/tmp/a b/libcuda.so.1",
                                  "/tmp/x\n/libnccl.so.2", "/tmp/../etc/libcuda.so.1",
                                  "relative/libcuda.so.1", "/tmp/x}{/libcuda.so",
                                  "/tmp/a$(reboot)/libcuda.so.1"])
def test_unsafe_attach_paths_never_reach_a_program(path: str) -> None:
    with pytest.raises(ValueError):
        checked_path(path)
    plan = ProgramPlan((LibraryPlan(path, functions_of("cudart")),))
    with pytest.raises(ValueError):
        aggregation_program(plan)


def test_aggregation_program_prints_only_per_interval() -> None:
    plan = ProgramPlan((LibraryPlan("/opt/x/libcudart.so.12", functions_of("cudart")),
                        LibraryPlan("/proc/42/map_files/7f00-7f80", functions_of("nccl"))),
                       (InterpreterPlan("/usr/lib/libpython3.11.so.1.0", "eval_frame"),),
                       frozenset({"tcp", "block", "sched"}), 250)
    text = aggregation_program(plan)
    assert text.count("interval:ms:250 {") == 1
    printfs = [line.strip() for line in text.splitlines() if "printf(" in line]
    assert sorted(printfs) == sorted([f'printf("{ATTACHED_MARKER}\\n");',
                                      f'printf("{BATCH_MARKER}\\n");',
                                      f'printf("{FINAL_MARKER}\\n");'])
    interval = text.split("interval:ms:250 {", 1)[1].split("}", 1)[0]
    printed = set(re.findall(r"print\(@(\w+)\);", interval))
    defined = set(re.findall(r"@(\w+)", text.split("interval:ms:", 1)[0]))
    cleared = set(re.findall(r"clear\(@(\w+)\);", text.split("END {", 1)[1]))
    assert printed and printed <= defined
    assert cleared == defined  # nothing left for bpftrace to dump at exit
    for name in ("maxlat", "blkmax", "rqmax"):
        assert f"clear(@{name});" in interval
    assert "/@cudapid[pid]/" in text and "_PyEval_EvalFrameDefault" in text


def test_launches_can_be_counted_without_a_return_probe() -> None:
    lib = LibraryPlan("/opt/x/libcudart.so.12", functions_of("cudart"))
    timed = aggregation_program(ProgramPlan((lib,)))
    counted = aggregation_program(ProgramPlan((lib,), launch_latency=False))
    assert "uretprobe:\"/opt/x/libcudart.so.12\":cudaLaunchKernel " in timed
    assert "uretprobe:\"/opt/x/libcudart.so.12\":cudaLaunchKernel " not in counted
    assert "uprobe:\"/opt/x/libcudart.so.12\":cudaLaunchKernel " in counted
    assert "uretprobe:\"/opt/x/libcudart.so.12\":cudaMemcpy " in counted


def test_capture_program_is_bounded() -> None:
    lib = LibraryPlan("/opt/x/libcudart.so.12", functions_of("cudart"))
    text = capture_program((lib,), frozenset({"block"}), 1500, 777)
    assert "interval:ms:1500 { exit(); }" in text.replace("\n  ", " ").replace("\n}", " }")
    assert text.count("if (@events >= 777) { exit(); }") == len(functions_of("cudart")) + 1
    with pytest.raises(ValueError):
        capture_program((lib,), frozenset(), 0, 10)


# -- parsing ----------------------------------------------------------------------------------
def _records(pid: int, calls: int, done: int, total: int, peak: int | None) -> list[dict]:
    memcpy, nccl, sync = (FUNCTION_IDS[n] for n in
                          ("cudaMemcpy", "ncclAllReduce", "cudaDeviceSynchronize"))
    recs = [
        {"type": "map", "data": {"@calls": {f"{pid},{memcpy}": calls, f"{pid},{sync}": 1}}},
        {"type": "stats", "data": {"@ret": {f"{pid},{memcpy}": {"count": done,
                                                                "average": 0, "total": total}}}},
        {"type": "hist", "data": {"@lat": {f"{pid},{memcpy}": [
            {"min": 262144, "max": 524287, "count": done}]}}},
        {"type": "map", "data": {"@err": {f"{pid},{memcpy},21": 1, f"{pid},{memcpy},5000": 2}}},
        {"type": "map", "data": {"@cpy": {f"{pid},{memcpy},1": 4096 * calls,
                                          f"{pid},{memcpy},5": 8}}},
        {"type": "map", "data": {"@nccl": {f"{pid},{nccl},9": 1000, f"{pid},{nccl},12": 7}}},
        {"type": "map", "data": {"@tcp": {"10.0.0.1,5201,fe80::1,40000": 3}}},
        {"type": "stats", "data": {"@rq": {"count": 10, "average": 5, "total": 50}}},
        {"type": "hist", "data": {"@rqhist": [{"min": 4, "max": 7, "count": 10}]}},
    ]
    if peak is not None:
        recs.append({"type": "map", "data": {"@maxlat": {f"{pid},{memcpy}": peak}}})
    return [*recs, {"type": "printf", "data": f"{BATCH_MARKER}\n"}]


def test_batches_become_channels() -> None:
    pid = os.getpid()
    assembler = BatchAssembler()
    converter = BatchConverter(ProcessLabels(TargetSelector(), "/proc"))
    first = assembler.feed(_records(pid, 4, 3, 900_000, 400_000)[:-1])
    assert first == []  # no marker yet
    (batch,) = assembler.feed([{"type": "printf", "data": f"{BATCH_MARKER}\n"}])
    values = converter.convert(batch)
    c, g = values.counters, values.gauges
    base = {"pid": str(pid), **{k: v for k, v in ProcessLabels(
        TargetSelector(), "/proc").process(pid).items() if k != "pid"}}

    def ch(metric: str, **labels: str) -> str:
        return format_channel(metric, {**base, **labels})

    assert c[ch("ebpf.cuda.calls", fn="cudaMemcpy")] == 4
    assert c[ch("ebpf.cuda.latency_ns_total", fn="cudaMemcpy")] == 900_000
    assert g[ch("ebpf.cuda.latency_ns_mean", fn="cudaMemcpy")] == 300_000
    assert g[ch("ebpf.cuda.latency_ns_max", fn="cudaMemcpy")] == 400_000
    assert g[ch("ebpf.cuda.in_flight", fn="cudaMemcpy")] == 1
    assert g[ch("ebpf.cuda.in_flight", fn="cudaDeviceSynchronize")] == 1  # never returned
    assert c[ch("ebpf.cuda.lat_hist", fn="cudaMemcpy", le="524288")] == 3
    assert c[ch("ebpf.cuda.errors", fn="cudaMemcpy", code="21")] == 1
    assert c[ch("ebpf.cuda.errors", fn="cudaMemcpy", code="other")] == 2
    assert c[ch("ebpf.cuda.memcpy_bytes", fn="cudaMemcpy", kind="HtoD")] == 4096 * 4
    assert c[ch("ebpf.cuda.memcpy_bytes", fn="cudaMemcpy", kind="invalid")] == 8
    assert c[ch("ebpf.nccl.bytes", fn="ncclAllReduce", dtype="bfloat16")] == 2000
    assert c[ch("ebpf.nccl.elements", fn="ncclAllReduce", dtype="invalid")] == 7
    assert c[format_channel("ebpf.tcp.retransmits", {"saddr": "10.0.0.1", "sport": "5201",
                                                     "daddr": "fe80::1", "dport": "40000"})] == 3
    # a wait under 1 µs lands in the first bounded bucket, [0, 1024) ns
    assert c["ebpf.sched.runq_waits"] == 10 and c["ebpf.sched.runq_lat_hist{le=1024}"] == 10

    # the next interval: means use the difference; no completion means NaN, not zero
    (batch,) = assembler.feed(_records(pid, 6, 5, 1_500_000, 350_000))
    g = converter.convert(batch).gauges
    assert g[ch("ebpf.cuda.latency_ns_mean", fn="cudaMemcpy")] == 300_000
    (batch,) = assembler.feed(_records(pid, 6, 5, 1_500_000, None))
    g = converter.convert(batch).gauges
    assert np.isnan(g[ch("ebpf.cuda.latency_ns_mean", fn="cudaMemcpy")])
    assert ch("ebpf.cuda.latency_ns_max", fn="cudaMemcpy") not in g

    assembler.feed([{"type": "printf", "data": f"{FINAL_MARKER}\n"}])
    assert assembler.done
    assert assembler.feed(_records(pid, 9, 9, 1, 1)) == []  # nothing after the final batch


def test_keys_parse() -> None:
    assert parse_key("1234,7") == (1234, 7)
    assert parse_key("10.0.0.1,80,::1,9") == ("10.0.0.1", 80, "::1", 9)


# -- targets and labels -----------------------------------------------------------------------
def test_tenant_names_cannot_break_channel_names(tmp_path: Path) -> None:
    hostile = "/kubepods/pod,x=1}{evil\n\x1b[31m" + "é" * 200
    fake = tmp_path / "proc" / "77"
    fake.mkdir(parents=True)
    (fake / "cgroup").write_text(f"0::{hostile}\n")
    label = read_cgroup(77, str(tmp_path / "proc"))
    assert len(label) <= 96 and label.isascii() and label.isprintable()
    name = format_channel("ebpf.cuda.calls", {"pid": "77", "cgroup": label, "fn": "cudaFree"})
    metric, labels = parse_channel(name)
    assert metric == "ebpf.cuda.calls" and set(labels) == {"pid", "cgroup", "fn"}
    assert safe_label("", 10) == "?"
    assert safe_label("abcdefghijkl", 8) == "abcde..."
    assert safe_label("abcdefghijkl", 8, keep_tail=True) == "...hijkl"


@needs_gcc
def test_scan_finds_the_mapped_libraries(libs: Path, tmp_path: Path) -> None:
    work = workload.Workload(libs, tmp_path / "w", ["cudaLaunchKernel"], 1)
    try:
        work.wait_for("opened")
        result = scan(TargetSelector(frozenset({work.pid})))
        proc = result.processes[work.pid]
        assert proc.labels["comm"] == "fakework"
        kinds = {f.kind: f for f in proc.libraries}
        assert set(kinds) == {"cudart", "cuda", "nccl"}
        assert kinds["cudart"].attach == str(libs / "libcudart.so.12")
        plans = dict(library_plans(result, ("cuda", "nccl"), ExportCache()))
        assert {fn.name for fn in plans[kinds["nccl"]].functions} >= {"ncclAllReduce",
                                                                       "ncclGroupEnd"}
        # skipped functions are left out; a library with none left is not attached
        skipped = dict(library_plans(result, ("cuda", "nccl"), ExportCache(),
                                     ("cudaLaunchKernel*", "cudaMemcpy*", "nccl*")))
        names = {fn.name for fn in skipped[kinds["cudart"]].functions}
        assert "cudaStreamSynchronize" in names
        assert not any(n.startswith(("cudaLaunchKernel", "cudaMemcpy")) for n in names)
        assert kinds["nccl"] not in skipped and kinds["cuda"] in skipped
        # the default selection (every process mapping a CUDA library) includes it too
        assert work.pid in scan(TargetSelector()).processes
        assert work.pid not in scan(TargetSelector(comm="nomatch*")).processes
    finally:
        work.stop()


@needs_gcc
def test_odd_or_deleted_library_paths_use_map_files(libs: Path, tmp_path: Path) -> None:
    odd = tmp_path / 'we ird"dir'
    odd.mkdir()
    for _, name in workload.LIBRARIES:
        shutil.copy(libs / name, odd / name)
    work = workload.Workload(odd, tmp_path / "w", ["cudaLaunchKernel"], 1,
                             exe=libs / "fakework")
    try:
        work.wait_for("opened")
        (odd / "libnccl.so.2").unlink()  # deleted while mapped
        files = {f.kind: f for f in scan(TargetSelector(frozenset({work.pid})))
                 .processes[work.pid].libraries}
        for file in files.values():
            assert file.attach.startswith(f"/proc/{work.pid}/map_files/"), file.attach
            assert checked_path(file.attach) == file.attach
            assert read_elf(file.attach).functions  # the kernel's link opens the very file
        plan = ProgramPlan((LibraryPlan(files["cudart"].attach, functions_of("cudart")),))
        assert "ird" not in aggregation_program(plan)
    finally:
        work.stop()


def test_pid_selection_includes_descendants() -> None:
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        found: set[int] = set()
        while len(found) < 2 and time.monotonic() < deadline:
            found = descendants([parent.pid])
            time.sleep(0.05)
        assert parent.pid in found and len(found) == 2
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def test_cgroup_glob_selects_processes(tmp_path: Path) -> None:
    root = workload.cgroup2_root()
    if os.geteuid() != 0:
        pytest.skip("needs root to create a cgroup")
    if root is None:
        pytest.skip("no cgroup v2 hierarchy here")
    group = root / f"reveal-test-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    inside, outside = subprocess.Popen(["sleep", "30"]), subprocess.Popen(["sleep", "30"])
    try:
        (group / "cgroup.procs").write_text(str(inside.pid))
        labels = ProcessLabels(TargetSelector(cgroup=f"*{group.name}*"), "/proc")
        assert labels.process(inside.pid)["cgroup"].endswith(group.name)
        assert labels.process(outside.pid) is None
    finally:
        for proc in (inside, outside):
            proc.kill()
            proc.wait()
        group.rmdir()


# -- options and the reasons the probe gives -------------------------------------------------
def test_probe_registration_and_options() -> None:
    assert REGISTRY["ebpf"].default_enabled is False
    assert REGISTRY["gpu_procs"] is GpuProcessProbe and GpuProcessProbe.default_enabled
    assert parse_pids("12, 13") == {12, 13} and parse_pids(None) == frozenset()
    assert parse_groups("cuda,tcp") == ("cuda", "tcp")
    with pytest.raises(ProbeUnavailable, match="unknown eBPF groups"):
        EbpfProbe(groups="cuda,gpu-magic")
    with pytest.raises(ProbeUnavailable, match="bad ebpf options"):
        EbpfProbe(pids="12;rm -rf /")
    assert EbpfProbe(skip="cudaLaunchKernel*, cudaMemcpy*").skip == ("cudaLaunchKernel*",
                                                                     "cudaMemcpy*")
    with pytest.raises(ProbeUnavailable, match=r"skip \['cudaLaunch'\] matches no traced"):
        EbpfProbe(skip="cudaLaunch")  # a typo would trace everything: refused


def test_missing_bpftrace_is_named() -> None:
    probe = EbpfProbe(bpftrace="/nonexistent/bpftrace")
    expected = "bpftrace not found" if os.geteuid() == 0 else "needs root"
    with pytest.raises(ProbeUnavailable, match=expected):
        probe.open()


_AS_NOBODY = textwrap.dedent("""
    import os
    from reveal.collect.ebpf.probe import EbpfProbe
    from reveal.collect.probe import ProbeUnavailable
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)  # everything is imported: only the probe's own checks run as nobody
    try:
        EbpfProbe().open()
    except ProbeUnavailable as exc:
        print(exc)
""")


def test_unprivileged_user_is_told_why() -> None:
    if os.geteuid() != 0:
        with pytest.raises(ProbeUnavailable, match="needs root or CAP_BPF"):
            EbpfProbe().open()
        return
    done = subprocess.run([sys.executable, "-c", _AS_NOBODY], capture_output=True, text=True,
                          timeout=60, check=False)
    assert "needs root or CAP_BPF+CAP_PERFMON" in done.stdout, done.stderr


_NO_TRACEFS = textwrap.dedent("""
    from reveal.collect.ebpf.probe import EbpfProbe
    from reveal.collect.probe import ProbeUnavailable
    try:
        EbpfProbe(groups="tcp,block,sched").open()
    except ProbeUnavailable as exc:
        print(exc)
""")


def test_missing_tracefs_is_named() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("bpftrace") is None:
        pytest.skip("needs root, unshare and bpftrace")
    # a private mount namespace where /sys/kernel (and so tracefs) is hidden by a tmpfs
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs none /sys/kernel && exec {sys.executable} -c '{_NO_TRACEFS}'"],
        capture_output=True, text=True, timeout=60, check=False)
    assert "tracepoint groups tcp, block, sched off" in done.stdout, done.stderr
    assert "tracefs" in done.stdout


# -- bounded channel counts ----------------------------------------------------------------

class _AllSelected:
    """A labeller that selects every pid (labels from the pid alone)."""

    def process(self, pid: int) -> dict[str, str]:
        return {"pid": str(pid), "comm": f"w{pid}", "cgroup": "/job"}

    def python_source(self, pid: int) -> str:
        return "eval_frame"

    def task(self, pid: int) -> dict[str, str]:
        return {"pid": str(pid), "comm": f"w{pid}"}

    def device(self, dev: int) -> str:
        return f"dev{dev}"


def _calls_batch(calls: dict[int, int], fid: int) -> list[dict[str, object]]:
    return [{"type": "map", "data": {"@calls": {f"{pid},{fid}": n
                                                for pid, n in calls.items()}}},
            {"type": "printf", "data": f"{BATCH_MARKER}\n"}]


def test_pids_beyond_the_cap_are_pooled_and_exited_ones_retired() -> None:
    from reveal.collect.ebpf.parse import Limits

    fid = FUNCTION_IDS["cudaLaunchKernel"]
    converter = BatchConverter(_AllSelected(), limits=Limits(max_pids=2))
    assembler = BatchAssembler()

    def calls(pid: int | str) -> str:
        return format_channel("ebpf.cuda.calls", {"pid": str(pid), "fn": "cudaLaunchKernel",
                                                  **({} if pid == "other" else
                                                     {"comm": f"w{pid}", "cgroup": "/job"})})

    kernel = {101: 50, 102: 500, 103: 5, 104: 300}
    (batch,) = assembler.feed(_calls_batch(kernel, fid))
    c = converter.convert(batch).counters
    # the two busiest of the first batch get channels, the rest are summed
    assert c == {calls(102): 500, calls(104): 300, calls("other"): 55}

    kernel = {101: 90, 102: 600, 103: 700, 104: 310}   # 103 became the busiest pooled pid
    (batch,) = assembler.feed(_calls_batch(kernel, fid))
    c = converter.convert(batch).counters
    assert c[calls("other")] == 790 and sum(c.values()) == sum(kernel.values())

    alive = {101, 102, 103}                             # 104 exited
    gone = converter.review(lambda family, key: key in alive)
    assert calls(104) in gone and all("pid=104" in name for name in gone)
    kernel = {101: 95, 102: 650, 103: 720, 104: 310}    # the kernel still holds 104's keys
    (batch,) = assembler.feed(_calls_batch(kernel, fid))
    c = converter.convert(batch).counters
    # 103 took the free slot: its channel counts from its promotion (700), the pooled
    # channel keeps what 103 counted before, so no channel goes back and nothing is lost
    assert c[calls(103)] == 20
    assert c[calls("other")] == 95 + 700
    assert calls(104) not in c
    assert sum(c.values()) == sum(v for pid, v in kernel.items() if pid != 104)
    assert converter.caps["proc"].own == {102, 103}

    alive = {102, 103}                                  # a pooled pid exits: still counted
    assert converter.review(lambda family, key: key in alive) == []
    (batch,) = assembler.feed(_calls_batch({101: 95, 102: 660, 103: 730, 104: 310}, fid))
    c = converter.convert(batch).counters
    assert c[calls("other")] == 795 and c[calls(103)] == 30


def test_channel_count_is_bounded_however_many_pids_call() -> None:
    from reveal.collect.ebpf.parse import Limits

    fids = [FUNCTION_IDS[n] for n in ("cudaLaunchKernel", "cudaMemcpy", "ncclAllReduce")]
    limits = Limits(max_pids=4, hist_buckets=8)
    converter = BatchConverter(_AllSelected(), limits=limits)
    assembler = BatchAssembler()
    names: set[str] = set()
    buckets = [{"min": 1 << k, "max": (2 << k) - 1, "count": 1} for k in range(40)]
    for wave in range(5):                               # 5 waves of 200 new pids
        pids = range(1000, 1200 + 200 * wave)            # kernel maps keep earlier pids
        keys = [f"{pid},{fid}" for pid in pids for fid in fids]
        recs = [{"type": "map", "data": {"@calls": {k: 3 for k in keys}}},
                {"type": "hist", "data": {"@lat": {k: buckets for k in keys}}},
                {"type": "printf", "data": f"{BATCH_MARKER}\n"}]
        (batch,) = assembler.feed(recs)
        values = converter.convert(batch)
        names.update(values.counters)
        hist = {n: v for n, v in values.counters.items()
                if n.startswith("ebpf.cuda.lat_hist") and "pid=other" in n
                and "cudaMemcpy" in n}
        assert len(hist) == 8 and sum(hist.values()) == 40 * (200 * (wave + 1) - 4)
        les = {parse_channel(n)[1]["le"] for n in hist}
        assert les == {"1024", "2048", "4096", "8192", "16384", "32768", "65536", "+Inf"}
    pids = {parse_channel(n)[1]["pid"] for n in names}
    assert len(pids) == 5  # 4 own + other, after 1000 processes
    assert len(names) <= 5 * len(fids) * (1 + 8)


def test_probe_retires_exited_processes_at_refresh(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid in (201, 202, 203):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(f"trainer{pid}\n")
        (proc / str(pid) / "cgroup").write_text("0::/job\n")
    probe = EbpfProbe(proc_root=str(proc), max_pids=2)
    fid = FUNCTION_IDS["cudaLaunchKernel"]
    probe._apply(_calls_batch({201: 10, 202: 20, 203: 1}, fid))
    assert probe._adopt_channels()
    assert {parse_channel(c)[1]["pid"] for c in probe.channels} == {"201", "202", "other"}
    (proc / "202" / "comm").unlink()
    (proc / "202" / "cgroup").unlink()
    (proc / "202").rmdir()
    assert probe._retire_exited()
    assert {parse_channel(c)[1]["pid"] for c in probe.channels} == {"201", "other"}
    probe._apply(_calls_batch({201: 15, 202: 20, 203: 4}, fid))
    probe._adopt_channels()
    out = np.full(len(probe.channels), np.nan)
    out[:] = probe._values
    got = {parse_channel(c)[1]["pid"]: v for c, v in zip(probe.channels, out, strict=True)
           if c.startswith("ebpf.cuda.calls")}
    assert got == {"201": 15, "other": 1, "203": 3}  # 203 promoted: counts from 1
    assert probe.info["channel_bounds"]["retired_pids"] == 1


def test_bounds_are_options() -> None:
    for key in ("max_pids", "max_flows", "hist_buckets"):
        assert key in EbpfProbe.options_help
    with pytest.raises(ProbeUnavailable, match="bad ebpf options"):
        EbpfProbe(max_pids="many")
    with pytest.raises(ProbeUnavailable, match="bad ebpf options"):
        EbpfProbe(hist_buckets=1)
