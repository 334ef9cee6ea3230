"""Attribution: which metric–feature pairs, which subsystems, and why (paper §4.4, Table 4).

Input is the ensemble's per-column contributions for the flagged windows. For each window
the top pairs are kept with their share of the explanation, the value against the baseline
(median and robust z), and the subsystems ranked by summed contribution. The words (claims) are
:mod:`reveal.report.claims`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.evidence import Reason
from reveal.catalog import SUBSYSTEMS, Catalog, default_catalog
from reveal.frame import channel_metric


@dataclass
class Attribution:
    """Evidence behind one flagged window (numbers; :mod:`reveal.report.claims` words it)."""

    reasons: list[Reason]  # strongest first
    subsystems: list[str]  # with more than 5 % of the evidence, strongest first
    shares: dict[str, float]  # subsystem -> share of the evidence


#: Largest robust z a reason quotes. A channel flat on the baseline with no scale floor
#: (a gauge at 0, such as pages under writeback on an idle disk) would otherwise quote
#: 10¹³ sigmas for its first movement; the detectors clip at 100 anyway.
ROBUST_Z_CAP = 1000.0


def robust_z(values: np.ndarray, median: np.ndarray, mad: np.ndarray,
             least: np.ndarray | None = None) -> np.ndarray:
    """(value − median) / (1.4826·MAD), the scale never below ``least`` (the detectors'
    scale floor, same units) nor a tiny share of the level, so flat baselines stay finite;
    at most ±:data:`ROBUST_Z_CAP`."""
    scale = MAD_TO_SIGMA * mad
    floor = 1e-6 * np.maximum(np.abs(median), 1.0)
    if least is not None:
        floor = np.maximum(floor, least)
    with np.errstate(invalid="ignore"):
        return np.clip((values - median) / np.maximum(scale, floor), -ROBUST_Z_CAP,
                       ROBUST_Z_CAP)


EVIDENCE_CHANNELS = 2  # strongest channels per subsystem that make its evidence


@functools.lru_cache(maxsize=16)
def _channel_columns(channels: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, Any, np.ndarray]:
    """The distinct channels, each column's channel index, the (columns × channels) sum
    matrix and the number of columns per channel."""
    from scipy import sparse

    k = len(channels)
    names, channel_idx = np.unique(np.asarray(channels, dtype=object), return_inverse=True)
    to_channel = sparse.csr_matrix((np.ones(k), (np.arange(k), channel_idx)),
                                   shape=(k, len(names)))
    return names, channel_idx, to_channel, np.bincount(channel_idx, minlength=len(names))


@functools.lru_cache(maxsize=16)
def _subsystem_index(subsystems: tuple[str, ...]) -> np.ndarray:
    """Position in ``SUBSYSTEMS`` of every column's subsystem."""
    position = {s: i for i, s in enumerate(SUBSYSTEMS)}
    return np.array([position[s] for s in subsystems], dtype=np.int64)


def subsystem_evidence(shares: np.ndarray, channels: Sequence[str],
                       subsystem_of: np.ndarray) -> np.ndarray:
    """(n, S) normalised evidence per subsystem from per-column shares (n, K)."""
    n = shares.shape[0]
    names, channel_idx, to_channel, per_name = _channel_columns(tuple(channels))
    per_channel = np.asarray(to_channel.T.dot(shares.T).T)  # (n, C)
    per_channel /= per_name[None, :]  # mean per column
    channel_subsystem = np.zeros(len(names), dtype=np.int64)
    channel_subsystem[channel_idx] = subsystem_of
    evidence = np.zeros((n, len(SUBSYSTEMS)))
    for s in np.unique(channel_subsystem):
        cols = per_channel[:, channel_subsystem == s]
        m = min(EVIDENCE_CHANNELS, cols.shape[1])
        evidence[:, s] = np.sort(cols, axis=1)[:, -m:].sum(axis=1)
    total = evidence.sum(axis=1, keepdims=True)
    return evidence / np.where(total > 0, total, 1.0)


def attribute(
    contributions: np.ndarray,
    values: np.ndarray,
    channels: list[str],
    features: list[str],
    baseline_median: np.ndarray,
    baseline_mad: np.ndarray,
    catalog: Catalog | None = None,
    top: int = 5,
    subsystems: Sequence[str] | None = None,
    scale_floor: np.ndarray | None = None,
) -> list[Attribution]:
    """Attributions for ``n`` flagged windows.

    Parameters
    ----------
    contributions : (n, K) non-negative per-column contributions of the flagged windows.
    values : (n, K) feature values of those windows.
    channels, features : length-K column descriptions.
    baseline_median, baseline_mad : (K,) baseline statistics of each feature column.
    subsystems : length-K subsystem of each column's channel (default: the catalog's; see
        :func:`reveal.analysis.subsystems.channel_subsystems` for the label-refined one).
    scale_floor : (K,) least scale of each column (the detectors' floors), so that the
        robust z quoted in reasons and claims is the one the detectors saw.

    A subsystem's evidence is the summed evidence of its ``EVIDENCE_CHANNELS`` strongest
    channels, a channel's evidence being the mean share of its feature columns. Neither
    breadth counts: not many channels that each moved a little (a job slowed by packet
    loss shifts dozens of memory and CPU levels slightly; the retransmission counters
    carry the cause), nor many columns per channel (a gauge is summarised by eleven
    features, an event counter by one). ``shares`` are these evidences normalised.
    """
    catalog = catalog or default_catalog()
    n, k = contributions.shape
    if n == 0:
        return []
    contrib = np.nan_to_num(np.clip(contributions, 0.0, None))
    totals = contrib.sum(axis=1, keepdims=True)
    shares = contrib / np.where(totals > 0, totals, 1.0)
    if subsystems is None:
        subsystems = [catalog.lookup(channel_metric(c)).subsystem for c in channels]
    subsystem_of = _subsystem_index(tuple(subsystems))
    subsystem_shares = subsystem_evidence(shares, channels, subsystem_of)  # (n, S)
    top = min(top, k)
    top_idx = np.argpartition(-shares, top - 1, axis=1)[:, :top]
    order = np.take_along_axis(shares, top_idx, axis=1).argsort(axis=1)[:, ::-1]
    top_idx = np.take_along_axis(top_idx, order, axis=1)
    z = robust_z(values, baseline_median[None, :], baseline_mad[None, :],
                 None if scale_floor is None else np.asarray(scale_floor)[None, :])
    out: list[Attribution] = []
    for w in range(n):
        reasons = [
            Reason(channels[j], channel_metric(channels[j]), features[j],
                   SUBSYSTEMS[subsystem_of[j]], float(shares[w, j]), float(values[w, j]),
                   float(baseline_median[j]), float(z[w, j]))
            for j in top_idx[w] if shares[w, j] > 0
        ]
        ranked = np.argsort(-subsystem_shares[w])
        subs = [SUBSYSTEMS[s] for s in ranked if subsystem_shares[w, s] > 0.05]
        share_map = {SUBSYSTEMS[s]: round(float(subsystem_shares[w, s]), 4)
                     for s in ranked if subsystem_shares[w, s] > 0}
        out.append(Attribution(reasons, subs, share_map))
    return out
