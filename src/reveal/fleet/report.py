"""The fleet report: versioned JSON, terminal text, Markdown, and figures.

Claims compare a host with its peers in the channel's unit ("host-7: available memory
1.0 GiB below the peer median (47 GB against 48 GB)"); configuration outliers and clock
offsets get a line each. Host and channel names are tenant text: every format escapes
them (:mod:`reveal.report.escape`). Times are UTC (wall clock).
"""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from reveal.catalog import default_catalog
from reveal.fleet.records import ClockOffset, ConfigOutlier, FleetResult, HostEpisode, PeerReason
from reveal.frame import channel_metric
from reveal.report.claims import subject
from reveal.report.escape import markdown, plain
from reveal.report.times import span_text
from reveal.report.units import number, quantity

SCHEMA_NAME = "reveal-fleet-report"
SCHEMA_VERSION = 1

FEATURE_WORDS = {"mean": "", "median": "", "min": "lowest ", "max": "peak ",
                 "std": "within-window spread of ", "variance": "within-window spread of ",
                 "sum": "count of "}


def when(ns: int) -> str:
    """A wall-clock time (UTC), ``2026-11-25 10:01:02``."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _fmt(channel: str, feature: str, value: float, signed: bool = False) -> str:
    info = default_catalog().lookup(channel_metric(channel))
    q = quantity(info)
    if feature == "sum" and q.known:
        q = q.amount()
    return q.format(value, signed=signed) if q.known else \
        (("+" if signed and value > 0 else "") + number(value))


def reason_claim(r: PeerReason) -> str:
    """``peak disk write throughput on vda 412 MB/s above the peer median (480 MB/s
    against 68 MB/s, +12σ)`` (``host_channel``: the host's own device names)."""
    what = FEATURE_WORDS.get(r.feature, f"{r.feature} of ")
    name = subject(r.host_channel, default_catalog())
    diff = r.value - r.peer_median
    side = "above" if diff > 0 else "below"
    return (f"{what}{name} {_fmt(r.channel, r.feature, abs(diff))} {side} the peer median "
            f"({_fmt(r.channel, r.feature, r.value)} against "
            f"{_fmt(r.channel, r.feature, r.peer_median)}, {r.z:+.1f}σ)")


def episode_claim(e: HostEpisode) -> str:
    """One line: the host, when, what set it apart."""
    span = span_text((e.end_ns - e.start_ns) / 1e9)
    head = f"{plain(e.host, 80)}: {e.subsystem} from {when(e.start_ns)} for {span}"
    if not e.reasons:
        return f"{head}: stood apart from its peers (score {e.peak_score:.1f})"
    own = ""
    if e.own_share is not None:
        own = (f"; its own baseline agrees in {e.own_share:.0%} of the windows"
               if e.own_share > 0 else "; its own baseline saw nothing")
    return f"{head}: {plain(reason_claim(e.reasons[0]), 300)}{own}"


def config_claim(c: ConfigOutlier) -> str:
    """``host-7: huge pages in pool 512 pages, peers 0 pages (5 of 5)``."""
    name = subject(c.host_channel, default_catalog())
    peers = _fmt(c.channel, "mean", c.majority)
    if c.value is None:
        return (f"{plain(c.host, 80)}: no {plain(name, 120)} where {c.peers_with_majority} "
                f"of {c.peers} peers have {peers}")
    return (f"{plain(c.host, 80)}: {plain(name, 120)} {_fmt(c.channel, 'mean', c.value)}, "
            f"peers {peers} ({c.peers_with_majority} of {c.peers})")


def clock_claim(c: ClockOffset) -> str:
    """``host-4: clock about 7 s ahead of its peers ...``."""
    side = "ahead of" if c.offset_s > 0 else "behind"
    moved = "; compared after moving it back" if c.aligned else ""
    return (f"{plain(c.host, 80)}: clock about {abs(c.offset_s):g} s {side} its peers (its "
            f"activity matches theirs {c.corr:.2f} at that offset, {c.corr_at_zero:.2f} at "
            f"none; resolution {c.resolution_s:g} s){moved}")


def claims(result: FleetResult) -> list[str]:
    """Every finding as one line, configuration and clocks first."""
    return ([config_claim(c) for c in result.config_outliers]
            + [clock_claim(c) for c in result.clock]
            + [episode_claim(e) for e in result.episodes])


def _floats(a: np.ndarray) -> list[Any]:
    return [None if not math.isfinite(float(x)) else round(float(x), 4)
            for x in np.asarray(a).ravel()]


def to_dict(result: FleetResult, with_windows: bool = True) -> dict[str, Any]:
    """The versioned JSON of a fleet result (``schema``, ``version``; times in ns, UTC)."""
    payload: dict[str, Any] = {
        "schema": SCHEMA_NAME, "version": SCHEMA_VERSION,
        "hosts": list(result.hosts),
        "grid": {"start_ns": int(result.grid_start_ns[0]) if len(result.grid_start_ns) else 0,
                 "windows": len(result.grid_start_ns), "stride_s": result.stride_ns / 1e9,
                 "size_s": result.size_ns / 1e9},
        "summary": {"verdict": "hosts stand apart" if result.flagged_hosts()
                    else "no host stands apart",
                    "flagged_hosts": result.flagged_hosts(),
                    "episodes": len(result.episodes),
                    "config_outliers": len(result.config_outliers),
                    "clock_offsets": len(result.clock),
                    "columns_compared": len(result.columns)},
        "claims": claims(result),
        "episodes": [{
            "host": e.host, "start_ns": e.start_ns, "end_ns": e.end_ns,
            "first_window": e.first, "last_window": e.last,
            "peak_score": round(e.peak_score, 4), "subsystem": e.subsystem,
            "own_share": e.own_share, "claim": episode_claim(e),
            "reasons": [{"channel": r.channel, "host_channel": r.host_channel,
                         "feature": r.feature, "z": round(r.z, 4), "value": r.value,
                         "peer_median": r.peer_median, "subsystem": r.subsystem,
                         "claim": reason_claim(r)} for r in e.reasons]}
            for e in result.episodes],
        "config_outliers": [{"host": c.host, "channel": c.channel,
                             "host_channel": c.host_channel, "value": c.value,
                             "majority": c.majority,
                             "peers_with_majority": c.peers_with_majority,
                             "peers": c.peers, "claim": config_claim(c)}
                            for c in result.config_outliers],
        "clock": [{"host": c.host, "offset_s": c.offset_s, "corr": round(c.corr, 4),
                   "corr_at_zero": round(c.corr_at_zero, 4), "resolution_s": c.resolution_s,
                   "aligned": c.aligned, "claim": clock_claim(c)} for c in result.clock],
        "warnings": list(result.warnings),
        "sources": result.sources,
    }
    if with_windows:
        payload["windows"] = {
            "scores": [_floats(row) for row in result.scores],
            "cut": _floats(result.cut),
            "flagged": result.flagged.astype(bool).tolist(),
            "subsystems": list(result.subsystems)}
    return payload


def render_text(result: FleetResult) -> str:
    """The report for a terminal (plain text, names escaped)."""
    hosts = result.flagged_hosts()
    lines = [f"Fleet of {len(result.hosts)} hosts, {len(result.grid_start_ns)} windows of "
             f"{result.size_ns / 1e9:g} s every {result.stride_ns / 1e9:g} s from "
             f"{when(int(result.grid_start_ns[0]))} UTC, {len(result.columns)} columns "
             f"compared"]
    lines.append(f"Verdict: {len(hosts)} hosts stand apart: "
                 f"{', '.join(plain(h, 60) for h in hosts[:10])}" if hosts
                 else "Verdict: no host stands apart from its peers")
    for title, items in (("Configuration", [config_claim(c) for c in result.config_outliers]),
                         ("Clocks", [clock_claim(c) for c in result.clock]),
                         ("Episodes", [episode_claim(e) for e in result.episodes])):
        if items:
            lines += ["", f"{title}:"] + [f"  - {plain(x, 400)}" for x in items]
    for e in result.episodes[:5]:
        if len(e.reasons) > 1:
            lines += ["", f"{plain(e.host, 80)} from {when(e.start_ns)}:"]
            lines += [f"    {plain(reason_claim(r), 300)}" for r in e.reasons]
    if result.warnings:
        lines += ["", "Warnings:"] + [f"  - {plain(w, 400)}" for w in result.warnings]
    return "\n".join(lines) + "\n"


def render_markdown(result: FleetResult, figures: dict[str, str] | None = None) -> str:
    """The report as Markdown (names escaped); ``figures``: caption -> relative PNG path."""
    hosts = result.flagged_hosts()
    out = ["# Fleet report", "",
           f"{len(result.hosts)} hosts, {len(result.grid_start_ns)} windows of "
           f"{result.size_ns / 1e9:g} s every {result.stride_ns / 1e9:g} s from "
           f"{when(int(result.grid_start_ns[0]))} UTC; {len(result.columns)} columns compared.",
           "", "**Verdict:** " + (f"{len(hosts)} hosts stand apart: "
                                  + ", ".join(markdown(h, 60) for h in hosts[:20])
                                  if hosts else "no host stands apart from its peers."), ""]
    if result.config_outliers:
        out += ["## Configuration", ""] + [f"- {markdown(config_claim(c), 400)}"
                                           for c in result.config_outliers] + [""]
    if result.clock:
        out += ["## Clocks", ""] + [f"- {markdown(clock_claim(c), 400)}"
                                    for c in result.clock] + [""]
    if result.episodes:
        out += ["## Episodes", "", "| host | from (UTC) | for | subsystem | score | why |",
                "|---|---|---|---|---|---|"]
        for e in result.episodes:
            why = markdown(reason_claim(e.reasons[0]), 300) if e.reasons else ""
            out.append(f"| {markdown(e.host, 60)} | {when(e.start_ns)} | "
                       f"{span_text((e.end_ns - e.start_ns) / 1e9)} | {e.subsystem} | "
                       f"{e.peak_score:.1f} | {why} |")
        out.append("")
    for caption, path in (figures or {}).items():
        out += [f"![{markdown(caption, 120)}]({path})", ""]
    if result.warnings:
        out += ["## Warnings", ""] + [f"- {markdown(w, 400)}" for w in result.warnings] + [""]
    return "\n".join(out)


def write_json(result: FleetResult, path: str | Path, with_windows: bool = True) -> Path:
    """Write the JSON report atomically (a temporary file renamed into place)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(to_dict(result, with_windows), indent=1, allow_nan=False))
    os.replace(tmp, path)
    return path


def write_report_dir(result: FleetResult, out: str | Path) -> Path:
    """A directory with ``report.md``, ``fleet.json`` and the figures (PNG)."""
    from reveal.fleet.figures import heatmap, peer_traces

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figures = {"Deviation score per host and window": heatmap(result, out / "heatmap.png").name}
    for i, e in enumerate(result.episodes[:6]):
        made = peer_traces(result, e, out / f"episode-{i + 1}.png")
        if made is not None:
            figures[f"Episode {i + 1}: {plain(e.host, 60)} against its peers"] = made.name
    write_json(result, out / "fleet.json")
    (out / "report.md").write_text(render_markdown(result, figures))
    return out
