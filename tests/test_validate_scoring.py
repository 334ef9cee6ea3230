"""Scoring of verdicts against ground truth: recall, time to detect, attribution, clean share."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.inject.groundtruth import Episode, EventLog, load_episodes
from reveal.inject.scoring import clean_mask, score_episodes, summarise

S = 1_000_000_000


def _windows(n: int, size_s: float = 3.0, stride_s: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    start = (np.arange(n) * stride_s * S).astype(np.int64)
    return start, start + int(size_s * S)


def test_detection_ttd_and_attribution() -> None:
    start, end = _windows(60)
    flagged = np.zeros(60, dtype=bool)
    shares: list[dict[str, float] | None] = [None] * 60
    # episode A 10..20 s: windows starting at 11 and 12 s flagged, attributed cpu
    for w, share in ((11, {"cpu": 0.7, "memory": 0.3}), (12, {"memory": 0.6, "cpu": 0.4})):
        flagged[w], shares[w] = True, share
    # episode B 30..40 s: missed. Episode C 45..50: flagged once, attributed network.
    flagged[47], shares[47] = True, {"network": 1.0}
    episodes = [Episode(10 * S, 20 * S, "cpu_contention", "cpu", "high"),
                Episode(30 * S, 40 * S, "disk_burst", "storage", "low"),
                Episode(45 * S, 50 * S, "packet_loss", "storage", "high")]
    scores = {"zscore": np.linspace(0, 2, 60)}
    a, b, c = score_episodes(episodes, start, end, flagged, shares, scores, {"zscore": 4.0})
    assert a.detected and a.flagged_windows == 2
    assert a.ttd_s == pytest.approx(4.0)  # earliest-ending flagged window ends at 14 s
    assert a.ttd_start_s == pytest.approx(1.0)
    assert a.attributed == "cpu" and a.attribution_ok  # 1.1 cpu vs 0.9 memory
    assert not b.detected and b.ttd_s is None and not b.attribution_ok
    assert b.overlapping_windows == 12  # windows starting 28..39 s overlap [30, 40)
    assert b.max_ratio["zscore"] == pytest.approx(np.linspace(0, 2, 60)[39] / 4.0, abs=1e-3)
    assert c.detected and c.attributed == "network" and not c.attribution_ok
    summary = summarise([a, b, c], clean_windows=20, clean_flagged=1)
    assert summary["total"]["recall"] == pytest.approx(2 / 3)
    assert summary["total"]["attribution_accuracy"] == pytest.approx(0.5)
    assert summary["total"]["clean_flag_share"] == pytest.approx(0.05)
    assert {r["kind"] for r in summary["rows"]} == {"cpu_contention", "disk_burst",
                                                    "packet_loss"}


def test_clean_windows_exclude_episodes_and_settling_time() -> None:
    start, end = _windows(40)
    mask = clean_mask(start, end, [Episode(10 * S, 15 * S, "x", "cpu", "low")], settle_s=5.0)
    # windows [s, s+3) overlapping [10, 20) are s = 8..19
    assert not mask[8:20].any()
    assert mask[:8].all() and mask[20:].all()
    assert clean_mask(start, end, []).all()


def test_ground_truth_round_trip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = EventLog(tmp_path)
    log.append(Episode(5, 9, "cpu_contention", "cpu", "low", {"workers": 1}))
    log.append(Episode(1, 3, "disk_burst", "storage", "high"))
    episodes = load_episodes(tmp_path)
    assert [e.kind for e in episodes] == ["disk_burst", "cpu_contention"]
    assert episodes[1].detail == {"workers": 1}


def test_bad_ground_truth_names_the_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from reveal.errors import InputError

    (tmp_path / "events.jsonl").write_text('{"start_ns": 5, "end_ns": 1, "kind": "x", '
                                           '"subsystem": "cpu"}\n')
    with pytest.raises(InputError, match=r"events\.jsonl"):
        load_episodes(tmp_path)


def test_separation_auc_is_threshold_free_ranking() -> None:
    from reveal.inject.scoring import separation_auc

    assert separation_auc(np.array([5.0, 6.0]), np.array([1.0, 2.0, 3.0])) == 1.0
    assert separation_auc(np.array([1.0]), np.array([1.0, 2.0])) == pytest.approx(0.25)
    assert separation_auc(np.array([np.nan]), np.array([1.0])) is None


def test_clean_windows_are_also_counted_at_longer_settle_times() -> None:
    """A flag 12 s after an episode is clean at a 10 s settle time and not at 15 s or
    more; a flag long after it stays clean at every settle time."""
    from reveal.inject.scoring import SETTLE_STUDY_S, merge_by_settle, score_report
    from reveal.report.schema import Report, WindowTable

    start, end = _windows(80)
    flagged = np.zeros(80, dtype=bool)
    flagged[[22, 70]] = True  # windows starting 22 s (12 s after the end) and 70 s
    table = WindowTable(start, end, {}, {}, np.zeros(80), flagged)
    report = Report({}, {}, {}, {}, [], table, [], [])
    episodes = [Episode(5 * S, 10 * S, "cpu_contention", "cpu", "high")]
    _, clean = score_report(report, episodes, settle_s=10.0)
    by_settle = clean["clean_by_settle"]
    assert set(by_settle) == {f"{s:g}" for s in SETTLE_STUDY_S}
    assert by_settle["10"] == [clean["clean_windows"], clean["clean_flagged"]] == [63, 2]
    assert by_settle["15"][1] == 1 and by_settle["30"][1] == 1
    assert by_settle["30"][0] == 80 - 37  # windows starting 3..39 s touch [5, 40)
    merged = merge_by_settle([by_settle, {"10": [37, 0]}])
    assert merged["10"] == {"windows": 100, "flagged": 2, "share": 0.02}
    assert list(merged) == ["10", "15", "20", "30"]


def test_host_state_names_load_busy_and_steal_during_an_episode() -> None:
    """A missed fault's row says what the host was doing: load, CPU busy and steal."""
    from reveal.frame import Telemetry
    from reveal.inject.validation import host_state, host_text

    n = 200  # 20 s at 10 Hz; jiffies at 100/s on 2 CPUs, 10 % stolen from t = 10 s
    ts = np.arange(n, dtype=np.int64) * 100_000_000
    steal_rate = np.where(np.arange(n) >= 100, 20.0, 0.0)
    user_rate = np.full(n, 60.0)
    idle_rate = 200.0 - user_rate - steal_rate
    fields = {"user": user_rate, "nice": 0.0, "system": 0.0, "idle": idle_rate,
              "iowait": 0.0, "irq": 0.0, "softirq": 0.0, "steal": steal_rate}
    channels, columns = [], []
    for name, rate in fields.items():
        channels.append(f"cpu.{name}")
        columns.append(np.cumsum(np.broadcast_to(rate, (n,)) * 0.1))
    channels.append("loadavg.load1")
    columns.append(np.where(np.arange(n) >= 100, 3.0, 0.5))
    tel = Telemetry("h", ts, np.column_stack(columns), channels, {"interval_s": 0.1})
    episode = Episode(12 * S, 18 * S, "cpu_contention", "cpu", "low", {})
    state = host_state(tel, tel.slice_rows(0, 90), episode)
    assert state["during"]["load1"] == 3.0 and state["baseline"]["load1"] == 0.5
    assert state["during"]["steal_pct"] == pytest.approx(10.0, abs=0.5)
    assert state["baseline"]["steal_pct"] == pytest.approx(0.0, abs=0.5)
    assert host_text(state).startswith("load 3 (0.5), busy ")


def test_names_place_reads_the_claim_of_the_strongest_overlapping_window() -> None:
    from reveal.inject.scoring import names_place

    s = 1_000_000_000
    starts = np.arange(0, 10) * s
    ends = starts + 3 * s
    combined = np.array([0, 0, 0, 5, 9, 7, 0, 0, 0, 0], dtype=float)
    flagged = combined > 1
    claims = {3: "CPU busy rose.", 4: "Share of periods throttled in cgroup rvinj-1-job rose.",
              5: "Memory fell."}
    episode = Episode(3 * s, 6 * s, "cgroup_throttle", "cpu", "high",
                      {"where": ["rvinj-1-job"]})
    assert names_place(episode, starts, ends, combined, flagged, claims) is True
    claims[4] = "CPU busy fell."
    assert names_place(episode, starts, ends, combined, flagged, claims) is False
    # nothing to name, or nothing flagged over the episode: no verdict
    plain = Episode(3 * s, 6 * s, "cpu_contention", "cpu", "high", {})
    assert names_place(plain, starts, ends, combined, flagged, claims) is None
    assert names_place(episode, starts, ends, combined, np.zeros(10, bool), claims) is None
