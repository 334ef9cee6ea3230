"""The watch's own settings: the ``watch.*`` branch of the settings tree
(:mod:`reveal.settings`), given to ``reveal watch`` as ``--set watch.NAME=VALUE`` and
printed by ``reveal config --show``. The analysis settings a watch learns with are the
tree's root (:data:`reveal.live.keeper.LEARN_SETTINGS` under ``--set``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reveal.errors import InputError
from reveal.live.keeper import RECOMMENDED_LEARN_S
from reveal.settings import WATCH, replace_dotted


@dataclass(frozen=True)
class WatchConfig:
    """How ``reveal watch`` learns its model, beside the analysis it learns with."""

    # seconds: the shortest --learn accepted without --allow-short-learn (never below the
    # 15 s the detectors need to fit at all), and the earliest second into the learn a
    # provisional model scores from (reveal.live.keeper.rehearsal_start_s). The default:
    # 60 windows of 3 s sliding by 1 s, what the 99th-percentile threshold needs
    learn_floor_s: float = RECOMMENDED_LEARN_S


def check_learn_floor(value: Any) -> float:
    """``value`` as a learn floor in seconds: a finite number > 0, else an
    :class:`InputError` naming the setting."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value > 0):
        raise InputError(f"watch setting {WATCH}.learn_floor_s takes a number of seconds "
                         f"> 0 (the shortest --learn; {RECOMMENDED_LEARN_S:g} s by default), "
                         f"got {value!r}")
    return float(value)


def watch_config(overrides: Mapping[str, Any] | None = None) -> WatchConfig:
    """:class:`WatchConfig` with ``overrides`` by name within the branch (``{"learn_floor_s":
    13}``, as :func:`reveal.settings.split_branch` leaves them); an unknown name or a bad
    value is an :class:`InputError`."""
    config = replace_dotted(WatchConfig(), overrides, WATCH, f"{WATCH}.")
    check_learn_floor(config.learn_floor_s)
    return config
