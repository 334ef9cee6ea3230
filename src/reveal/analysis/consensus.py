"""Model generations that must agree: a baseline that keeps itself current without learning
the fault.

A model fitted once on a baseline ages: the host's normal drifts (a busier week, a noisier
disk), and a threshold set on the old normal flags the new one for ever. Refitting on
everything recent would follow the drift, but also learn a lasting fault as normal. Here,
as scored data comes in (:meth:`Consensus.advance`, called by ``Reveal.partial_fit``):

- every ``refit.every_s`` seconds of data, a new **generation** (a whole
  :class:`~reveal.analysis.ensemble.Ensemble`: scaling, detectors, thresholds, each threshold
  from held-out scores of its own fit windows, in :data:`REFIT_FOLDS` folds) is fitted on
  the windows of the last
  ``refit.span_s`` seconds that were **not flagged**, nor within one window length of a
  flagged window (a fault's edges lie in windows the verdict may have missed), and with
  ``refit.learn_quantile`` nor above that quantile of the baseline's combined scores;
- the newest ``refit.generations`` generations are kept (with ``refit.keep_baseline`` the
  one fitted on the baseline always stays among them);
- a window is flagged only when **every** generation finds it above its own threshold. The
  combined score is the baseline generation's threshold plus the smallest margin
  ``combined_g − threshold_g`` over generations (in surprise units, −log tail shares, so
  margins of different generations compare), so with one generation it is exactly that
  generation's combined score;
- each flagged window is explained by the generation least surprised by it (the one whose
  margin decided it).

This is the consensus idea of Netdata's anomaly detection (several models trained on
staggered spans, a point anomalous only if all agree), with two differences: the models are
whole multivariate ensembles rather than one clustering per metric, and a refit learns only
from windows that were not flagged, so a fault that is caught is not learned.

Streaming state. The drift-following centre of the minute preset (see
:class:`~reveal.analysis.preprocess.RobustScaler`) needs the block medians of past windows;
:meth:`advance` keeps every generation's ``history_`` current with the blocks scored so far
(windows of a block not yet complete wait in ``pending`` and are scored again, as a prefix,
with the next windows; without a drift-following centre nothing is scored twice), and the
last windows' above-threshold states carry persistence over from one call to the next. So
scoring a run chunk by chunk, advancing after each chunk, gives exactly the verdicts of
scoring it at once while no refit happens (tested).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from reveal.analysis.ensemble import Ensemble, EnsembleOptions, Verdicts, persistent
from reveal.analysis.preprocess import RobustScaler
from reveal.config import DetectConfig, RefitConfig
from reveal.errors import InputError

#: Windows per buffer block when there is no drift-following centre to follow.
DEFAULT_BLOCK = 60
#: Above-threshold states of the last windows kept for persistence across calls.
KEEP_ABOVE = 64
#: A refit's thresholds come from held-out scores in this many contiguous folds (each
#: scored by detectors fitted on the others), as the baseline's do with few windows; two
#: keep a refit at three fits of each detector.
REFIT_FOLDS = 2


@dataclasses.dataclass
class Generation:
    """One fitted model of the consensus."""

    ensemble: Ensemble
    origin: str  # "baseline" (fitted by ``fit``) or "refit"
    fitted_windows: int  # windows it was fitted on
    end_ns: int  # exclusive end of the newest window it learned from (0: the baseline)


def _block_median(scaler: RobustScaler, block: np.ndarray) -> np.ndarray:
    """Median of one block of windows over the scaler's used columns (NaN → its median):
    the rule :class:`RobustScaler` uses for its drift history."""
    cols = scaler.columns_used_
    values = block[:, cols].astype(np.float64)
    values = np.where(np.isfinite(values), values, scaler.median_[cols])
    return np.median(values, axis=0)


class Consensus:
    """Generations of ensembles that must agree, and what the stream has shown them.

    Parameters
    ----------
    baseline : Ensemble
        The ensemble fitted on the baseline (the first generation).
    refit : RefitConfig
        Refit period, span, generations kept, whether the baseline's stays, least windows.
    detect : DetectConfig
    options : EnsembleOptions
        The settings refits are fitted with (the baseline's).
    floors : ndarray (K,) or None
        Scale floors of the feature columns (the baseline's).
    stride_s : float
        Seconds between consecutive windows.
    guard : int
        Windows on each side of a flagged window left out of refits (one window length).

    Attributes
    ----------
    generations : list of Generation
        Oldest first.
    reference_threshold : float
        The baseline generation's combined threshold: the scale of the combined score.
    refits, refits_waiting : int
        Generations fitted so far; refits that were due but found too few unflagged windows.
    windows_seen : int
        Windows given to :meth:`advance`.
    """

    def __init__(self, baseline: Ensemble, refit: RefitConfig, detect: DetectConfig,
                 options: EnsembleOptions, floors: np.ndarray | None, stride_s: float,
                 guard: int = 1) -> None:
        if refit.generations < 1:
            raise InputError(f"refit.generations must be at least 1, got {refit.generations}")
        if refit.every_s is not None and not (refit.every_s > 0 and refit.span_s > 0):
            raise InputError(f"refit every {refit.every_s} s over {refit.span_s} s: both "
                             f"must be positive")
        self.refit = refit
        self.detect = detect
        self.options = options
        self.refit_options = dataclasses.replace(options, cross_fit_folds=REFIT_FOLDS)
        self.floors = floors
        self.stride_s = float(stride_s)
        self.guard = max(0, int(guard))
        self.generations = [Generation(baseline, "baseline",
                                       int(baseline.baseline_combined_.size), 0)]
        self.reference_threshold = float(baseline.combined_threshold_)
        q = refit.learn_quantile
        if q is not None and not 0.0 < q < 1.0:
            raise InputError(f"refit.learn_quantile must be in (0, 1), got {q}")
        # windows scoring above this are not learned (with learn_quantile)
        self.learn_level = (float(np.quantile(baseline.baseline_combined_, q))
                            if q is not None else None)
        k = int(baseline.n_features_in_)
        self.block = (options.drift_block if options.drift_window is not None
                      else DEFAULT_BLOCK)
        self.blocks: list[tuple[np.ndarray, np.ndarray]] = []  # (values, flagged) per block
        self.pending = np.zeros((0, k))
        self.pending_flagged = np.zeros(0, dtype=np.int8)
        self.last_above = np.zeros(0, dtype=bool)
        self.last_signs = np.zeros(0, dtype=bool)
        self.last_end_ns = 0
        self.windows_seen = 0
        self.windows_since_refit = 0
        self.refits = 0
        self.refits_waiting = 0

    def __setstate__(self, state: dict) -> None:
        """Unpickle; a model saved before direct signs were carried starts with none."""
        state.setdefault("last_signs", np.zeros(0, dtype=bool))
        self.__dict__.update(state)

    # -- scoring -----------------------------------------------------------------------
    @property
    def streaming(self) -> bool:
        """Whether scoring differs from the baseline ensemble's alone (data was seen)."""
        return self.windows_seen > 0 or len(self.generations) > 1

    def _with_pending(self, values: np.ndarray) -> tuple[np.ndarray, int]:
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != self.pending.shape[1]:
            raise InputError(f"features of shape {values.shape}; the model has "
                             f"{self.pending.shape[1]} columns")
        if not len(self.pending) or not self._blocks_back():  # no drift centre: no prefix
            return values, 0
        return np.vstack([self.pending, values]), len(self.pending)

    def carried(self, persistence: int) -> tuple[np.ndarray, np.ndarray]:
        """The states of the last ``persistence − 1`` windows seen (oldest first) that
        persistence counts before a call's first window: above the threshold (and, judged
        for significance, mattering), and showing a direct sign."""
        keep = max(int(persistence) - 1, 0)
        above = self.last_above[len(self.last_above) - keep:] if keep else self.last_above[:0]
        signs = self.last_signs  # shorter than above for a model saved before it was kept
        signs = np.r_[np.zeros(max(above.size - signs.size, 0), dtype=bool),
                      signs[max(signs.size - above.size, 0):]]
        return above, signs

    def _margins(self, X: np.ndarray) -> tuple[np.ndarray, list[Verdicts]]:
        verdicts = [g.ensemble.score(X, 1) for g in self.generations]
        margins = np.stack([v.combined - v.combined_threshold for v in verdicts])
        return margins, verdicts

    def score(self, features: np.ndarray, persistence: int = 1) -> Verdicts:
        """Verdicts for windows ``features`` (W, K) that follow what :meth:`advance` saw.

        Per-detector scores, thresholds and flags are the newest generation's; ``combined``
        and ``flagged`` are the consensus (every generation above its threshold, for
        ``persistence`` windows in a row, counting the windows seen before).
        """
        X, prefix = self._with_pending(features)
        margins, verdicts = self._margins(X)
        margin = margins.min(axis=0)[prefix:]
        above = margin > 0
        before, _ = self.carried(persistence)
        flagged = persistent(np.r_[before, above], persistence)[before.size:]
        newest = verdicts[-1]
        scores = {n: s[prefix:] for n, s in newest.scores.items()}
        flags = {n: f[prefix:] for n, f in newest.flags.items()}
        warnings = list(newest.warnings)
        if len(self.generations) > 1:
            warnings.append(f"verdicts by the consensus of {len(self.generations)} model "
                            f"generations ({self.refits} refits on unflagged recent windows)")
        return Verdicts(scores=scores, thresholds=dict(newest.thresholds), flags=flags,
                        agreement=newest.agreement[prefix:],
                        combined=self.reference_threshold + margin, flagged=flagged,
                        self_fitted=newest.self_fitted,
                        combined_threshold=self.reference_threshold, warnings=warnings,
                        centres=None)

    def explain(self, features: np.ndarray, rows: np.ndarray,
                centres: np.ndarray | None = None) -> np.ndarray:
        """Per-column contributions (len(rows), K): each window explained by the generation
        whose margin decided it (the least surprised). ``centres`` is not used (every
        generation computes its own)."""
        del centres
        rows = np.asarray(rows, dtype=np.int64).ravel()
        X, prefix = self._with_pending(features)
        out = np.zeros((rows.size, X.shape[1]))
        if rows.size == 0:
            return out
        if rows.min() < 0 or rows.max() >= X.shape[0] - prefix:
            raise InputError(f"rows to explain fall outside the {X.shape[0] - prefix} windows")
        if len(self.generations) == 1:
            return self.generations[0].ensemble.explain(X, rows + prefix)
        margins, _ = self._margins(X)
        deciding = margins[:, rows + prefix].argmin(axis=0)
        for g in np.unique(deciding):
            pick = np.flatnonzero(deciding == g)
            out[pick] = self.generations[int(g)].ensemble.explain(X, rows[pick] + prefix)
        return out

    # -- following the stream ------------------------------------------------------------
    def _blocks_back(self) -> int:
        window = self.options.drift_window
        return 0 if window is None else max(1, window // self.options.drift_block)

    def _keep_blocks(self) -> int:
        need = self._blocks_back()
        if self.refit.every_s is not None:
            span = int(np.ceil(self.refit.span_s / self.stride_s / self.block))
            need = max(need, span + 1)
        return need

    def advance(self, features: np.ndarray, flagged: np.ndarray, above: np.ndarray,
                end_ns: np.ndarray | None = None,
                combined: np.ndarray | None = None,
                signs: np.ndarray | None = None) -> None:
        """Take in windows just scored (in time order, following those seen before): their
        features (W, K), verdicts, the states persistence counts (W,): above the threshold
        (and mattering, where judged for significance) and ``signs`` (a direct sign shown;
        None: none). Completed blocks move
        every generation's drift history on; refits leave flagged windows (and their
        neighbours) out, and with ``refit.learn_quantile`` also windows whose ``combined``
        score is above that quantile of the baseline's."""
        values = np.asarray(features, dtype=np.float64)
        flagged = np.asarray(flagged, dtype=bool).ravel()
        marks = flagged.astype(np.int8) * 2  # 2: flagged (neighbours too), 1: not learned
        if self.learn_level is not None and combined is not None:
            loud = np.asarray(combined, dtype=np.float64).ravel() > self.learn_level
            marks = np.maximum(marks, loud.astype(np.int8))
        if values.ndim != 2 or values.shape[1] != self.pending.shape[1] \
                or flagged.size != values.shape[0]:
            raise InputError(f"features of shape {values.shape} with {flagged.size} verdicts "
                             f"do not fit the model's {self.pending.shape[1]} columns")
        self.pending = np.vstack([self.pending, values])
        self.pending_flagged = np.r_[self.pending_flagged, marks]
        self.last_above = np.r_[self.last_above, np.asarray(above, dtype=bool).ravel()][
            -KEEP_ABOVE:]
        shown = (np.zeros(values.shape[0], dtype=bool) if signs is None
                 else np.asarray(signs, dtype=bool).ravel())
        self.last_signs = np.r_[self.last_signs, shown][-KEEP_ABOVE:]
        n = values.shape[0]
        self.windows_seen += n
        self.windows_since_refit += n
        if end_ns is not None and len(end_ns):
            self.last_end_ns = int(np.asarray(end_ns)[-1])
        back = self._blocks_back()
        while len(self.pending) >= self.block:
            block, self.pending = self.pending[:self.block], self.pending[self.block:]
            marks, self.pending_flagged = (self.pending_flagged[:self.block],
                                           self.pending_flagged[self.block:])
            self.blocks.append((block, marks))
            if back:
                for g in self.generations:
                    scaler = g.ensemble.scaler_
                    row = _block_median(scaler, block)[None, :]
                    history = row if scaler.history_ is None else np.vstack(
                        [scaler.history_, row])
                    scaler.history_ = history[-back:]
        del self.blocks[:max(0, len(self.blocks) - self._keep_blocks())]

    def refit_due(self) -> bool:
        """Whether ``refit.every_s`` seconds of data have been seen since the last refit."""
        every = self.refit.every_s
        return every is not None and self.windows_since_refit * self.stride_s >= every - 1e-9

    def recent_unflagged(self, values: np.ndarray | None = None,
                         flagged: np.ndarray | None = None) -> np.ndarray:
        """Features (n, K) of the windows of the last ``refit.span_s`` seconds that were
        neither flagged nor next to a flagged window: of the windows seen, or of
        ``values`` with their verdicts ``flagged`` when given."""
        if values is not None:
            marks = 2 * np.asarray(flagged, dtype=np.int8).ravel()
        else:
            values = np.vstack([b for b, _ in self.blocks] + [self.pending])
            marks = np.concatenate([f for _, f in self.blocks] + [self.pending_flagged])
        flagged = marks == 2
        excluded = marks > 0
        for lag in range(1, self.guard + 1):  # neighbours of a flagged window, both sides
            excluded[lag:] |= flagged[:-lag]
            excluded[:-lag] |= flagged[lag:]
        span = max(1, round(self.refit.span_s / self.stride_s))
        return values[-span:][~excluded[-span:]]

    def fit_generation(self, values: np.ndarray | None = None,
                       flagged: np.ndarray | None = None) -> bool:
        """Fit a new generation on :meth:`recent_unflagged` (of ``values`` when given;
        False, and it waits for more data, when there are fewer than
        ``refit.min_windows`` of them)."""
        X = self.recent_unflagged(values, flagged)
        if X.shape[0] < max(self.refit.min_windows, 10):
            self.refits_waiting += 1
            return False
        try:
            ensemble = Ensemble(self.detect, self.refit_options).fit(X,
                                                                     scale_floor=self.floors)
        except InputError:  # nothing varies in the recent windows: keep the models we have
            self.refits_waiting += 1
            return False
        if self._blocks_back():
            ensemble.scaler_.history_ = self._history_for(ensemble.scaler_)
        self.generations.append(Generation(ensemble, "refit", int(X.shape[0]),
                                           self.last_end_ns))
        keep = self.refit.generations
        first = self.generations[0]
        if self.refit.keep_baseline and first.origin == "baseline":
            rest = self.generations[1:][-(keep - 1):] if keep > 1 else []
            self.generations = [first, *rest]
        else:
            self.generations = self.generations[-keep:]
        self.windows_since_refit = 0
        self.refits += 1
        return True

    def _history_for(self, scaler: RobustScaler) -> np.ndarray:
        """The drift history a new generation starts with: the block medians of the blocks
        seen, in its own columns (older ones, from the baseline, mapped from a kept
        generation's history)."""
        back = self._blocks_back()
        source = self.generations[-1].ensemble.scaler_
        rows = source.history_.shape[0] if source.history_ is not None else 0
        own = [_block_median(scaler, b) for b, _ in self.blocks[-min(rows, back):]] \
            if rows else []
        older = rows - len(own)
        mapped = np.empty((max(older, 0), scaler.columns_used_.size))
        if older > 0:
            where = {int(c): j for j, c in enumerate(source.columns_used_)}
            for j, c in enumerate(scaler.columns_used_):
                k = where.get(int(c))
                mapped[:, j] = (source.history_[:older, k] if k is not None
                                else scaler.median_[c])
        stacked = np.vstack([mapped, *[o[None, :] for o in own]]) if own or older > 0 \
            else np.zeros((0, scaler.columns_used_.size))
        return stacked[-back:] if stacked.shape[0] else None

    def describe(self) -> dict:
        """The generations and the stream's progress, as numbers (for reports and logs)."""
        return {"generations": [{"origin": g.origin, "fitted_windows": g.fitted_windows,
                                 "end_ns": g.end_ns,
                                 "combined_threshold": float(g.ensemble.combined_threshold_)}
                                for g in self.generations],
                "refits": self.refits, "refits_waiting": self.refits_waiting,
                "windows_seen": self.windows_seen}
