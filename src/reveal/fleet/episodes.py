"""From per-window scores to verdicts and episodes: the cut, persistence, the evidence.

The cut holds without hindsight: in every window it is the larger of ``min_score`` and the
hosts' median score plus ``cut_mads`` robust sigmas of the scores at that moment, so it
uses nothing but the fleet at that time. A host is flagged once it has stayed above the
cut for ``persistence_s`` (causal); an episode is dated from the window it first rose above.
"""

from __future__ import annotations

import warnings as pywarnings
from collections import defaultdict

import numpy as np

from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.ensemble import persistent
from reveal.analysis.grouping import runs
from reveal.fleet.records import HostEpisode, PeerReason


def window_cut(scores: np.ndarray, min_score: float, cut_mads: float) -> np.ndarray:
    """Per window, the score above which a host stands apart, (G,), from ``scores`` (H, G)."""
    with pywarnings.catch_warnings():
        pywarnings.simplefilter("ignore", RuntimeWarning)
        med = np.nanmedian(scores, axis=0)
        mad = np.nanmedian(np.abs(scores - med), axis=0)
    return np.fmax(np.nan_to_num(med + cut_mads * MAD_TO_SIGMA * mad, nan=min_score), min_score)


def flag(scores: np.ndarray, cut: np.ndarray, windows: int) -> tuple[np.ndarray, np.ndarray]:
    """Windows above the cut (H, G) and those flagged after ``windows`` in a row (H, G)."""
    above = np.nan_to_num(scores, nan=-np.inf) > cut[None, :]
    return above, persistent(above, windows)


def episodes(hosts: list[str], scores: np.ndarray, sub_scores: np.ndarray,
             subsystems: list[str], above: np.ndarray, flagged: np.ndarray,
             evidence: tuple[np.ndarray, np.ndarray, np.ndarray], median: np.ndarray,
             columns: list[tuple[str, str]], column_subsystem: list[str],
             host_names: list[dict[str, str]], grid_start_ns: np.ndarray, size_ns: int,
             gap: int, top_reasons: int) -> list[HostEpisode]:
    """Every host's episodes with the columns that set it apart (strongest first).

    ``evidence``: the kept columns, their signed z and the host's values, each (H, G, M).
    """
    top_column, top_z, top_value = evidence
    out: list[HostEpisode] = []
    for h in range(len(hosts)):
        for first, last in runs(flagged[h], gap):
            while first > 0 and above[h, first - 1]:  # dated from when it rose above the cut
                first -= 1
            span = slice(first, last + 1)
            sub = np.nan_to_num(sub_scores[h, span]).sum(axis=0)
            subsystem = subsystems[int(np.argmax(sub))]
            weight: dict[int, list[float]] = defaultdict(list)
            values: dict[int, list[float]] = defaultdict(list)
            peers: dict[int, list[float]] = defaultdict(list)
            for w in range(first, last + 1):
                for col, z, v in zip(top_column[h, w], top_z[h, w], top_value[h, w],
                                     strict=True):
                    if np.isfinite(z) and abs(z) > 0:
                        weight[int(col)].append(float(z))
                        values[int(col)].append(float(v))
                        peers[int(col)].append(float(median[w, col]))
            n = last - first + 1
            ranked = sorted(weight, key=lambda c: -np.sum(np.abs(weight[c])) / n)
            reasons = []
            for c in ranked[:top_reasons]:
                channel, feature = columns[c]
                reasons.append(PeerReason(channel, feature, float(np.median(weight[c])),
                                          float(np.median(values[c])),
                                          float(np.median(peers[c])),
                                          host_names[h].get(channel, channel),
                                          column_subsystem[c]))
            if reasons and reasons[0].subsystem != subsystem:
                # name the subsystem of the strongest evidence first
                same = [r for r in reasons if r.subsystem == subsystem]
                reasons = same + [r for r in reasons if r.subsystem != subsystem]
            out.append(HostEpisode(hosts[h], int(grid_start_ns[first]),
                                   int(grid_start_ns[last]) + size_ns, first, last,
                                   float(np.nanmax(scores[h, span])), subsystem, reasons))
    out.sort(key=lambda e: (-e.peak_score, e.host))
    return out
