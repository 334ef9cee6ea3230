"""Fleet figure: a simulated fleet recorded on this machine, faults in some hosts, scored by
the fleet's peer comparison; results in ``bench/results/fleet.json``.

    python bench/bench_fleet.py --record /work/fleet-sim      # ≈ 20 min, root
    python bench/bench_fleet.py --score /work/fleet-sim       # minutes
    python bench/bench_fleet.py --defaults /work/fleet-sim-2  # seconds

Recording: 28 runs of the distributed reference job, one after another (``--run-s`` seconds
each); 16 make the *report* fleet (one host per fault kind, the rest clean), 12 the *tune*
fleet (its own hosts, every fault kind, at other times) on which the scoring settings are
chosen. Every
host is one recorded run, relabelled, aligned on its start (see
:mod:`reveal.fleet.simulate`). The manifest keeps the load average around each recording:
the machine is shared, and what else ran shows in every host.

Scoring: the settings (channel set, window features, floors, cut, persistence, whether a
channel counts once in a subsystem's score) are chosen on the tune fleet by F1, then the
fewest hosts flagged among the tune fleet's clean hosts compared alone, then the margin (the
weakest fault's peak score over the cut against the highest clean host's), then median time to
detect; the report fleet is then scored once with them through the fleet engine. A faulty host
counts as found when it is flagged in a window overlapping its episode (time to detect: the
first such window's end minus the episode start); a clean host flagged anywhere is a false
positive. The clean hosts alone are scored as an all-clean fleet. The HugePages host is
found with no per-host baseline (peer comparison only).

Defaults: ``--defaults DIR`` scores a recorded fleet, both splits, with the defaults of
``reveal fleet`` (``FleetConfig()``, chosen as above on the tune fleet of one recording) and
nothing chosen: run it on another recording (``--record DIR --seed N``: other fault hosts and
times) to see whether the choice carries over. Results in ``bench/results/fleet_defaults.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, fleet_settings, script_argv, write_result
from reveal.fleet.channels import JOB_PREFIXES
from reveal.fleet.simulate import (
    SimulatedFleet,
    load_fleet,
    plan_fleet,
    read_manifest,
    record_fleet,
)

RESULT = Path(__file__).resolve().parent / "results" / "fleet.json"
DEFAULTS_RESULT = RESULT.with_name("fleet_defaults.json")
REPORT_KINDS = ["cpu_contention", "memory_pressure", "packet_loss", "hugepages_reserved",
                "cgroup_throttle", "disk_burst"]
TUNE_KINDS = ["cgroup_throttle", "hugepages_reserved", "cpu_contention", "packet_loss"]
#: tune hosts recorded after the others, with the kinds the first tune hosts lack
TUNE_EXTRA_KINDS = ["memory_pressure", "disk_burst"]
TARGETS = {"precision": 0.9, "recall": 0.9, "median_ttd_s": 5.0, "clean_hosts_flagged": 0}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def record(out: Path, run_s: float, episode_s: float, seed: int) -> None:
    """Record the tune and report fleets interleaved in time (drift spreads over both), then
    the extra tune hosts; hosts already in ``out`` are kept (a recording resumes)."""
    report = plan_fleet(REPORT_KINDS, 10, run_s, episode_s, seed=seed, prefix="host")
    tune = plan_fleet(TUNE_KINDS, 4, run_s, episode_s, seed=seed + 1, prefix="tune",
                      split="tune")
    order = sorted([(i / len(report), p) for i, p in enumerate(report)]
                   + [((i + 0.5) / len(tune), p) for i, p in enumerate(tune)],
                   key=lambda pair: pair[0])
    extra = plan_fleet(TUNE_EXTRA_KINDS, 2, run_s, episode_s, seed=seed + 2, prefix="tunx",
                       split="tune")
    record_fleet(out, [p for _, p in order] + extra, run_s, say, resume=True)


SETTLE_S = 5.0  # a window ending this long after an episode still counts as finding it
#: channel sets tried (FleetConfig settings, see :mod:`reveal.fleet.channels`): everything;
#: the node_exporter-like core a fleet read from Prometheus has; the job's own view (the
#: default of ``reveal fleet``: host CPU, memory and pressure, the job's cgroup and its
#: network namespaces), which leaves out the shared disk and loopback traffic other tenants
#: of this machine make; and the tenant's (its cgroups, no load or pressure)
CHANNEL_SETS: dict[str, dict[str, Any]] = {
    "all": {"channels": None, "job_network_only": False},
    "core": {"channels": ("cpu.", "loadavg.", "mem.MemAvailable", "mem.MemFree",
                          "mem.HugePages_", "hugepages.", "mem.Dirty", "mem.Writeback",
                          "vmstat.pgmajfault", "vmstat.pgfault", "vmstat.pgscan", "psi.",
                          "net.", "snmp.Tcp.", "netstat.TcpExt.", "disk.", "cgroup.cpu.",
                          "cgroup.cpuacct.", "cgroup.psi."),
             "job_network_only": False},
    "job": {"channels": JOB_PREFIXES, "job_network_only": True},
    "tenant": {"channels": ("cpu.", "mem.MemAvailable", "mem.MemFree", "mem.HugePages_",
                            "hugepages.", "net.", "snmp.Tcp.", "netstat.TcpExt.", "cgroup."),
               "job_network_only": True},
}


def with_set(base: Any, set_name: str, **settings: Any) -> Any:
    """``base`` with a channel set and other FleetConfig settings."""
    from dataclasses import replace

    return replace(base, **CHANNEL_SETS[set_name], **settings)


def clean_part(fleet: SimulatedFleet) -> SimulatedFleet:
    """The fleet's clean hosts alone (an all-clean fleet), without reading them again."""
    return SimulatedFleet([h for h in fleet.hosts if h.host not in fleet.faulty_hosts], [],
                          fleet.plans, fleet.meta)


def figures(fleet: SimulatedFleet, feats: list[Any], config: Any
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`evaluate` of the fleet, and of its clean hosts compared alone."""
    clean = clean_part(fleet)
    names = set(clean.clean_hosts)
    return (evaluate(fleet, feats, config),
            evaluate(clean, [f for f in feats if f.host in names], config))


def met_targets(result: dict[str, Any], clean_result: dict[str, Any]) -> dict[str, bool]:
    """Which of :data:`TARGETS` a fleet's figures meet."""
    return {"precision": result["precision"] >= TARGETS["precision"],
            "recall": result["recall"] >= TARGETS["recall"],
            "median_ttd_s": result["median_ttd_s"] is not None
            and result["median_ttd_s"] <= TARGETS["median_ttd_s"],
            "clean_hosts_flagged": not clean_result["flagged_hosts"]}


#: settings that change the per-host features (FleetConfig fields)
FEATURE_GRID = [{"features": f, "relative_floor": r, "sampling_floor": e}
                for f in (("mean", "std", "min", "max"), ("mean",)) for r in (0.002, 0.05, 0.2)
                for e in (0.0, 1.0, 3.0)]
#: settings of the comparison itself (the clock-offset finding keeps its defaults: it
#: estimates offsets only for hosts in lock-step, which these sequential recordings are not)
COMPARE_GRID = [{"min_score": m, "cut_mads": c, "persistence_s": p, "align_clocks": False,
                 "distinct_channels": d, "max_deviating_share": v}
                for m in (4.0, 8.0, 16.0, 30.0) for c in (3.0, 6.0) for p in (1.0, 3.0)
                for d in (False, True) for v in (1.0, 0.34)]


#: tried settings kept in the result (by F1 on the tune fleet, then recall): the whole grid
#: is thousands of rows, re-made by running the bench
KEEP_TRIED = 25


def best_tried(tried: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``KEEP_TRIED`` tried settings with the best F1 on the tune fleet."""
    def f1(row: dict[str, Any]) -> float:
        p, r = row.get("precision") or 0.0, row.get("recall") or 0.0
        return 2 * p * r / (p + r) if p + r else 0.0
    return sorted(tried, key=lambda row: (-f1(row), -(row.get("recall") or 0.0)))[:KEEP_TRIED]


def features(fleet: SimulatedFleet, config: Any) -> list[Any]:
    """Every host's window features. The window stride is put on whole milliseconds: the
    engine takes it as the median step of a host's windows, which on a real recording
    differs between hosts by microseconds, and compares only hosts of one stride."""
    from reveal.fleet.engine import host_features

    feats = [host_features(tel, config) for tel in fleet.hosts]
    for f in feats:
        f.stride_ns = round(f.stride_ns, -6)
    return feats


def evaluate(fleet: SimulatedFleet, feats: list[Any], config: Any) -> dict[str, Any]:
    """Hosts flagged vs the ground truth: per-episode recall, faulty-host precision, time to
    detect (end of the first flagged window overlapping the episode, minus its start)."""
    from reveal.fleet.engine import compare_fleet

    started = time.monotonic()
    result = compare_fleet(feats, config=config)
    took = time.monotonic() - started
    flagged = set(result.flagged_hosts())
    ends = result.grid_start_ns + result.size_ns
    rows = []
    for ep in fleet.truth:
        h = result.hosts.index(ep.host)
        hit = (result.flagged[h] & (ends > ep.start_ns)
               & (result.grid_start_ns < ep.end_ns + SETTLE_S * 1e9))
        first = int(np.flatnonzero(hit)[0]) if hit.any() else None
        rows.append({"host": ep.host, "kind": ep.kind, "found": first is not None,
                     "ttd_s": None if first is None else
                     round(max(0.0, (ends[first] - ep.start_ns) / 1e9), 2),
                     "duration_s": round((ep.end_ns - ep.start_ns) / 1e9, 1),
                     "subsystems": sorted({e.subsystem for e in result.episodes
                                           if e.host == ep.host})})
    margin = _margin(fleet, result, config)
    found_hosts = {r["host"] for r in rows if r["found"]}
    false = sorted(flagged - found_hosts)
    ttd = [r["ttd_s"] for r in rows if r["ttd_s"] is not None]
    precision = len(found_hosts) / len(flagged) if flagged else 1.0
    recall = len(found_hosts & {r["host"] for r in rows}) / len(rows) if rows else 1.0
    origin = int(result.grid_start_ns[0]) if len(result.grid_start_ns) else 0
    why = {h: [{"from_s": round((e.start_ns - origin) / 1e9, 1),
                "to_s": round((e.end_ns - origin) / 1e9, 1), "subsystem": e.subsystem,
                "peak_score": round(float(e.peak_score), 1),
                "channels": sorted({r.channel for r in e.reasons[:3]})}
               for e in result.episodes if e.host == h] for h in false}
    return {"hosts": len(fleet.hosts), "faulty": len(fleet.faulty_hosts),
            "episodes": rows, "flagged_hosts": sorted(flagged), "false_hosts": false,
            "false_host_episodes": why,
            "precision": round(precision, 3), "recall": round(recall, 3),
            "median_ttd_s": round(float(np.median(ttd)), 2) if ttd else None,
            "margin": margin,
            "clock_offsets": [c.host for c in result.clock],
            "config_outliers": sorted({c.host for c in result.config_outliers}),
            "compare_s": round(took, 2)}


def _margin(fleet: SimulatedFleet, result: Any, config: Any) -> float | None:
    """How far the settings separate faults from clean hosts: the weakest fault episode's
    peak of score / cut (held over the persistence, as flagging needs) over the clean
    hosts' highest; above 1 every episode outscores every clean host. None without both."""
    stride_s = result.stride_ns / 1e9
    hold = 1 + int(np.floor(config.persistence_s / stride_s + 1e-9))
    ratio = np.nan_to_num(result.scores / np.maximum(result.cut, 1e-9)[None, :], nan=0.0)
    held = ratio.copy()
    for lag in range(1, hold):
        held[:, lag:] = np.minimum(held[:, lag:], ratio[:, :-lag])
        held[:, :lag] = 0.0
    ends = result.grid_start_ns + result.size_ns
    faults = []
    for ep in fleet.truth:
        span = (ends > ep.start_ns) & (result.grid_start_ns < ep.end_ns + SETTLE_S * 1e9)
        row = held[result.hosts.index(ep.host)]
        faults.append(float(row[span].max()) if span.any() else 0.0)
    clean = [float(held[result.hosts.index(h)].max()) for h in fleet.clean_hosts
             if h in result.hosts]
    if not faults or not clean:
        return None
    return round(min(faults) / max(max(clean), 1e-9), 3)


def _rank(row: dict[str, Any]) -> tuple[float, int, float, float]:
    """F1 first; then the fewest hosts flagged when the tune fleet's clean hosts are
    compared alone (the all-clean figure, on the tune fleet); among equals, the wider
    margin between faults and clean hosts (settings that only just separate a small tune
    fleet are the likeliest to fail on another); then the median time to detect."""
    f1 = 2 * row["precision"] * row["recall"] / max(row["precision"] + row["recall"], 1e-9)
    margin = row.get("margin")
    return (-f1, len(row.get("clean_hosts_flagged", [])),
            -(margin if margin is not None else 0.0),
            row["median_ttd_s"] if row["median_ttd_s"] is not None else 1e9)


def tied_settings(report: SimulatedFleet, tried: list[dict[str, Any]],
                  chosen: dict[str, Any]) -> list[dict[str, Any]]:
    """The other settings the tune fleet ranked equal to the chosen ones, each scored on the
    report fleet and its clean hosts: how much the choice among equals matters."""
    from reveal.fleet.config import FleetConfig

    out = []
    for row in tried:
        if row is chosen or _rank(row) != _rank(chosen):
            continue
        config = with_set(FleetConfig(), row["channels"], **row["settings"])
        rep, cl = figures(report, features(report, config), config)
        out.append({"channels": row["channels"], "settings": row["settings"],
                    "precision": rep["precision"], "recall": rep["recall"],
                    "median_ttd_s": rep["median_ttd_s"], "margin": rep["margin"],
                    "clean_hosts_flagged": cl["flagged_hosts"]})
    return out


def score_defaults(fleet_dirs: list[Path]) -> dict[str, Any]:
    """Every split of each recorded fleet scored with ``FleetConfig()``, nothing chosen."""
    from dataclasses import asdict

    from reveal.fleet.config import FleetConfig

    config = FleetConfig()
    fleets = []
    for fleet_dir in fleet_dirs:
        manifest = read_manifest(fleet_dir)
        loads = [h["loadavg_before"][0] for h in manifest["hosts"]]
        for split in ("tune", "report"):
            fleet = load_fleet(fleet_dir, split=split)
            result, clean_result = figures(fleet, features(fleet, config), config)
            say(f"{fleet_dir} {split}: precision {result['precision']}, recall "
                f"{result['recall']}, clean hosts flagged {clean_result['flagged_hosts']}")
            fleets.append({
                "fleet_dir": str(fleet_dir), "split": split,
                "loadavg1_median": round(float(np.median(loads)), 2),
                **{k: result[k] for k in ("hosts", "faulty", "episodes", "flagged_hosts",
                                          "false_hosts", "false_host_episodes", "precision",
                                          "recall", "median_ttd_s", "margin")},
                "clean_hosts_flagged": clean_result["flagged_hosts"],
                "met": met_targets(result, clean_result)})
    settings = {k: v for k, v in asdict(config).items() if k != "window"}
    return {"benchmark": "fleet_defaults", "settings": settings, "targets": TARGETS,
            "fleets": fleets}


def score(fleet_dir: Path) -> dict[str, Any]:
    """Choose the settings on the tune fleet, then report on the report fleet and on its
    clean hosts alone."""
    from reveal.fleet.config import FleetConfig

    base = FleetConfig()
    tried = []
    tune = load_fleet(fleet_dir, split="tune")
    for set_name in CHANNEL_SETS:
        say(f"tune fleet ({set_name} channels): {len(tune.hosts)} hosts, "
            f"{len(tune.truth)} faults")
        for fsettings in FEATURE_GRID:
            tune_feats = features(tune, with_set(base, set_name, **fsettings))
            for csettings in COMPARE_GRID:
                settings = {**fsettings, **csettings}
                row, clean_row = figures(tune, tune_feats,
                                         with_set(base, set_name, **settings))
                tried.append({"channels": set_name, "settings": settings,
                              "precision": row["precision"], "recall": row["recall"],
                              "median_ttd_s": row["median_ttd_s"], "margin": row["margin"],
                              "clean_hosts_flagged": clean_row["flagged_hosts"]})
    chosen = min(tried, key=_rank)
    best, set_name = chosen["settings"], chosen["channels"]
    say(f"chosen on the tune fleet: {set_name} channels, {best}")
    config = with_set(base, set_name, **best)
    report = load_fleet(fleet_dir, split="report")
    started = time.monotonic()
    feats = features(report, config)
    features_s = time.monotonic() - started
    say(f"report fleet: {len(report.hosts)} hosts, {len(report.truth)} faults")
    result, clean_result = figures(report, feats, config)
    result["features_s"] = round(features_s, 2)
    huge = [r for r in result["episodes"] if r["kind"] == "hugepages_reserved"]
    tied = tied_settings(report, tried, chosen)
    tune_result, tune_clean = figures(tune, features(tune, config), config)
    manifest = read_manifest(fleet_dir)
    loads = [h["loadavg_before"][0] for h in manifest["hosts"]]
    met = {**met_targets(result, clean_result),
           "hugepages_found_without_baseline": bool(huge) and all(r["found"] for r in huge)}
    return {
        "benchmark": "fleet", "fleet_dir": str(fleet_dir),
        "note": "hosts are runs of the reference job recorded one after another on this "
                "machine, each relabelled and aligned on its start; no per-host baseline",
        "recording": {"workload": manifest.get("workload"), "run_s": manifest.get("run_s"),
                      "hosts": len(manifest["hosts"]), "cpus": os.cpu_count(),
                      "loadavg1_min": round(min(loads), 2), "loadavg1_max": round(max(loads), 2),
                      "loadavg1_median": round(float(np.median(loads)), 2)},
        "settings_chosen_on": sorted(h.host for h in tune.hosts), "channels": set_name,
        "settings": best,
        "tune": {**{k: tune_result[k] for k in ("hosts", "faulty", "episodes", "flagged_hosts",
                                                 "false_hosts", "precision", "recall",
                                                 "median_ttd_s", "margin", "clock_offsets")},
                 "clean_hosts_flagged": tune_clean["flagged_hosts"]},
        "settings_tried": len(tried), "tuning_best": best_tried(tried),
        "targets": TARGETS, "met": met,
        "report": result, "clean": clean_result, "tied_on_tune": tied,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="record the simulated fleet into DIR (keep it outside the repo)")
    parser.add_argument("--score", type=Path, metavar="DIR",
                        help="score the fleet recorded in DIR and write --result")
    parser.add_argument("--defaults", type=Path, action="append", default=[], metavar="DIR",
                        help="score the fleet recorded in DIR with reveal fleet's defaults "
                             "(repeatable) and write --defaults-result")
    parser.add_argument("--defaults-result", type=Path, default=DEFAULTS_RESULT)
    parser.add_argument("--run-s", type=float, default=45.0, help="seconds per host run")
    parser.add_argument("--episode-s", type=float, default=12.0, help="seconds per fault")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--result", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    if not args.record and not args.score and not args.defaults:
        parser.error("give --record DIR, --score DIR and/or --defaults DIR")
    if args.record:
        from reveal.inject.cleanup import install_signal_handlers

        install_signal_handlers()
        started = time.monotonic()
        record(args.record, args.run_s, args.episode_s, args.seed)
        say(f"recorded in {time.monotonic() - started:.0f} s")
    if args.score:
        from reveal.fleet.config import FleetConfig

        started = time.monotonic()
        result = score(args.score)
        chosen = with_set(FleetConfig(), result["channels"], **result["settings"])
        search = {"channel_sets": CHANNEL_SETS, "feature_grid": FEATURE_GRID,
                  "compare_grid": COMPARE_GRID, "settle_s": SETTLE_S, "keep_tried": KEEP_TRIED,
                  "targets": TARGETS}
        write_result(args.result, result,
                     {**arguments(args), "fleet": fleet_settings(chosen), "search": search},
                     script_argv(__file__, argv), started)
        say(json.dumps({k: result[k] for k in ("report", "clean", "met")}, indent=1))
    if args.defaults:
        started = time.monotonic()
        result = score_defaults(args.defaults)
        write_result(args.defaults_result, result,
                     {**arguments(args), "fleet": fleet_settings(), "settle_s": SETTLE_S,
                      "targets": TARGETS},
                     script_argv(__file__, argv), started)
        say(json.dumps(result["fleets"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
