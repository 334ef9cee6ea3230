"""Direct evidence: signs that name their cause, read straight off their channels.

Some counters say what is wrong without a model: a cgroup throttled in most of its CPU-quota
periods, packets dropped or held back by a queueing discipline, TCP segments sent again.
A window that shows one is flagged (under the same persistence rule as the detectors'
verdicts), even where the detectors saw nothing: a channel that was constant in the
baseline takes no part in detection. In a flagged window the sign leads the reasons (and
so the claim) and its subsystem leads the evidence, naming the cgroup, interface or
network namespace from the channel's labels — unless it is only a symptom (CPU pressure,
retransmissions) and the detectors clearly name another subsystem (:func:`lead_with`).

The signs are the metrics whose catalog entry has a ``sign`` table
(:class:`reveal.catalog.DirectSign`: the least value, whether it is a cause, whether the
channel moves in bursts), each named in its entry's subsystem; the reason for each least
value is the comment above its entry. Each sign is judged on the window mean of its channel
(rates per second after :func:`reveal.analysis.derive.derive`, or percent) against the
baseline's window means of the same channel: at or above the sign's least value and
``significance.direct_z`` robust z above their median. For a channel that moves in bursts as a
job runs (a distributed job's retransmissions: a quiet median, a loud tail) the scale is at
least the baseline's upper tail's (the 99th percentile's distance from the median, in sigmas
of a normal law), so a burst like the baseline's own is not a sign. Not for CPU pressure:
the learn of ``reveal watch`` holds its own model fit, a burst of pressure that would hide
contention.
A channel absent from the baseline (a cgroup, namespace or qdisc that appeared mid-run) is
judged against zero, what a counter of trouble implies where it did not exist.

A setting changed is a sign too, and a cause (:func:`setting_changes`): a configuration
channel (:mod:`reveal.analysis.hostconfig`: an interface's MTU, a link's speed, the huge-page
pool, a GPU's power limit) whose value at the end of a window differs from its value at the
window's start. Only the windows that hold the change show it, whatever the baseline held: a
run on a host set up differently is said once in the warnings, not flagged window after
window, and a value that stays changed is the run's new state.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Collection

import numpy as np

from reveal.analysis.attribute import ROBUST_Z_CAP
from reveal.analysis.constants import MAD_TO_SIGMA, TAIL_QUANTILE, TAIL_SIGMAS
from reveal.analysis.evidence import SETTING, Reason, WindowEvidence
from reveal.analysis.hostconfig import configuration_columns, is_configuration
from reveal.analysis.windows import span_sums
from reveal.catalog import default_catalog
from reveal.config import SignificanceConfig, significance_of
from reveal.frame import Telemetry, channel_metric


@dataclasses.dataclass(frozen=True)
class Sign:
    """A metric whose window mean at or above ``least`` (its unit) is direct evidence;
    ``cause``: it says what holds the job back (a quota, a queueing discipline), not how
    the job suffers from it (retransmissions), and leads before symptoms. ``tail``: the
    channel moves in bursts as a job runs, and its scale is at least the baseline's upper
    tail's (see :func:`direct_signs`)."""

    metric: str
    subsystem: str
    least: float
    cause: bool = True
    tail: bool = False


@functools.lru_cache(maxsize=4096)
def sign_of(metric: str) -> Sign | None:
    """The direct sign ``metric`` carries (its catalog entry's ``sign``), else None."""
    info = default_catalog().lookup(metric)
    if info.sign is None:
        return None
    return Sign(metric, info.subsystem, info.sign.least, info.sign.cause, info.sign.tail)


def is_sign(metric: str) -> bool:
    """Whether ``metric`` carries direct evidence (a sign, see :func:`sign_of`, or a
    setting, see :func:`setting_changes`)."""
    return sign_of(metric) is not None or is_configuration(metric)


def _is_cause(metric: str) -> bool:
    sign = sign_of(metric)
    return sign.cause if sign is not None else (
        is_configuration(metric) or default_catalog().lookup(metric).counts_rare_events)


@functools.lru_cache(maxsize=16)
def _sign_columns(channels: tuple[str, ...]) -> tuple[np.ndarray, tuple[Sign, ...]]:
    """Columns of ``channels`` that carry a sign, and each one's sign."""
    cols, signs = [], []
    for i, channel in enumerate(channels):
        sign = sign_of(channel_metric(channel))
        if sign is not None:
            cols.append(i)
            signs.append(sign)
    return np.array(cols, dtype=np.intp), tuple(signs)


def window_sums(tel: Telemetry, cols: np.ndarray, start_ns: np.ndarray,
                size: int) -> tuple[np.ndarray, np.ndarray]:
    """(W, len(cols)) twice: the sum of the finite values of columns ``cols`` over each
    window of ``size`` samples from the sample at ``start_ns``, and how many there were."""
    x = tel.values[:, cols]
    finite = np.isfinite(x)
    lo = np.searchsorted(tel.timestamps_ns, start_ns, side="left")
    total = span_sums(np.where(finite, x, 0.0), lo, int(size))  # the same bits, live or not
    return total, span_sums(finite.astype(np.float64), lo, int(size))


def window_means(tel: Telemetry, cols: np.ndarray, start_ns: np.ndarray,
                 size: int) -> np.ndarray:
    """Mean of columns ``cols`` over each window of ``size`` samples from the sample at
    ``start_ns`` (W, len(cols)); NaN where a window holds no finite value. Counting
    samples, not time, a window holds the same samples whatever follows it (live or not)."""
    total, n = window_sums(tel, cols, start_ns, size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, total / np.where(n > 0, n, 1.0), np.nan)


def baseline_levels(d_base: Telemetry, start_ns: np.ndarray,
                    size: int) -> dict[str, tuple[float, float, float]]:
    """Median, MAD and :data:`TAIL_QUANTILE` of the window means of every sign channel of
    a derived baseline (in the channel's units)."""
    cols, _ = _sign_columns(tuple(d_base.channels))
    if not len(cols) or not len(start_ns):
        return {}
    means = window_means(d_base, cols, start_ns, size)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a channel with no value: level 0
        med = np.nan_to_num(np.nanmedian(means, axis=0))
        mad = np.nan_to_num(np.nanmedian(np.abs(means - med), axis=0))
        tail = np.nan_to_num(np.nanquantile(means, TAIL_QUANTILE, axis=0))
    return {d_base.channels[c]: (float(m), float(s), float(t))
            for c, m, s, t in zip(cols, med, mad, tail, strict=True)}


@dataclasses.dataclass
class DirectSigns:
    """The direct signs of a run's windows: ``shown`` (W,) whether a window shows one,
    ``reasons`` the signs of each window that does, strongest first."""

    shown: np.ndarray
    reasons: dict[int, list[Reason]]


def merge_signs(first: DirectSigns, then: DirectSigns) -> DirectSigns:
    """The signs of both: a window shows one where either does, its reasons ``first``'s
    followed by ``then``'s."""
    reasons = {w: list(r) for w, r in first.reasons.items()}
    for w, more in then.reasons.items():
        reasons[w] = reasons.get(w, []) + more
    return DirectSigns(np.asarray(first.shown, dtype=bool) | np.asarray(then.shown, dtype=bool),
                       reasons)


def setting_changes(d_run: Telemetry, start_ns: np.ndarray, size: int,
                    known: Collection[str]) -> DirectSigns:
    """The windows (``size`` samples from ``start_ns``) in which a setting changed: a
    configuration channel among ``known`` (those the baseline recorded: an interface that
    appeared since, set up as it came, is no change) whose last finite value in the window
    differs from its first. Each such channel is a reason (feature :data:`SETTING`; value:
    the new setting, baseline: the old one), the largest relative change first."""
    out = DirectSigns(np.zeros(len(start_ns), dtype=bool), {})
    cols = np.array([c for c in configuration_columns(tuple(d_run.channels)).tolist()
                     if d_run.channels[c] in known], dtype=np.intp)
    if not len(cols) or not len(start_ns) or d_run.n_samples == 0:
        return out
    x = d_run.values[:, cols]
    n = len(x)
    rows = np.arange(n)
    finite = np.isfinite(x)
    # the last finite row at or before each row, and the first at or after it (-1, n: none)
    last_at = np.maximum.accumulate(np.where(finite, rows[:, None], -1), axis=0)
    first_from = np.minimum.accumulate(np.where(finite, rows[:, None], n)[::-1], axis=0)[::-1]
    lo = np.searchsorted(d_run.timestamps_ns, start_ns, side="left")
    hi = np.minimum(lo + int(size), n) - 1
    inside = lo <= hi
    lo_c, hi_c = np.minimum(lo, n - 1), np.maximum(hi, 0)
    a = first_from[lo_c]  # (W, M) the first finite row in the window
    b = last_at[hi_c]  # and the last
    ok = inside[:, None] & (a <= b) & (a < n) & (b >= 0)
    m = np.arange(len(cols))
    before = x[np.clip(a, 0, n - 1), m]
    after = x[np.clip(b, 0, n - 1), m]
    changed = ok & (before != after)
    out.shown = changed.any(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        size_of = np.abs(after - before) / np.maximum(np.abs(before), np.abs(after))
    ws, js = np.nonzero(changed)
    for i in np.lexsort((-size_of[ws, js], ws)):  # per window, the largest change first
        w, j = int(ws[i]), int(js[i])
        channel = d_run.channels[cols[j]]
        out.reasons.setdefault(w, []).append(
            Reason(channel, channel_metric(channel), SETTING, "", 0.0, float(after[w, j]),
                   float(before[w, j]), ROBUST_Z_CAP))
    return out


def direct_signs(d_run: Telemetry, start_ns: np.ndarray, size: int,
                 levels: dict[str, tuple[float, ...]], settings: Collection[str] = (),
                 subsystem_of: Callable[[str], str] = lambda _metric: "",
                 significance: SignificanceConfig | None = None) -> DirectSigns:
    """The direct signs each window (``size`` samples from ``start_ns``) of a derived run
    shows, judged against the baseline ``levels`` (see :func:`baseline_levels`; absent:
    zero; levels saved without the upper quantile are judged on median and MAD); with the
    changes of the configuration channels ``settings`` in it first
    (:func:`setting_changes`, their subsystem from ``subsystem_of(metric)``).
    ``significance``: the model's settings (``direct_z``; the code's defaults when None)."""
    out = _threshold_signs(d_run, start_ns, size, levels,
                           significance_of(significance).direct_z)
    if not settings:
        return out
    changed = setting_changes(d_run, start_ns, size, settings)
    out.shown = out.shown | changed.shown
    for w, reasons in changed.reasons.items():
        named = [dataclasses.replace(r, subsystem=subsystem_of(r.metric)) for r in reasons]
        out.reasons[w] = named + out.reasons.get(w, [])
    return out


def _threshold_signs(d_run: Telemetry, start_ns: np.ndarray, size: int,
                     levels: dict[str, tuple[float, ...]], direct_z: float) -> DirectSigns:
    """The signs of the catalog (:func:`sign_of`; see :func:`direct_signs`)."""
    cols, signs = _sign_columns(tuple(d_run.channels))
    out = DirectSigns(np.zeros(len(start_ns), dtype=bool), {})
    if not len(cols) or not len(start_ns):
        return out
    means = window_means(d_run, cols, start_ns, size)  # (W, M)
    names = [d_run.channels[c] for c in cols]
    level = [tuple(levels.get(n, (0.0, 0.0))) for n in names]
    med = np.array([lv[0] for lv in level])
    mad = np.array([lv[1] for lv in level])
    # the upper tail's sigmas, for bursty channels with a tail on record (0 otherwise)
    tail_scale = np.array([(lv[2] - lv[0]) / TAIL_SIGMAS if sign.tail and len(lv) > 2 else 0.0
                           for lv, sign in zip(level, signs, strict=True)])
    least = np.array([s.least for s in signs])
    scale = np.maximum.reduce([MAD_TO_SIGMA * mad, tail_scale, least / direct_z])
    with np.errstate(invalid="ignore"):
        z = (means - med) / scale
        shown = (means >= least) & (z >= direct_z)
        # a baseline that never moved (or never had the channel): a flat one, as the
        # attribution words it (no sigma quoted); a quiet median with a loud tail is not flat
        z = np.where((mad > 0) | (tail_scale > 0), np.minimum(z, ROBUST_Z_CAP), ROBUST_Z_CAP)
        strength = means / least
    out.shown = shown.any(axis=1)
    rows, js = np.nonzero(shown)
    symptom = np.array([not s.cause for s in signs])
    # causes before symptoms, then the strongest: by robust z, then by how far past its
    # least value
    for i in np.lexsort((-strength[rows, js], -z[rows, js], symptom[js], rows)):
        w, j = int(rows[i]), int(js[i])
        sign = signs[j]
        out.reasons.setdefault(w, []).append(
            Reason(names[j], sign.metric, "mean", sign.subsystem, 0.0, float(means[w, j]),
                   float(med[j]), float(z[w, j])))
    return out


def lead_with(evidence: WindowEvidence, direct: list[Reason],
              significance: SignificanceConfig | None = None) -> WindowEvidence:
    """``evidence`` with the direct signs first: they take ``direct_share`` of the
    window's evidence (split by robust z) and their subsystems lead (``significance``: the
    model's settings; the code's defaults when None).

    Signs that are only symptoms (CPU pressure, retransmissions) yield where the detectors
    put at least ``detector_lead`` of their own evidence on another subsystem whose
    strongest reason lies further from its baseline (robust z) than every sign from its
    own: a packet flood keeps the CPUs busy with its softirq work, and pressure 6 σ over
    the baseline's, beside packet counters that left a flat baseline, does not make it a
    CPU fault. The window stays flagged; the detectors' evidence leads, the signs follow
    it among the reasons."""
    if not direct:
        return evidence
    sig = significance_of(significance)
    share = sig.direct_share
    if _symptoms_yield(evidence, direct, sig.detector_lead):
        named = {r.channel for r in evidence.reasons}
        return dataclasses.replace(
            evidence, reasons=evidence.reasons + [r for r in direct if r.channel not in named])
    z = np.array([r.robust_z for r in direct])
    weights = share * z / z.sum()  # z >= direct_z > 0
    lead = [dataclasses.replace(r, contribution=float(w)) for r, w in zip(direct, weights,
                                                                        strict=True)]
    named = {r.channel for r in lead}
    rest = [dataclasses.replace(r, contribution=r.contribution * (1 - share))
            for r in evidence.reasons if r.channel not in named]
    shares = {s: v * (1 - share) for s, v in evidence.subsystem_shares.items()}
    for r in lead:
        shares[r.subsystem] = shares.get(r.subsystem, 0.0) + r.contribution
    first = list(dict.fromkeys(r.subsystem for r in lead))
    order = first + sorted((s for s in shares if s not in first), key=lambda s: -shares[s])
    return dataclasses.replace(evidence, subsystems=order, subsystem_shares=shares,
                               reasons=lead + rest)


def _symptoms_yield(evidence: WindowEvidence, direct: list[Reason], lead: float) -> bool:
    """Whether the signs are all symptoms outweighed by the detectors' leading subsystem
    (see :func:`lead_with`), judged by its strongest reason that can matter on its own (a
    free list churning never outweighs a sign)."""
    shares = evidence.subsystem_shares
    if not shares or any(_is_cause(r.metric) for r in direct):
        return False
    leader = max(shares, key=shares.__getitem__)
    lead_z = max((abs(r.robust_z) for r in evidence.reasons
                  if r.subsystem == leader
                  and default_catalog().lookup(r.metric).can_matter_alone), default=0.0)
    return (shares[leader] >= lead
            and all(r.subsystem != leader and r.robust_z < lead_z for r in direct))
