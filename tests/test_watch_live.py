"""Live scoring is the batch analysis fed window by window: a recording replayed through the
sample buffer in uneven chunks gets, window for window, the scores, flags and evidence of
``Reveal.score`` on the whole recording.

Tolerances: NumPy's reductions round differently by the shape of what they reduce (a
single column is summed pairwise; in wider arrays a column's place decides whether the
vectorised body, with fused multiply-adds, or the scalar tail handles it), so a feature
computed for one window differs from the same feature computed among a whole run's in
the last bit. Every feature keeps that ~1e-16 agreement except the ADF statistic on a
degenerate window (a counter that is zero but for two or three spikes), whose regression
is so ill-conditioned that the last bit becomes ~1e-4 of the statistic; through the
detectors that is up to ~2e-5 of a score. Hence rtol 1e-4 on scores, and exact flags.

The model is always fitted on other data than the run scored: the combined score ranks a
window's detector scores among the baseline's, so a baseline window scored again lands
exactly on a tie, where that last bit decides the rank.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.live.buffer import SampleBuffer, TeeSink
from reveal.live.scorer import LiveScorer, replay
from reveal.model import Reveal
from reveal.store.run_reader import read_run

sys.path.insert(0, str(Path(__file__).parent))
from test_model import _synthetic

RTOL = 1e-4


def _assert_same(live, report) -> None:
    w = report.windows
    assert [x.window_id for x in live] == list(range(len(w.combined)))
    np.testing.assert_array_equal([x.start_ns for x in live], w.start_ns)
    for name, scores in w.scores.items():
        np.testing.assert_allclose([x.scores[name] for x in live], scores, rtol=RTOL,
                                   atol=1e-9, err_msg=name)
    np.testing.assert_allclose([x.combined for x in live], w.combined, rtol=RTOL, atol=1e-9)
    np.testing.assert_array_equal([x.flagged for x in live], w.flagged)
    by_window = {a.window_id: a for a in report.anomalies}
    assert set(by_window) == {x.window_id for x in live if x.flagged}
    for x in live:
        if x.flagged:  # the alert's evidence is the report's
            a = by_window[x.window_id]
            assert x.claim == a.claim
            assert x.evidence.reasons[0].channel == a.reasons[0].channel
            # reasons whose contributions tie to the last bits (ADF sums are rounded
            # differently for one window than for many) may swap places, or the last one
            # in or out of the top five: compare the reasons both hold
            live_reasons = {(r.channel, r.feature): r for r in x.evidence.reasons}
            batch_reasons = {(r.channel, r.feature): r for r in a.reasons}
            common = sorted(set(live_reasons) & set(batch_reasons))
            np.testing.assert_allclose([live_reasons[k].value for k in common],
                                       [batch_reasons[k].value for k in common], rtol=1e-3)
            for mine, other in ((live_reasons, batch_reasons), (batch_reasons, live_reasons)):
                last = min(r.contribution for r in other.values())
                for key in set(mine) - set(other):  # only a near-tie at the cut
                    assert mine[key].contribution <= last + 1e-3, (key, mine[key], last)
            assert x.evidence.subsystems == a.subsystems


def test_replay_of_a_synthetic_fault_equals_the_batch_report():
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(120, seed=3, fault=(60, 80))
    report = model.report(run)
    live = replay(model, run, chunk_rows=[7, 13, 1, 30, 45, 2])
    assert sum(x.flagged for x in live) >= 10  # the fault is there, and flagged live too
    _assert_same(live, report)


def test_a_model_with_generations_is_scored_live_with_them():
    # a model file carrying a second generation: live scoring asks both, as Reveal.score
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(120, seed=3, fault=(60, 80), start_s=1000)
    alone = model.report(run)
    model.partial_fit(model.score_windows(_synthetic(400, seed=8, start_s=600)), refit=True)
    assert model.generations_ == 2
    report = model.report(run)
    assert not np.allclose(report.windows.combined, alone.windows.combined)  # they differ
    _assert_same(replay(model, run, chunk_rows=[9, 31, 4]), report)
    with pytest.raises(InputError, match="generations"):
        LiveScorer(model, interval_s=0.1, threshold_factor=0.5)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Telemetry:
    """~45 s of this host from the real collector, with a CPU burst in its second half."""
    out = tmp_path_factory.mktemp("live") / "run"
    collect = subprocess.Popen([sys.executable, "-m", "reveal.cli", "collect", "--duration",
                                "45", "--out", str(out), "--quiet"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(32)
        hog = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()+6\n"
                                "while time.time()<t: pass"])
        hog.wait(30)
        _, err = collect.communicate(timeout=60)
    finally:
        collect.kill()
    assert collect.returncode == 0, err.decode()
    return read_run(out)


def test_replay_of_a_real_recording_equals_the_batch_report(recorded):
    tel = recorded
    split = int(np.searchsorted(tel.timestamps_ns, tel.timestamps_ns[0] + 22e9))
    baseline, run = tel.slice_rows(0, split), tel.slice_rows(split, tel.n_samples)
    model = Reveal().fit(baseline)
    report = model.report(run)
    live = replay(model, run, chunk_rows=[10, 3, 27, 10, 1])
    assert len(live) >= 15
    _assert_same(live, report)
    # the same after a save and load (what a restarted watch scores with)
    loaded = Reveal.load(model.save(Path(tel.meta["path"]).parent / "m.model"))
    _assert_same(replay(loaded, run, chunk_rows=11), report)


def test_a_scorer_behind_catches_up_in_one_call_and_a_lost_window_breaks_persistence():
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(60, seed=3, fault=(20, 40))
    report = model.report(run)
    scorer = LiveScorer(model, interval_s=0.1, max_windows=100)
    buffer = SampleBuffer(run.channels, capacity=run.n_samples, meta={"interval_s": 0.1})
    buffer.append_block(run.timestamps_ns, run.values)
    live = scorer.score(buffer.read, buffer.total, buffer.oldest)  # all at once
    np.testing.assert_allclose([x.combined for x in live], report.windows.combined)
    np.testing.assert_array_equal([x.flagged for x in live], report.windows.flagged)
    assert scorer.score(buffer.read, buffer.total) == []  # nothing new

    # rows gone from a small buffer: those windows are skipped, persistence starts again
    scorer = LiveScorer(model, interval_s=0.1)
    small = SampleBuffer(run.channels, capacity=50, meta={"interval_s": 0.1})
    for a in range(0, 250, 10):
        small.append_block(run.timestamps_ns[a:a + 10], run.values[a:a + 10])
    live = scorer.score(small.read, small.total, small.oldest)
    assert scorer.skipped > 0 and live[0].window_id == scorer.skipped
    assert not live[0].flagged  # no window before it known to be above
    first = live[0].window_id
    np.testing.assert_allclose([x.combined for x in live],
                               report.windows.combined[first:first + len(live)])


def test_buffer_joins_channel_layouts_and_tee_feeds_both():
    class Writer:
        def __init__(self):
            self.rows, self.channels = 0, None

        def append(self, ts, row):
            self.rows += 1

        def append_block(self, ts, rows):
            self.rows += len(ts)

        def set_channels(self, channels):
            self.channels = channels

        stats = "writer stats"

    writer = Writer()
    buffer = SampleBuffer(["a", "b"], capacity=100)
    tee = TeeSink(writer, buffer)
    tee.append_block(np.array([1, 2], dtype=np.int64), np.array([[1.0, 2.0], [3.0, 4.0]]))
    tee.set_channels(["a", "c"])
    assert buffer.layout_changes == 1 and buffer.layout_since == 2  # before its first row
    tee.append(3, np.array([5.0, 6.0]))
    tee.flush()
    assert writer.rows == 3 and writer.channels == ["a", "c"] and tee.stats == "writer stats"
    tel = buffer.read(0, 3)
    assert tel.channels == ["a", "b", "c"]
    np.testing.assert_array_equal(tel.values, [[1, 2, np.nan], [3, 4, np.nan], [5, np.nan, 6]])
    with pytest.raises(LookupError):
        buffer.read(0, 4)


def test_threshold_factor_lowers_the_threshold_and_refuses_nonsense():
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(60, seed=2)
    plain = replay(model, run)
    lower = replay(model, run, threshold_factor=0.01)
    assert lower[0].threshold == pytest.approx(plain[0].threshold * 0.01)
    # more windows score above the lowered threshold, but a clean run has no change that
    # matters, so none is flagged either way
    assert sum(x.combined > x.threshold for x in lower) > sum(x.combined > x.threshold
                                                              for x in plain)
    assert not any(x.flagged for x in plain) and not any(x.flagged for x in lower)
    with pytest.raises(InputError):
        LiveScorer(model, threshold_factor=0)


def test_a_lowered_threshold_flags_more_of_a_fault_and_nothing_outside_it():
    """Surprise alone decides (no least change), and CPU busy is 10 points higher from 20 s
    to 40 s: as fitted, a few of the fault's windows pass; at half the threshold, every
    window inside the fault does, and still none that lies wholly outside it."""
    model = Reveal(overrides={"detect.significance": False}).fit(_synthetic(600, seed=1))
    run = _synthetic(60, seed=2)
    run.values[200:400, 0] += 10  # rows 200..399 at 0.1 s: [20 s, 40 s)

    def flagged(live) -> set[int]:
        return {x.window_id for x in live if x.flagged}

    plain = replay(model, run)
    lower = replay(model, run, threshold_factor=0.5)
    start = {x.window_id: (x.start_ns - run.timestamps_ns[0]) / 1e9 for x in plain}
    inside = {w for w, s in start.items() if s >= 20 and s + 3 <= 40.1}
    outside = {w for w, s in start.items() if s + 3 <= 20 or s >= 40}
    assert flagged(plain) and flagged(plain) < flagged(lower)  # strictly more, theirs kept
    assert inside <= flagged(lower)
    assert not flagged(lower) & outside


def test_rehearsal_starts_a_third_into_a_span_long_enough_to_hold_one():
    from reveal.live.keeper import RECOMMENDED_LEARN_S, rehearsal_start_s

    assert rehearsal_start_s(600.0) == 200.0
    assert rehearsal_start_s(130.0) == RECOMMENDED_LEARN_S  # at least one model's worth
    assert rehearsal_start_s(120.0) is None  # too little left to learn the scoring in
    assert rehearsal_start_s(20.0) is None


def test_the_learn_floor_setting_moves_the_rehearsal_and_the_short_learn_refusal(
        tmp_path, capsys):
    from reveal.cli import main
    from reveal.live.config import WatchConfig, watch_config
    from reveal.live.keeper import RECOMMENDED_LEARN_S, rehearsal_start_s
    from reveal.live.service import ABSOLUTE_MIN_LEARN_S, check_learn

    assert WatchConfig().learn_floor_s == watch_config().learn_floor_s == RECOMMENDED_LEARN_S
    floor = watch_config({"learn_floor_s": 15}).learn_floor_s
    assert floor == 15.0
    # the rehearsal: a third of the span, at least the floor, with the floor left after
    assert rehearsal_start_s(40.0, floor) == 15.0
    assert rehearsal_start_s(60.0, floor) == 20.0
    assert rehearsal_start_s(29.0, floor) is None  # 14 s left
    assert rehearsal_start_s(40.0) is None  # with the default floor
    # the short-learn refusal: the floor without --allow-short-learn
    check_learn(40.0, False, 40.0)
    with pytest.raises(InputError, match="at least 60 windows"):
        check_learn(40.0, False)
    with pytest.raises(InputError, match=r"watch\.learn_floor_s is 41 s.*allow-short-learn"):
        check_learn(40.0, False, 41.0)
    check_learn(40.0, True, 41.0)
    # never below what the detectors need to fit on, whatever the floor
    check_learn(ABSOLUTE_MIN_LEARN_S, False, 5.0)
    with pytest.raises(InputError, match=f"at least {ABSOLUTE_MIN_LEARN_S:g} s"):
        check_learn(ABSOLUTE_MIN_LEARN_S - 1, False, 5.0)
    # a bad value is refused, naming the setting
    for bad in (0, -1.0, None, float("nan"), float("inf")):
        with pytest.raises(InputError, match=r"watch\.learn_floor_s takes a number of "
                                             r"seconds > 0"):
            watch_config({"learn_floor_s": bad})
    with pytest.raises(InputError, match=r"watch\.learn_floor_s takes a number"):
        watch_config({"learn_floor_s": "15s"})
    with pytest.raises(InputError, match=r"unknown watch setting watch\.learn_flor_s"):
        watch_config({"learn_flor_s": 15})
    # on the command line, before the watch records or listens
    state = tmp_path / "state"
    assert main(["watch", "--state", str(state), "--listen", "none",
                 "--set", "watch.learn_floor_s=0"]) == 2
    assert "watch.learn_floor_s takes a number of seconds > 0" in capsys.readouterr().err
    assert not state.exists()
    assert main(["watch", "--state", str(state), "--listen", "none", "--learn", "40s",
                 "--set", "watch.learn_floor_s=41"]) == 2
    assert "--learn 40s is too short: the learn floor watch.learn_floor_s is 41 s" in \
        capsys.readouterr().err


@pytest.mark.slow
def test_a_watch_scores_with_a_provisional_model_while_it_learns(tmp_path):
    """With a 40 s learn and a learn floor of 15 s (``watch.learn_floor_s``, 63 s by
    default), a provisional model scores from 15 s on (the floor: a third of the span is
    less) with its verdicts dropped (no alert fires while learning), then the model is
    fitted on the whole span but the windows of the provisional fit: that burst of the
    watch's own CPU is no part of the host's normal."""
    import signal
    import subprocess
    import sys
    import time

    alerts, log = tmp_path / "alerts.jsonl", tmp_path / "watch.log"
    with open(log, "wb") as handle:
        watch = subprocess.Popen(
            [sys.executable, "-m", "reveal.cli", "watch", "--state", str(tmp_path / "state"),
             "--learn", "40s", "--set", "watch.learn_floor_s=15", "--listen", "none",
             "--alerts-file", str(alerts)],
            stdout=subprocess.DEVNULL, stderr=handle)
    try:
        deadline = time.monotonic() + 150
        while "model learned in" not in log.read_text() and time.monotonic() < deadline:
            assert watch.poll() is None, log.read_text()[-2000:]
            time.sleep(0.2)
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(60) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    text = log.read_text()
    assert "scoring with a provisional model from 15 s" in text, text[-2000:]
    assert text.index("scoring with a provisional model") < text.index("model learned in")
    assert not alerts.exists() or '"firing"' not in alerts.read_text()
    own = re.search(r"fitting the model on 40 s of .*, leaving out the (\d+) s of its own "
                    r"earlier fits", text)
    assert own and int(own[1]) >= 1, text[-2000:]
    fitted = Reveal.load(tmp_path / "state" / "model.reveal").fitted_
    assert fitted.baseline_windows < 38  # 3 s windows sliding by 1 s over 40 s
    assert any("overlap the analysis' own work" in w for w in fitted.warnings)


def test_a_new_steady_state_is_adopted_live_as_in_the_batch():
    """3 GiB of anonymous memory taken at 40 s and kept: the live scorer, which
    sees each window on its own, keeps the last windows' features across calls and stops
    flagging once the level has held still, window for window as the batch report."""
    rng = np.random.default_rng(12)

    def with_anon(tel: Telemetry, taken_at: float | None) -> Telemetry:
        anon = 8 * 2**30 + rng.normal(0, 2e6, tel.n_samples)
        if taken_at is not None:
            anon[int(taken_at * 10):] += 3 * 2**30
        meta = dict(tel.meta, mem_total_bytes=24 * 2**30, n_cpus=2)
        return Telemetry(tel.host, tel.timestamps_ns, np.column_stack([tel.values, anon]),
                         [*tel.channels, "mem.AnonPages"], meta)

    model = Reveal(overrides={"detect.settle_s": 20.0}).fit(
        with_anon(_synthetic(600, seed=1), None))
    run = with_anon(_synthetic(120, seed=3), 40.0)
    report = model.report(run)
    live = replay(model, run, chunk_rows=[7, 13, 1, 30, 45, 2])
    flagged = np.array([x.flagged for x in live])
    start = (np.array([x.start_ns for x in live]) - run.timestamps_ns[0]) / 1e9
    assert flagged[(start >= 37) & (start < 45)].any()
    assert not flagged[start >= 65].any()
    assert len(report.steady_states) == 1
    _assert_same(live, report)


def test_a_window_that_holds_a_change_that_matters_is_scored_at_once():
    """Windows scored five at a time, but a CPU hog from 60 s is scored as its windows
    close, not up to four strides later; verdicts, evidence and claims are those of the
    batch report either way, and the quiet windows before it wait for their batch."""
    model = Reveal().fit(_synthetic(600, seed=1))
    run = _synthetic(120, seed=3, fault=(60, 80))
    run.meta.update(mem_total_bytes=24 * 2**30, n_cpus=2)
    report = model.report(run)
    late_at: list[int] = []
    early_at: list[int] = []
    late = replay(model, run, chunk_rows=1, score_every=5, scored_at=late_at)
    early = replay(model, run, chunk_rows=1, score_every=5, early=True, scored_at=early_at)
    _assert_same(late, report)
    _assert_same(early, report)
    scorer = LiveScorer(model)
    closes = [scorer.rows_of(x.window_id)[1] for x in early]  # rows when each closed
    first = next(i for i, x in enumerate(early) if x.flagged)
    assert early_at[first] == closes[first]  # scored as it closed
    assert late_at[first] > closes[first] or late_at[first - 1] > closes[first - 1]
    start = (np.array([x.start_ns for x in early]) - run.timestamps_ns[0]) / 1e9
    quiet = np.flatnonzero(start < 50)
    assert sum(early_at[i] == closes[i] for i in quiet) <= len(quiet) // 5 + 1


def test_a_model_that_judges_surprise_alone_is_never_scored_early():
    model = Reveal(overrides={"detect.significance": False}).fit(_synthetic(600, seed=1))
    run = _synthetic(60, seed=3, fault=(20, 40))
    at: list[int] = []
    live = replay(model, run, chunk_rows=1, score_every=5, early=True, scored_at=at)
    scorer = LiveScorer(model)
    assert live and all(at[i] != scorer.rows_of(x.window_id)[1] or (x.window_id + 1) % 5 == 0
                        for i, x in enumerate(live))


def _with_kill_and_job(tel: Telemetry, kill_s: float | None, hang_s: float | None,
                       seed: int) -> Telemetry:
    """``tel`` with an OOM kill count (one kill at ``kill_s``) and a job's CPU time read every
    half second and repeated between reads (a held counter: 1 CPU, a tenth of one from
    ``hang_s``)."""
    rng = np.random.default_rng(seed)
    t = (tel.timestamps_ns - tel.timestamps_ns[0]) / 1e9
    kills = (t >= kill_s).astype(float) if kill_s is not None else np.zeros(len(t))
    cpus = 1.0 + rng.normal(0, 0.05, len(t))
    if hang_s is not None:
        cpus[t >= hang_s] = 0.1
    used = np.cumsum(cpus * 0.1e6)  # µs
    read = np.arange(len(t)) // 5 * 5  # the value of the last half-second read
    values = np.column_stack([tel.values, kills, used[read]])
    return Telemetry(tel.host, tel.timestamps_ns, values,
                     [*tel.channels, "vmstat.oom_kill", "cgroup.cpu.usage_usec{cgroup=job}"],
                     dict(tel.meta))


def test_a_rare_event_and_a_held_counters_fall_are_scored_as_their_windows_close():
    """The look between scoring calls judges what the rules judge: one OOM kill (a rare
    event, whose least change as CPU work is thousands) and a job's CPU time read every
    half second (a held counter, whose window median is 0 whatever it counts, its mean the
    level) ask for their windows to be scored at once, as a CPU hog's median does."""
    model = Reveal().fit(_with_kill_and_job(_synthetic(600, seed=1), None, None, seed=1))
    run = _with_kill_and_job(_synthetic(120, seed=3), kill_s=40.05, hang_s=80.0, seed=2)
    run.meta.update(mem_total_bytes=24 * 2**30, n_cpus=2)
    report = model.report(run)
    at: list[int] = []
    live = replay(model, run, chunk_rows=1, score_every=5, early=True, scored_at=at)
    _assert_same(live, report)
    scorer = LiveScorer(model)
    start = (np.array([x.start_ns for x in live]) - run.timestamps_ns[0]) / 1e9
    for since, subsystem in ((40.0, "memory"), (80.0, "cpu")):
        # the first window above the threshold: persistence waits on the next one, which
        # is scored at once because this one was above
        first = next(i for i, x in enumerate(live) if x.above and start[i] >= since - 3)
        assert start[first] < since + 3 and live[first + 1].flagged, (since, start[first])
        assert live[first].evidence.subsystems[0] == subsystem, live[first].claim
        assert at[first] == scorer.rows_of(live[first].window_id)[1], since  # as it closed
