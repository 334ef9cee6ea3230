"""The report as people read it: a rich table on a terminal, plain text in pipes and files
(no colour, no Markdown escapes), Markdown in report directories; episodes first, then the
strongest windows; truncation stated (naming the JSON report only when one was written);
wall-clock times; the decision and every warning once; tenant text escaped everywhere."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from reveal.analysis.evidence import Reason
from reveal.catalog import default_catalog
from reveal.cli import main
from reveal.frame import Telemetry
from reveal.report.build import episodes
from reveal.report.claims import window_claim
from reveal.report.schema import Anomaly, DetectorSummary, Report, WindowTable
from reveal.report.terminal import render_text
from reveal.report.text import render_table
from reveal.store.run_writer import write_run

S = 1_000_000_000
WALL = 1_700_000_000 * S  # 2023-11-14 22:13:20 UTC
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: a tenant's cgroup name: rich markup, Markdown specials, a terminal escape, a bidi override
EVIL = "web[bold]x[/bold]|`rm`\x1b[2J\u202e*"


def _reason(channel: str, feature: str, value: float, median: float, z: float) -> Reason:
    metric = channel.split("{")[0]
    return Reason(channel, metric, feature, default_catalog().lookup(metric).subsystem, 0.6,
                  value, median, z)


def _report(flagged: tuple[int, ...] = (5, 6, 7, 52), n: int = 60, wall: int = WALL,
            self_fitted: bool = False, start_ns: int = 100 * S, stride: int = S) -> Report:
    start = start_ns + np.arange(n, dtype=np.int64) * stride
    end = start + 3 * S
    combined = np.full(n, 0.5)
    flags = np.zeros(n, dtype=bool)
    anomalies = []
    for i, w in enumerate(flagged):
        combined[w], flags[w] = 5.0 + i, True
        reasons = [_reason(f"cgroup.memory.current{{cgroup={EVIL}}}", "mean", 3e9, 1e9, 8.0),
                   _reason("derived.disk_read_bytes_per_s{dev=vda}", "mean", 4.12e8, 0.0,
                           1000.0)]
        anomalies.append(Anomaly(w, int(start[w]), int(end[w]), float(combined[w]), ["Z", "IF"],
                                 ["memory", "storage"], {"memory": 0.6, "storage": 0.4},
                                 reasons, window_claim(reasons, default_catalog(), 0.1)))
    table = WindowTable(start, end, {"Z": combined}, {"Z": flags}, combined, flags)
    decision = {"combined_threshold": 4.23, "detector_thresholds": {"Z": 3.0},
                "persistence_windows": 2, "persistence_s": 1.0, "threshold_quantile": 0.99,
                "baseline_windows": 297, "self_fitted": self_fitted, "preset": "telemetry",
                "significance": True, "level_alone_z": 8.0, "episode_gap_s": 30.0}
    warnings = ["self-fit: 3 outlying windows left out of the refit"] * 2 + \
        [f"channel {EVIL} is absent from the baseline"]
    return Report(run={"path": f"/runs/{EVIL}", "host": "gpu-07", "start_ns": start_ns,
                       "duration_s": float((end[-1] - start_ns) / S), "interval_s": 0.1,
                       "wall_offset_ns": wall},
                  baseline={"self_fitted": self_fitted}, config={"window_used": {
                      "size_s": 3.0, "stride_s": 1.0, "size_rows": None, "stride_rows": None}},
                  channels={"analysed": 2}, detectors=[DetectorSummary("Z", 3.0, len(flagged))],
                  windows=table, anomalies=anomalies, episodes=episodes(anomalies),
                  warnings=warnings, decision=decision)


def _flat(text: str) -> str:
    """The text with its line wrapping undone (sentences span lines at a given width)."""
    return " ".join(text.split())


def test_plain_text_has_no_colour_no_markdown_escapes_and_says_the_decision():
    text = _flat(render_text(_report(), limit=50, json_path="out.json", width=250))
    assert "\x1b" not in text and "\\" not in text and "\u202e" not in text
    assert "| Window" in text and "**" not in text
    assert "Anomalies found: 4 of 60 windows flagged, in 2 episodes" in text
    assert "above 4.23 for 2 consecutive windows (1 s)" in text
    assert "99th percentile of the scores of 297 baseline windows" in text
    assert "preset telemetry" in text and "fitted on the baseline" in text
    assert "and some change in it matters: a channel moved by at least the least change" in text
    assert "at least 8 robust σ from the baseline flags the window even below" in text
    assert "of the same subsystem within 30 s of each other are one episode" in text
    assert text.count("3 outlying windows left out of the refit") == 1  # every warning once
    assert "[bold]x[/bold]" in text  # tenant text printed as typed, never as markup
    assert text.index("2 episodes") < text.index("Strongest windows")  # episodes first
    assert "Container memory in use in cgroup web[bold]x[/bold]|`rm`?[2J?* rose to 3 GB " \
        "(baseline 1 GB, +8.0σ); also storage: disk read throughput on vda." in text
    assert "JSON report" not in text  # nothing was left out


def test_times_are_wall_clock_never_raw_monotonic_seconds():
    text = _flat(render_text(_report()))
    assert "22:15:00" in text and "times are UTC" in text
    assert not re.search(r"\b\d+\.\ds\b", text)
    days = render_text(_report(start_ns=100 * S, stride=3600 * S, n=30, flagged=(1, 2, 25)))
    assert "2023-11-15 " in days  # a run across midnight dates its times
    relative = render_text(_report(wall=0, stride=3600 * S, n=30, flagged=(1, 2, 25)))
    assert "+1d 01:00:00" in relative and "since the run's first sample" in relative


def test_truncation_names_the_json_report_only_when_one_was_written():
    report = _report()
    with_json = _flat(render_text(report, limit=1, json_path="/tmp/r.json"))
    assert "showing 1 of 4 flagged windows; all are in the JSON report, /tmp/r.json" in with_json
    assert "showing 1 of 2 episodes (the strongest, in time order)" in with_json
    without = _flat(render_text(report, limit=1, json_path=None))
    assert "showing 1 of 4 flagged windows" in without and "JSON report" not in without


def test_one_episode_is_said_in_the_singular():
    text = _flat(render_text(_report(flagged=(5, 6))))
    assert "in 1 episode (" in text and "1 episodes" not in text


def test_a_terminal_gets_colour_and_the_width_it_has():
    text = render_text(_report(), tty=True, width=80)
    assert "\x1b[" in text  # styled
    visible = ANSI.sub("", text)
    assert max(len(line) for line in visible.splitlines()) <= 80
    assert "\x1b[2J" not in text and "\u202e" not in text  # the tenant's escape is gone
    assert "[bold]x[/bold]" in visible
    wide = ANSI.sub("", render_text(_report(), tty=True, width=160))
    assert max(len(line) for line in wide.splitlines()) <= 160
    assert len(wide.splitlines()) < len(visible.splitlines())  # wider: fewer wrapped lines


def test_self_fitted_decision_and_no_anomaly():
    report = _report(flagged=(), self_fitted=True)
    text = _flat(render_text(report))
    assert "No anomaly: none of the 60 windows scored above the thresholds." in text
    assert "this run's own 297 windows" in text and "self-fitted" in text
    assert "Window" not in text


def test_markdown_escapes_tenant_text_and_keeps_the_tables():
    md = render_table(_report(), limit=1, json_path="report.json")
    assert "\x1b" not in md and "\u202e" not in md
    assert r"\[bold\]x\[/bold\]\|" in md  # no markup, no extra table cell
    assert "| Window | Time |" in md and "| # | When |" in md
    assert "all are in the JSON report, report.json" in md
    assert "Decision: a window is flagged" in md
    for line in md.splitlines():
        if line.startswith("| ") and "---" not in line:
            assert len(re.findall(r"(?<!\\)\|", line)) == 8, line  # 7 cells, none split


def _synthetic(seconds: float, seed: int, fault: bool = False) -> Telemetry:
    rng = np.random.default_rng(seed)
    n = int(seconds * 10)
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    cpu = 40 + 3 * rng.normal(size=n)
    dirty = 5e6 + 2e5 * rng.normal(size=n)
    if fault:
        cpu[300:500] += 45
    return Telemetry("host-a", ts, np.column_stack([cpu, dirty]),
                     ["derived.cpu_busy_pct", "mem.Dirty"], {"interval_s": 0.1})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return (write_run(_synthetic(600, seed=1), root / "base"),
            write_run(_synthetic(90, seed=2, fault=True), root / "fault"))


def test_analyze_prints_plain_text_into_a_pipe(runs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # sentences on one line each
    base, fault = runs
    out = tmp_path / "r.json"
    assert main(["analyze", str(fault), "--baseline", str(base), "--json", str(out),
                 "--limit", "2", "--quiet"]) == 0
    text = capsys.readouterr().out
    payload = json.loads(out.read_text())
    assert payload["summary"]["anomalous_windows"] > 2
    assert "\x1b" not in text and "\\" not in text
    assert f"all are in the JSON report, {out}" in text
    assert f"above {payload['decision']['combined_threshold']:.3g}" in text
    assert "CPU busy percentage" in text and re.search(
        r"CPU busy percentage [^|]*[ ±]\d+(\.\d+)? %", text)  # in the channel's unit
    assert main(["analyze", str(fault), "--baseline", str(base), "--limit", "2",
                 "--quiet"]) == 0
    assert "JSON report" not in capsys.readouterr().out


def test_an_episodes_claim_speaks_of_the_subsystem_it_is_named_by():
    """The peak window is led by the GPU, but memory weighs most over the episode: the
    episode is named memory, and its claim is the strongest window memory led, not the
    peak's GPU claim (a real H200 run read "memory: GPU PCIe receive throughput rose")."""
    def anomaly(w: int, score: float, lead: str, claim: str) -> Anomaly:
        shares = {"memory": 0.7, "gpu": 0.3} if lead == "memory" else {"gpu": 0.55,
                                                                       "memory": 0.45}
        return Anomaly(w, w * S, w * S + 3 * S, score, ["Z"], sorted(shares, key=lambda s:
                       -shares[s]), shares, [], claim)

    group = [anomaly(0, 5.0, "memory", "Anonymous memory rose (5)."),
             anomaly(1, 6.0, "memory", "Anonymous memory rose (6)."),
             anomaly(2, 7.0, "gpu", "GPU PCIe receive throughput rose (7).")]
    (episode,) = episodes(group)
    assert episode.subsystem == "memory" and episode.peak_score == 7.0
    assert episode.claim == "Anonymous memory rose (6)."


def test_a_faults_aftermath_of_the_same_subsystem_is_one_episode_with_it():
    """Flagged windows a few seconds after an episode, led by the same subsystem (a loss's
    own retransmissions as the link recovers), continue it, as the watch keeps an episode
    open for 30 s; another subsystem, or a quiet gap longer than that, opens a new one."""
    def anomaly(w: int, lead: str) -> Anomaly:
        return Anomaly(w, w * S, w * S + 3 * S, 5.0, ["Z"], [lead], {lead: 1.0}, [],
                       f"{lead} changed at {w} s.")

    fault = [anomaly(w, "network") for w in range(100, 121)]
    aftermath = [anomaly(130, "network"), anomaly(149, "network")]  # 7 s and 26 s after
    (one,) = episodes(fault + aftermath)
    assert (one.start_ns, one.end_ns) == (100 * S, 152 * S)
    assert one.window_ids == [*range(100, 121), 130, 149]
    other = episodes([*fault, anomaly(130, "storage")])
    assert [e.subsystem for e in other] == ["network", "storage"]
    later = episodes([*fault, anomaly(154, "network")])  # 31 s of quiet after 123 s
    assert [len(e.window_ids) for e in later] == [21, 1]
    assert len(episodes(fault + aftermath, gap_s=0.0)) == 3  # spans that touch only
