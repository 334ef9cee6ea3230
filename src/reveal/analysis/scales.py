"""Windows of several sizes scored together (``AnalyzeConfig.extra_window_rows``).

A short window sees a brief excursion that a long one averages away; a long one sees a
slow drift that a short one cannot tell from noise. With windows by rows (the ``minute``
preset: 10 rows, and 5 rows beside it), each size is fitted and scored by an analysis of
its own on the same channels; the windows that end on the same row are then one window:

- its combined score is the mean over the sizes of that size's combined score divided by
  its own threshold (so the combined threshold is 1, and no size's scale dominates);
- it is flagged when the main size flags it, or when another size flags it and that mean
  exceeds 1 too: a short window's excursion counts where the sizes together agree (each
  size flags on its own terms, persistence, practical significance and direct signs
  included, so every flagged window has evidence);
- its evidence is the main size's where that size flagged it, else the first other size's
  that did.

A size whose window does not exist at a row (a longer one, at the start of a run without
lead-in) is left out of that row's mean. The sizes and the flag rule were chosen by 2-fold
cross-fitting between the labelled machines (docs/evaluation.md, "Windows of two sizes");
flagging whenever any size flags scored about as well but doubled the false alarms a day.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING

import numpy as np

from reveal.config import AnalyzeConfig
from reveal.errors import InputError

if TYPE_CHECKING:
    from reveal.analysis.pipeline import Analysis


def scale_configs(config: AnalyzeConfig) -> list[AnalyzeConfig]:
    """One configuration per extra window size: ``config`` with that size and no extras;
    ``InputError`` where the windows are not by rows or a size is not 2 rows or more."""
    window = config.window
    if not config.extra_window_rows:
        return []
    if window.size_rows is None:
        raise InputError("extra_window_rows needs windows by rows (window.size_rows)")
    bad = [r for r in config.extra_window_rows if not (isinstance(r, int) and r >= 2)]
    if bad:
        raise InputError(f"extra_window_rows must be whole numbers of rows ≥ 2, got {bad[0]!r}")
    return [dataclasses.replace(config, extra_window_rows=(),
                                window=dataclasses.replace(window, size_rows=int(rows)))
            for rows in config.extra_window_rows]


def _ratio(combined: np.ndarray, threshold: float) -> np.ndarray:
    """Combined scores over their threshold (0 where the threshold is not positive)."""
    if not threshold > 0:
        return np.zeros_like(np.asarray(combined, dtype=np.float64))
    return np.asarray(combined, dtype=np.float64) / float(threshold)


def combine(main: Analysis, others: list[Analysis]) -> Analysis:
    """``main`` with the verdicts of ``others`` (the same run at other window sizes) joined
    in, window by window on their end times (see the module's description)."""
    end = np.asarray(main.windows.end_ns)
    n = len(end)
    v = main.verdicts
    ratios = [_ratio(v.combined, v.combined_threshold)]
    main_flags = np.asarray(v.flagged, dtype=bool)
    other_flags = np.zeros(n, dtype=bool)
    evidence = {e.window_id: e for e in main.evidence}
    for other in others:
        theirs = np.asarray(other.windows.end_ns)
        at = np.minimum(np.searchsorted(theirs, end), max(len(theirs) - 1, 0))
        same = (at < len(theirs)) & (theirs[at] == end) if len(theirs) else np.zeros(n, bool)
        ratio = np.full(n, np.nan)
        ratio[same] = _ratio(other.verdicts.combined, other.verdicts.combined_threshold)[
            at[same]]
        ratios.append(ratio)
        theirs_flagged = np.zeros(n, dtype=bool)
        theirs_flagged[same] = np.asarray(other.verdicts.flagged, dtype=bool)[at[same]]
        position = {int(at[i]): i for i in np.flatnonzero(same)}
        for e in other.evidence:
            i = position.get(e.window_id)
            if i is not None and theirs_flagged[i] and i not in evidence:
                evidence[i] = dataclasses.replace(
                    e, window_id=i, start_ns=int(main.windows.start_ns[i]),
                    end_ns=int(end[i]))
        other_flags |= theirs_flagged
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # rows no size covers
        combined = np.nan_to_num(np.nanmean(np.vstack(ratios), axis=0), nan=0.0)
    # each size's flags hold its own persistence (carried across the calls of a stream);
    # the mean is asked of the window itself, so joining needs no state between calls
    flagged = main_flags | (other_flags & (combined > 1.0))
    verdicts = dataclasses.replace(v, combined=combined, combined_threshold=1.0,
                                   flagged=flagged)
    kept = [evidence[i] for i in sorted(evidence) if flagged[i]]
    return dataclasses.replace(main, verdicts=verdicts, evidence=kept, sizes=[main, *others])
