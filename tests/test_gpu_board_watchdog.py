"""The GPU probes' latest-values board under its real watchdog thread: a poller that stops
publishing reads NaN after ``stale_s``; a pause of the whole process (one C call holding
the interpreter, every thread starved at once) makes no block stale."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from reveal.collect._gpu_board import Board
from reveal.collect._gpu_poller import Watchdog

INTERVAL_S = 0.05


def _publisher(board: Board, stop: threading.Event) -> threading.Thread:
    """A poller stand-in publishing block "a" every interval until ``stop``."""

    def run() -> None:
        while not stop.wait(INTERVAL_S):
            board.publish("a", np.array([1.0, 2.0]))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _hold_the_interpreter(seconds: float) -> float:
    """Run one C loop that never lets another thread run for about ``seconds``; returns how
    long it held."""
    start = time.monotonic()
    n = 1_000_000
    while time.monotonic() - start < 0.05:  # size the loop on this host
        sum(range(n))
        n *= 2
    per_item = (time.monotonic() - start) / (2 * n)
    start = time.monotonic()
    sum(range(int(seconds / per_item)))
    return time.monotonic() - start


@pytest.mark.alone  # its sleeps are measured in tenths of a second: a busy host stretches them
def test_a_process_pause_is_not_a_stuck_poller_but_a_stuck_poller_is() -> None:
    board = Board()
    board.layout([("a", 2, 3 * INTERVAL_S)])
    stop = threading.Event()
    watchdog = Watchdog(board, INTERVAL_S)
    watchdog.start()
    publisher = _publisher(board, stop)
    try:
        time.sleep(5 * INTERVAL_S)
        assert board.expired == 0 and np.array_equal(board.values, [1.0, 2.0])
        held = _hold_the_interpreter(0.6)
        assert held > 3 * INTERVAL_S * 2  # a pause well past stale_s
        # the watchdog wakes first, late, then the poller; its lateness is remembered over
        # its last 4 wakes, so look before 4 more on-time wakes (4 intervals) push it out
        time.sleep(2 * INTERVAL_S)
        assert board.expired == 0, board.grace_ns
        assert np.array_equal(board.values, [1.0, 2.0]) and board.stale_keys() == []
        assert board.grace_ns > 3 * INTERVAL_S * 1e9  # it saw its own lateness
        time.sleep(8 * INTERVAL_S)
        assert board.grace_ns < INTERVAL_S * 1e9  # and forgot it once on time again
        stop.set()  # the poller now stuck: stale after stale_s, as before
        publisher.join()
        deadline = time.monotonic() + 3.0
        while not board.stale_keys():
            assert time.monotonic() < deadline, "a stuck poller never went stale"
            time.sleep(INTERVAL_S / 5)
        assert board.stale_keys() == ["a"] and np.isnan(board.values).all()
        assert board.expired == 1
    finally:
        stop.set()
        watchdog.stop()
        watchdog.join()
