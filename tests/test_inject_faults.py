"""Each fault injector changes the machine the way it says, records its episode, and undoes
itself. Real stress-ng, fio, dd, tc, nftables and namespaces; no mocks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from reveal.inject import processes
from reveal.inject.cleanup import read_hugepages, snapshot
from reveal.inject.faults import FAULTS, FaultContext, make_fault, run_episode
from reveal.inject.groundtruth import EventLog, load_episodes
from reveal.inject.jobcgroup import JobCgroup
from reveal.inject.veth_pair import NetnsPair

pytestmark = pytest.mark.root

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, sysctl)")


def _own_state() -> dict[str, object]:
    """What this test process's faults could leave on the host: the suite's namespaces,
    interfaces, temp files, cgroups and processes named or tagged with this process's pid
    (another pytest-xdist worker's fault tests make their own beside it), and the root
    namespace's qdiscs and nftables tables. ``vm.nr_hugepages`` is host-wide and is
    left to the HugePages test, the one that changes it here."""
    state = snapshot(owners=(os.getpid(),))
    del state["nr_hugepages"]
    return state


def _in_background(fault, duration_s: float, log: EventLog):  # type: ignore[no-untyped-def]
    result: dict[str, object] = {}

    def target() -> None:
        result["episode"] = run_episode(fault, duration_s, log)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


def _tree(fault) -> list[psutil.Process]:  # type: ignore[no-untyped-def]
    procs = []
    for proc in fault.procs:
        try:
            parent = psutil.Process(proc.pid)
            procs += [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return procs


def _cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            continue
    return total


def test_cpu_contention_burns_cpu_and_records_ground_truth(workdir: Path) -> None:
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng not installed")
    log = EventLog(workdir)
    before_ns = time.monotonic_ns()
    fault = make_fault("cpu_contention", "high", FaultContext(workdir))
    thread, result = _in_background(fault, 3.0, log)
    time.sleep(2.5)
    tree = _tree(fault)
    burnt = _cpu_seconds(tree)  # the machine is shared: ask for half a core
    thread.join()
    assert burnt > 0.5 * 2.0, burnt
    [episode] = load_episodes(workdir)
    assert episode == result["episode"]
    assert episode.kind == "cpu_contention" and episode.subsystem == "cpu"
    assert before_ns <= episode.start_ns < episode.end_ns <= time.monotonic_ns()
    assert 3.0 <= episode.duration_s < 8.0
    assert len(tree) >= 3  # stress-ng and its two workers...
    assert not any(proc.is_running() for proc in tree)  # ...all gone


def test_memory_pressure_holds_a_bounded_allocation(workdir: Path) -> None:
    if shutil.which("stress-ng") is None:
        pytest.skip("stress-ng not installed")
    fault = make_fault("memory_pressure", "low", FaultContext(workdir))
    thread, _ = _in_background(fault, 4.0, EventLog(workdir))
    time.sleep(3.0)
    resident = 0
    tree = _tree(fault)
    for proc in tree:
        try:
            resident += proc.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    thread.join()
    assert fault.params["bytes_used"] <= 1 << 30
    assert resident > 0.5 * fault.params["bytes_used"], resident
    assert tree and not any(proc.is_running() for proc in tree)


def test_writeback_storm_dirties_pages_then_syncs_and_deletes(workdir: Path) -> None:
    fault = make_fault("writeback_storm", "low", FaultContext(workdir))
    thread, result = _in_background(fault, 2.0, EventLog(workdir))
    peak = 0
    while thread.is_alive():
        meminfo = Path("/proc/meminfo").read_text().split("\n")
        dirty = next(int(line.split()[1]) for line in meminfo if line.startswith("Dirty:"))
        peak = max(peak, dirty * 1024)
        time.sleep(0.1)
    assert peak > 0.3 * fault.params["bytes"]
    assert not (workdir / "writeback.dat").exists()
    assert result["episode"].duration_s >= fault.params["hold_s"]  # type: ignore[union-attr]


def test_disk_burst_reads_and_writes_the_disk(workdir: Path) -> None:
    """fio first lays its 256 MiB file out through the page cache, then reads and writes
    it with O_DIRECT: 4 s leave time for both, and dirty pages another test left are
    written back first, so that the layout is not held behind them."""
    fault = make_fault("disk_burst", "high", FaultContext(workdir))
    os.sync()
    before = psutil.disk_io_counters()
    run_episode(fault, 4.0, EventLog(workdir))
    after = psutil.disk_io_counters()
    assert after.write_bytes - before.write_bytes > 10 << 20
    assert not (workdir / "disk_burst.dat").exists()


@needs_root
def test_hugepages_are_reserved_then_restored(workdir: Path) -> None:
    original = read_hugepages()
    fault = make_fault("hugepages_reserved", "low", FaultContext(workdir))
    thread, _ = _in_background(fault, 1.5, EventLog(workdir))
    time.sleep(0.7)
    during = read_hugepages()
    thread.join()
    assert during is not None and original is not None
    assert during > original
    assert read_hugepages() == original


def _udp_delivery(pair: NetnsPair, count: int) -> int:
    """Send ``count`` datagrams from namespace A to B; how many arrived."""
    script = ("import socket,sys,time\n"
              "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
              "s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,1<<22)\n"
              f"s.bind(('{pair.addrs[1]}',29700));s.settimeout(1.0)\n"
              "print('ready',flush=True);n=0\n"
              "try:\n  while True: s.recv(64); n+=1\n"
              "except socket.timeout: pass\nprint(n)\n")
    import subprocess
    import sys

    recv = subprocess.Popen([*pair.exec_prefix(1), sys.executable, "-c", script],
                            stdout=subprocess.PIPE, text=True)
    assert recv.stdout is not None
    assert recv.stdout.readline().strip() == "ready"
    send = (f"import socket,time\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
            f"for i in range({count}):\n s.sendto(b'x',('{pair.addrs[1]}',29700))\n"
            f" if i%200==0: time.sleep(0.002)\n")
    processes.run([*pair.exec_prefix(0), sys.executable, "-c", send])
    out, _ = recv.communicate(timeout=30)
    return int(out.split()[-1])


@needs_root
def test_packet_loss_drops_a_share_of_veth_packets_only_in_the_suite_namespaces(
        workdir: Path) -> None:
    host_before = _own_state()
    with NetnsPair(tag="t") as pair:
        fault = make_fault("packet_loss", "high", FaultContext(workdir, pair))
        if fault.check():
            pytest.skip(fault.check())
        assert _udp_delivery(pair, 2000) == 2000
        thread, _ = _in_background(fault, 6.0, EventLog(workdir))
        time.sleep(1.0)
        assert _own_state()["qdiscs"] == host_before["qdiscs"]
        assert _own_state()["nft"] == host_before["nft"]
        delivered = _udp_delivery(pair, 4000)
        thread.join()
        assert 0.90 * 4000 < delivered < 0.99 * 4000  # 5 % ± binomial noise
        assert _udp_delivery(pair, 1000) == 1000  # rule removed
    assert _own_state() == host_before


@needs_root
def test_throttle_and_udp_flood_act_on_the_veth(workdir: Path) -> None:
    with NetnsPair(tag="t") as pair:
        context = FaultContext(workdir, pair)
        throttle = make_fault("net_throttle", "high", context)
        thread, _ = _in_background(throttle, 1.5, EventLog(workdir))
        time.sleep(0.7)
        shown = processes.run([*pair.exec_prefix(0), "tc", "qdisc", "show", "dev",
                               pair.ifnames[0]]).stdout
        thread.join()
        assert "tbf" in shown
        assert "tbf" not in processes.run([*pair.exec_prefix(0), "tc", "qdisc", "show", "dev",
                                           pair.ifnames[0]]).stdout

        def rx_packets() -> int:
            text = processes.run([*pair.exec_prefix(1), "cat", "/proc/net/dev"]).stdout
            line = next(row for row in text.splitlines() if pair.ifnames[1] in row)
            return int(line.split(":")[1].split()[1])

        before = rx_packets()
        flood = make_fault("udp_flood", "low", context)
        episode = run_episode(flood, 2.0, EventLog(workdir))
        received = rx_packets() - before
        assert received > 0.3 * flood.params["pps"] * 1.5
        assert episode.kind == "udp_flood"


def test_every_fault_declares_bounded_intensities() -> None:
    for kind, cls in FAULTS.items():
        assert cls.kind == kind and cls.subsystem in {"cpu", "memory", "storage", "network"}
        assert {"low", "high"} <= set(cls.INTENSITIES)


@needs_root
def test_mtu_shrink_lowers_the_veth_mtu_then_restores_it(workdir: Path) -> None:
    def mtu(pair: NetnsPair, side: int) -> int:
        path = f"/sys/class/net/{pair.ifnames[side]}/mtu"
        return int(processes.run([*pair.exec_prefix(side), "cat", path]).stdout)

    host_before = _own_state()
    with NetnsPair(tag="t") as pair:
        before = (mtu(pair, 0), mtu(pair, 1))
        fault = make_fault("mtu_shrink", "high", FaultContext(workdir, pair))
        thread, result = _in_background(fault, 1.5, EventLog(workdir))
        time.sleep(0.8)
        during = (mtu(pair, 0), mtu(pair, 1))
        thread.join()
        assert during == (576, 576) and before[0] > 576
        assert (mtu(pair, 0), mtu(pair, 1)) == before
        episode = result["episode"]
        assert episode.kind == "mtu_shrink" and episode.subsystem == "network"
        assert episode.detail["mtu_before_bytes"] == before[0]
        assert set(pair.names) <= set(episode.detail["where"])
    assert _own_state() == host_before


@needs_root
def test_rt_hog_runs_one_fifo_busy_loop_on_one_cpu_and_is_gone_after(workdir: Path) -> None:
    fault = make_fault("rt_hog", "high", FaultContext(workdir))
    if fault.check():
        pytest.skip(fault.check())
    thread, result = _in_background(fault, 2.0, EventLog(workdir))
    time.sleep(1.2)
    tree = _tree(fault)
    policies = [os.sched_getscheduler(p.pid) for p in tree]
    affinities = [p.cpu_affinity() for p in tree]
    burnt = _cpu_seconds(tree)
    thread.join()
    assert os.SCHED_FIFO in policies
    assert all(len(cpus) == 1 for cpus in affinities)
    assert burnt > 0.3  # a busy loop, on a shared host
    assert result["episode"].detail["cpu_list"] == affinities[0]
    assert not any(p.is_running() for p in tree)


@needs_root
def test_affinity_squeeze_pins_every_job_thread_to_one_cpu_and_restores_each(
        tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU here")
    cgroup = JobCgroup().create()
    proc = None
    try:
        if not any((p / "cpu.max").is_file() or (p / "cpu.cfs_quota_us").is_file()
                   for p in cgroup.paths):
            pytest.skip("no CPU controller with a quota file here")
        # a job with two busy threads, one of them already narrowed by the job itself
        proc = subprocess.Popen([sys.executable, "-c",
                                 "import threading\n"
                                 "def spin():\n    while True: pass\n"
                                 "threading.Thread(target=spin, daemon=True).start()\n"
                                 "spin()\n"])
        cgroup.add(proc.pid)
        deadline = time.monotonic() + 5.0
        while len(psutil.Process(proc.pid).threads()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tids = sorted(t.id for t in psutil.Process(proc.pid).threads())
        first = min(os.sched_getaffinity(0))
        os.sched_setaffinity(tids[-1], {first})
        before = {tid: os.sched_getaffinity(tid) for tid in tids}
        fault = make_fault("affinity_squeeze", "high", FaultContext(tmp_path))
        assert fault.check() is None
        thread = threading.Thread(target=run_episode, args=(fault, 1.5, EventLog(tmp_path)))
        thread.start()
        time.sleep(0.8)
        during = {tid: os.sched_getaffinity(tid) for tid in tids}
        thread.join()
        after = {tid: os.sched_getaffinity(tid) for tid in tids}
        last = {max(os.sched_getaffinity(0))}
        assert all(cpus == last for cpus in during.values())
        assert after == before  # each thread's own, the narrowed one too
        episode = load_episodes(tmp_path)[0]
        assert episode.kind == "affinity_squeeze" and episode.subsystem == "cpu"
        assert episode.detail["cpu_list"] == sorted(last)
        assert episode.detail["threads"] >= 2
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        cgroup.close()


def test_affinity_squeeze_keeps_at_least_one_cpu_and_the_highest_numbered() -> None:
    from reveal.inject.faults.affinity import squeezed_cpus

    assert squeezed_cpus({0, 1, 2, 3}, 0.0) == {3}
    assert squeezed_cpus({0, 1, 2, 3}, 0.5) == {2, 3}
    assert squeezed_cpus({5}, 0.5) == {5}
