"""The fleet comparison on a real Dask cluster: a scheduler and two workers started here."""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fleet_hosts import GIB, Fault, fleet, one_host
from reveal.fleet.config import FleetConfig
from reveal.fleet.distributed import compare_fleet_dask, fleet_client
from reveal.fleet.engine import compare_fleet, host_features
from reveal.store.run_writer import write_run

distributed = pytest.importorskip("distributed")
TESTS = Path(__file__).resolve().parent
FAULT = Fault(2, memory_drop=GIB, span_s=(40.0, 70.0))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A ``dask scheduler`` and ``dask worker`` processes on localhost, on free ports."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(TESTS), os.environ.get("PYTHONPATH", "")]))
        self.logs: list[int] = []
        self.scheduler = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
             "--port", self.address.rsplit(":", 1)[1], "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=self._log(root / "scheduler.log"), env=env)
        self.workers = [subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.address,
             "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{i}",
             "--local-directory", str(root / f"w{i}"), "--host", "127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=self._log(root / f"w{i}.log"), env=env)
            for i in range(workers)]

    def _log(self, path: Path) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.logs.append(fd)
        return fd

    def close(self) -> None:
        """Workers first, while their scheduler still answers (a worker told to stop after
        its scheduler has gone waits for it to come back), then the scheduler."""
        for group in (self.workers, [self.scheduler]):
            for proc in group:
                if proc.poll() is None:
                    proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for fd in self.logs:
            os.close(fd)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def _client(address: str):
    client = distributed.Client(address, timeout="30s")
    client.wait_for_workers(2, timeout=120)
    return client


def _same(a, b) -> None:
    np.testing.assert_array_equal(a.scores, b.scores)
    np.testing.assert_array_equal(a.flagged, b.flagged)
    np.testing.assert_array_equal(a.peer_median, b.peer_median)
    assert a.hosts == b.hosts and a.columns == b.columns
    assert [(e.host, e.first, e.last, e.subsystem) for e in a.episodes] == \
        [(e.host, e.first, e.last, e.subsystem) for e in b.episodes]
    assert [r.channel for r in a.episodes[0].reasons] == [r.channel for r in b.episodes[0].reasons]
    assert a.traces.keys() == b.traces.keys()
    for host in a.traces:
        for k in a.traces[host]:
            np.testing.assert_array_equal(a.traces[host][k], b.traces[host][k])


def test_cluster_result_equals_in_process(cluster):
    tels = fleet(7, 90, seed=13, faults=(FAULT, Fault(5, hugepages=64)))
    config = FleetConfig(block_values=2_000)  # four time blocks
    local = compare_fleet([host_features(t, config) for t in tels], config=config)
    assert local.flagged_hosts() == ["host-2", "host-5"]
    with _client(cluster.address) as client:
        remote = compare_fleet_dask(tels, config, client=client)
        assert len(client.scheduler_info()["workers"]) == 2
    _same(local, remote)
    assert [c.host for c in remote.config_outliers] == ["host-5"]


def test_worker_killed_mid_run_job_finishes(cluster):
    n, seconds, seed = 10, 60, 14
    sources = [functools.partial(one_host, i, n, seconds, seed, (FAULT,), 0.8)
               for i in range(n)]
    config = FleetConfig()
    local = compare_fleet([host_features(s(), config) for s in sources], config=config)
    with _client(cluster.address) as client:
        out: dict = {}

        def job() -> None:
            out["result"] = compare_fleet_dask(sources, config, client=client)

        thread = threading.Thread(target=job)
        thread.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(client.processing().values()):
            time.sleep(0.05)
        time.sleep(1.0)  # a task or two under way on each worker
        assert thread.is_alive(), "the job finished before a worker could be killed"
        os.kill(cluster.workers[0].pid, signal.SIGKILL)
        thread.join(timeout=240)
        assert not thread.is_alive()
        assert cluster.workers[0].wait(timeout=10) == -signal.SIGKILL
        assert len(client.scheduler_info()["workers"]) == 1
    _same(local, out["result"])


def test_worker_killed_between_blocks_job_finishes(cluster):
    """A worker lost after the first time block: its hosts' features, the plan and the
    slicing layouts it held are made again elsewhere (none was scattered without lineage)."""
    tels = fleet(7, 90, seed=13, faults=(FAULT, Fault(5, hugepages=64)))
    config = FleetConfig(block_values=2_000)  # four time blocks
    local = compare_fleet([host_features(t, config) for t in tels], config=config)
    killed: list[str] = []

    def progress(message: str) -> None:
        if message.startswith("compared block 1/") and not killed:
            killed.append(message)
            os.kill(cluster.workers[0].pid, signal.SIGKILL)
            assert cluster.workers[0].wait(timeout=10) == -signal.SIGKILL

    with _client(cluster.address) as client:
        remote = compare_fleet_dask(tels, config, client=client, progress=progress)
        assert killed and not killed[0].endswith("/1")  # more blocks came after the kill
        assert len(client.scheduler_info()["workers"]) == 1
    _same(local, remote)


def test_unreachable_scheduler_is_one_line(tmp_path):
    paths = [str(write_run(t, tmp_path / t.host)) for t in fleet(3, 20, seed=15)]
    address = f"tcp://127.0.0.1:{_free_port()}"
    proc = subprocess.run([sys.executable, "-m", "reveal", "fleet", *paths, "--scheduler",
                           address, "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "cannot reach the Dask scheduler" in lines[0] and address in lines[0]


def test_local_cluster_by_default(tmp_path):
    tels = fleet(5, 60, seed=16, faults=(Fault(1, memory_drop=GIB, span_s=(20.0, 45.0)),))
    local = compare_fleet([host_features(t) for t in tels])
    with fleet_client(workers=2) as client:
        remote = compare_fleet_dask(tels, client=client)
    _same(local, remote)


def test_dask_counts_the_bytes_a_hosts_features_hold():
    """Dask's memory accounting sees a host's features (else it warns of unmanaged memory
    and could never spill them)."""
    from dask.sizeof import sizeof

    host = host_features(fleet(3, 60, seed=3)[0])
    assert sizeof(host) >= host.values.nbytes + host.start_ns.nbytes
    assert sizeof(host) < 4 * (host.values.nbytes + host.start_ns.nbytes) + 200_000
