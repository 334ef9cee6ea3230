"""Rare events: error and fault counts judged by how rare they were in the baseline.

An OOM kill, a TCP retransmission timeout, a listen-queue drop, a GPU Xid error costs next to
no CPU time, so judged as work done (the least change of :mod:`reveal.analysis.significance`)
one would need hundreds a second; and a counter that never moved in the baseline is a
constant column the detectors never see. Yet one OOM kill on a host that never had one is
the most telling thing in the run. So every channel the catalog calls an ``event`` (kind:
a cumulative error or fault count) and counts in whole events (not a percentage, not
bytes) is judged on its own, as a direct sign (:mod:`reveal.analysis.direct`):

* a window's count is the number of events in its samples;
* the baseline's counts are a count model: their mean and variance give a negative
  binomial law (a Poisson law where they vary no more than one), and its envelope is the
  largest count any baseline window held;
* a window shows the sign when its count is at least ``rare_event_least`` events (an
  absolute floor: one by default), past the envelope, and no more likely than
  ``rare_event_p`` under the count model (a channel that bursts in the baseline must burst
  well past its own bursts). A channel the baseline never had, or never saw move, has a
  model of zero events: any count at or above the floor shows.

The sign names its channel, the count and the baseline's envelope, and is a cause: an OOM
kill, not the memory its victim held, leads the window's claim.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from scipy import stats

from reveal.analysis.attribute import ROBUST_Z_CAP
from reveal.analysis.direct import DirectSigns, window_sums
from reveal.analysis.evidence import Reason
from reveal.catalog import default_catalog
from reveal.frame import Telemetry, channel_metric

#: The feature a rare-event reason names: the window's event count (as a sum of the
#: window's per-second rates, as :func:`reveal.report.claims.predicate` words it).
FEATURE = "sum"


@functools.lru_cache(maxsize=8192)
def is_rare_event(metric: str) -> bool:
    """Whether ``metric`` counts rare error or fault events (the catalog's
    :attr:`reveal.catalog.MetricInfo.counts_rare_events`: kind ``event`` and ``rare``, in
    whole events, no direct sign of its own)."""
    return default_catalog().lookup(metric).counts_rare_events


@functools.lru_cache(maxsize=16)
def _event_columns(channels: tuple[str, ...]) -> np.ndarray:
    return np.array([k for k, c in enumerate(channels) if is_rare_event(channel_metric(c))],
                    dtype=np.intp)


def window_counts(tel: Telemetry, cols: np.ndarray, start_ns: np.ndarray,
                  size: int) -> np.ndarray:
    """(W, len(cols)) the events in each window of ``size`` samples from ``start_ns``, as
    the sum of the window's per-second rates times the sampling interval, rounded to whole
    events (NaN where a window holds no finite rate)."""
    total, n = window_sums(tel, cols, start_ns, size)
    # whole events: rates times the nominal interval miss the sample's own length by a
    # little (one kill read as 0.9998)
    return np.where(n > 0, np.rint(total * tel.interval_s), np.nan)


def event_envelopes(d_base: Telemetry, start_ns: np.ndarray,
                    size: int) -> dict[str, tuple[float, float, float]]:
    """Per event channel of a derived baseline: the mean, variance and largest of its
    window counts (zeros for one that never moved)."""
    cols = _event_columns(tuple(d_base.channels))
    if not len(cols) or not len(start_ns) or d_base.n_samples < 2:
        return {}
    counts = window_counts(d_base, cols, start_ns, size)
    out: dict[str, tuple[float, float, float]] = {}
    for j, c in enumerate(cols):
        x = counts[:, j][np.isfinite(counts[:, j])]
        out[d_base.channels[c]] = ((float(x.mean()), float(x.var()), float(x.max()))
                                   if x.size else (0.0, 0.0, 0.0))
    return out


def least_counts(envelopes: Sequence[tuple[float, ...]], least: float, p: float) -> np.ndarray:
    """(M,) the least count of each channel that shows a sign: at least ``least``, above
    the baseline's largest, and with a chance of at most ``p`` under the negative binomial
    law of the baseline's mean and variance (Poisson where the variance is no larger)."""
    env = np.array([tuple(e)[:3] for e in envelopes], dtype=np.float64).reshape(-1, 3)
    mean, var, top = env[:, 0], env[:, 1], env[:, 2]
    quantile = np.zeros(len(env))
    moved = mean > 0
    poisson = moved & (var <= mean)
    quantile[poisson] = stats.poisson.isf(p, mean[poisson])
    over = moved & ~poisson
    n = mean[over] ** 2 / (var[over] - mean[over])
    quantile[over] = stats.nbinom.isf(p, n, n / (n + mean[over]))
    above_top = np.where(top > 0, np.nextafter(top, np.inf), 0.0)
    return np.maximum.reduce([np.full(len(env), float(least)), quantile + 1.0, above_top])


def rare_event_signs(d_run: Telemetry, start_ns: np.ndarray, size: int,
                     envelopes: Mapping[str, tuple[float, ...]], least: float, p: float,
                     subsystem_of: Callable[[str], str] = lambda _metric: "") -> DirectSigns:
    """The windows (``size`` samples from ``start_ns``) of a derived run in which some
    event channel counts at least its least count (:func:`least_counts` of the baseline's
    ``envelopes``, see :func:`event_envelopes`; a channel absent from them is judged
    against zero events); each such channel a reason, the largest count over its least
    first."""
    out = DirectSigns(np.zeros(len(start_ns), dtype=bool), {})
    cols = _event_columns(tuple(d_run.channels))
    if not len(cols) or not len(start_ns) or d_run.n_samples < 2:
        return out
    counts = window_counts(d_run, cols, start_ns, size)
    names = [d_run.channels[c] for c in cols]
    envelope = [tuple(envelopes.get(n, (0.0, 0.0, 0.0))) for n in names]
    need = least_counts(envelope, least, p)
    mean = np.array([e[0] for e in envelope])
    sd = np.sqrt(np.array([e[1] for e in envelope]))
    with np.errstate(invalid="ignore"):
        shown = counts >= need
        over = counts / need
    out.shown = shown.any(axis=1)
    ws, js = np.nonzero(shown)
    interval = d_run.interval_s
    for i in np.lexsort((-over[ws, js], ws)):
        w, j = int(ws[i]), int(js[i])
        metric = channel_metric(names[j])
        # value and baseline as the window's sum of per-second rates (the claim multiplies
        # by the interval): the count and the baseline's mean count; its z in the baseline
        # counts' standard deviations (a baseline that never varied: flat, at the cap)
        z = (counts[w, j] - mean[j]) / sd[j] if sd[j] > 0 else ROBUST_Z_CAP
        out.reasons.setdefault(w, []).append(
            Reason(names[j], metric, FEATURE, subsystem_of(metric), 0.0,
                   float(counts[w, j] / interval), float(mean[j] / interval),
                   float(min(z, ROBUST_Z_CAP))))
    return out
