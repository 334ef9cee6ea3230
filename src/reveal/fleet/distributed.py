"""The fleet comparison on Dask: per-host work as tasks, the peer comparison per time block.

    with fleet_client(workers=2) as client:          # a LocalCluster, or scheduler="tcp://..."
        result = compare_fleet_dask(sources, config, client=client)

Each host's features are one task (a run path or a loader callable travels, not the data:
the worker reads or makes the telemetry itself). The plan needs only small summaries. Each
time block is then one reduction task over all hosts × that block's windows × the shared
columns, fed by one slicing task per worker that cuts the block out of the features held
there (one array travels per worker and block, not one per host), so a task's memory stays
bounded by ``FleetConfig.block_values``. The result equals
:func:`reveal.fleet.engine.compare_fleet` on the same hosts: the same functions run, only
elsewhere. A worker lost mid-run costs its tasks, which Dask runs again on another worker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from reveal.errors import RevealError
from reveal.fleet.config import FleetConfig
from reveal.fleet.engine import (
    FleetPlan,
    assemble,
    host_block,
    host_columns,
    host_features,
    plan_fleet,
    run_block,
    trace_requests,
)
from reveal.fleet.peers import BlockResult
from reveal.fleet.records import FleetResult, HostFeatures, OwnVerdicts, summary
from reveal.frame import Telemetry

#: a host's data: telemetry as is, a run path (read by the worker), or a callable making it
HostSource = Telemetry | str | Path | Callable[[], Telemetry]
Progress = Callable[[str], None]
#: seconds to wait for a scheduler before saying it cannot be reached
CONNECT_TIMEOUT_S = 10.0
#: time blocks compared at once (each holds a copy of its share of every host's features)
BLOCKS_IN_FLIGHT = 2


def load_host(source: HostSource) -> Telemetry:
    """The telemetry of one host source (a run path is opened with ``open_source``)."""
    if isinstance(source, Telemetry):
        return source
    if callable(source):
        return source()
    from reveal.store.sources import open_source

    return open_source(source)


def unusable(host: str, reason: str) -> HostFeatures:
    """A host that could not be read or analysed: no windows, the reason as its warning."""
    return HostFeatures(host, np.zeros(0, np.int64), 0, 0, np.zeros((0, 0), np.float32), [],
                        [], np.zeros(0), warnings=[f"not compared: {reason}"])


def features_task(source: HostSource, config: FleetConfig,
                  baseline_dir: str | None = None) -> HostFeatures:
    """One host's features (a Dask task); with ``baseline_dir``, also the host scored
    against its own baseline found there by host name (:mod:`reveal.fleet.baselines`).
    A host that cannot be read or analysed comes back without windows, the reason in its
    warnings (see :func:`unusable`): the others are compared without it."""
    try:
        telemetry = load_host(source)
    except RevealError as exc:  # the fleet goes on without it, and says so
        return unusable(str(source) if isinstance(source, (str, Path)) else "a host", str(exc))
    fitted = None
    try:
        if baseline_dir:
            from reveal.fleet.baselines import own_baseline

            fitted = own_baseline(telemetry.host, baseline_dir)
        features = host_features(telemetry, config, baseline=fitted)
    except RevealError as exc:
        return unusable(telemetry.host, str(exc))
    if baseline_dir and fitted is None:
        features.warnings.append("no own baseline found for this host")
    return features


def _slice(features: Sequence[HostFeatures], layouts: Sequence[tuple[np.ndarray, np.ndarray]],
           first: int, stop: int, n_columns: int) -> np.ndarray:
    """Grid windows ``first:stop`` of several hosts, (hosts, B, K) float32 (see
    :func:`reveal.fleet.engine.host_block`)."""
    out = np.empty((len(features), stop - first, n_columns), dtype=np.float32)
    for i, (host, (column_map, slots)) in enumerate(zip(features, layouts, strict=True)):
        out[i] = host_block(host, column_map, slots, first, stop, n_columns)
    return out


def _block(plan: FleetPlan, b: int, config: FleetConfig, positions: Sequence[Sequence[int]],
           *stacks: np.ndarray) -> BlockResult:
    """Block ``b`` compared from the slices of each group of hosts (``positions``: each
    group's places in the plan's host order)."""
    parts: list[np.ndarray] = [np.empty((0, 0), np.float32)] * len(plan.hosts)
    for where, stack in zip(positions, stacks, strict=True):
        for p, part in zip(where, stack, strict=True):
            parts[p] = part
    return run_block(plan, parts, b, config)


def _by_worker(client: Any, futures: Sequence[Any]) -> list[tuple[str | None, list[int]]]:
    """Positions of ``futures`` grouped by the worker holding each (a locality hint: a
    group's slicing task may still run elsewhere, fetching what it needs)."""
    who = client.who_has(list(futures))
    groups: dict[str | None, list[int]] = {}
    for p, fut in enumerate(futures):
        holders = sorted(who.get(fut.key, ()))
        groups.setdefault(holders[0] if holders else None, []).append(p)
    return list(groups.items())


@contextlib.contextmanager
def fleet_client(scheduler: str | None = None, workers: int = 2,
                 memory_limit: str | int = "4GiB") -> Iterator[Any]:
    """A Dask client: on the scheduler at ``scheduler`` (``tcp://HOST:PORT``), else on a
    LocalCluster of ``workers`` single-threaded processes (``memory_limit`` each).

    Raises
    ------
    RevealError
        No scheduler answers at ``scheduler`` within :data:`CONNECT_TIMEOUT_S` seconds.
    """
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            client = Client(scheduler, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RevealError(f"cannot reach the Dask scheduler at {scheduler} within "
                              f"{CONNECT_TIMEOUT_S:g} s ({reason})") from None
        try:
            yield client
        finally:
            client.close()
        return
    if workers < 1:
        raise RevealError(f"--workers must be at least 1, got {workers}")
    import dask

    # no work stealing: a block's slicing task belongs where its hosts' features are; a
    # stolen one fetches all of them (a worker's share of the fleet) to another worker
    with dask.config.set({"distributed.scheduler.work-stealing": False}):
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None, memory_limit=memory_limit)
    with cluster, Client(cluster) as client:
        yield client


def _steals(client: Any) -> bool:
    """Whether the client's scheduler steals work (see :func:`fleet_client`)."""
    try:
        return bool(client.run_on_scheduler(
            lambda dask_scheduler: "stealing" in dask_scheduler.extensions))
    except Exception:  # a scheduler that refuses: assume the default, stealing on
        return True


def _held(value: Any) -> Any:
    """``value`` itself, as a task: the scheduler keeps the task, so a copy lost with a
    worker is made again (scattered data could not be)."""
    return value


def compare_fleet_dask(sources: Sequence[HostSource], config: FleetConfig | None = None, *,
                       client: Any, baselines: Mapping[str, OwnVerdicts] | None = None,
                       baseline_dir: str | None = None,
                       progress: Progress | None = None) -> FleetResult:
    """:func:`reveal.fleet.engine.compare_fleet` over Dask: every host a task, every time
    block a reduction task. ``client``: a ``distributed.Client`` (see :func:`fleet_client`);
    ``baseline_dir``: where each host's own baseline is found by name (read by the workers).
    """
    from distributed import as_completed

    config = config or FleetConfig()
    say = progress or (lambda _m: None)
    n = len(sources)
    futures = client.map(features_task, list(sources), config=config,
                         baseline_dir=baseline_dir, pure=False)
    summaries_f = client.map(summary, futures, pure=False)
    summaries: list[HostFeatures | None] = [None] * n
    position = {f.key: i for i, f in enumerate(summaries_f)}
    for done, fut in enumerate(as_completed(summaries_f), start=1):
        summaries[position[fut.key]] = fut.result()
        if done == n or done % max(1, n // 20) == 0:
            say(f"features of {done}/{n} hosts")
    del summaries_f
    hosts = [s for s in summaries if s is not None]
    plan = plan_fleet(hosts, config)
    say(f"comparing {len(plan.hosts)} hosts on {plan.n_slots} windows × "
        f"{len(plan.columns)} columns in {len(plan.blocks)} blocks")
    plan_f = client.submit(_held, _light(plan), pure=False)
    groups = _by_worker(client, [futures[i] for i in plan.index])
    positions = [where for _worker, where in groups]
    layouts = [client.submit(_held, [(plan.column_maps[j], plan.slots[j]) for j in where],
                             workers=[worker] if worker else None, allow_other_workers=True,
                             pure=False) for worker, where in groups]
    if _steals(client):
        plan.warnings.append("the Dask scheduler steals work: a block's slicing task may then "
                             "run away from its hosts' features and copy them all (memory); "
                             "start the scheduler with DASK_DISTRIBUTED__SCHEDULER__"
                             "WORK_STEALING=False")

    def submit(b: int) -> Any:
        first, stop = plan.blocks[b]
        stacks = [client.submit(_slice, [futures[plan.index[j]] for j in where], layouts[g],
                                first, stop, len(plan.columns),
                                workers=[worker] if worker else None,
                                allow_other_workers=True, pure=False)
                  for g, (worker, where) in enumerate(groups)]
        return client.submit(_block, plan_f, b, config, positions, *stacks, pure=False)

    # a few blocks in flight at a time: their slices are copies of the hosts' features
    waiting = list(range(len(plan.blocks)))
    running = as_completed([submit(waiting.pop(0)) for _ in range(min(BLOCKS_IN_FLIGHT,
                                                                      len(waiting)))])
    results = []
    for fut in running:
        results.append(fut.result())
        fut.release()
        if waiting:
            running.add(submit(waiting.pop(0)))
        say(f"compared block {len(results)}/{len(plan.blocks)}")
    result = assemble(plan, results, hosts, config, baselines)
    requests = trace_requests(result)
    traces = {}
    for host, cols in requests.items():
        j = plan.hosts.index(host)
        traces[host] = client.submit(_columns, futures[plan.index[j]],
                                     (plan.column_maps[j], plan.slots[j]), cols, plan.n_slots,
                                     pure=False)
    result.traces = {host: fut.result() for host, fut in traces.items()}
    return result


def _columns(features: HostFeatures, layout: tuple[np.ndarray, np.ndarray],
             columns: list[int], n_slots: int) -> dict[int, np.ndarray]:
    column_map, slots = layout
    return host_columns(features, column_map, slots, columns, n_slots)


def _light(plan: FleetPlan) -> FleetPlan:
    """The plan without the per-host layouts (they travel to their own slicing tasks)."""

    return replace(plan, slots=[], column_maps=[])
