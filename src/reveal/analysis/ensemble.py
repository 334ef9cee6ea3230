"""The detector ensemble: preprocessing, several detectors, one combined verdict.

``Ensemble.fit`` scales the baseline features (:class:`RobustScaler`), fits every detector
on them and keeps each detector's baseline score distribution. ``Ensemble.score`` gives,
per window, every detector's score, threshold and flag, how many detectors agree, and a
combined score. Detector scores live on unrelated scales, so each is first turned into its
*surprise* against the baseline: ``−log`` of the share of baseline windows scoring at least
as high (``(count + 1) / (n + 1)``), extended past the baseline's largest score by an
exponential tail fitted to the baseline's top 1 %. The combined score is the mean surprise
over detectors (Fisher's way of combining p-values, scaled): it rises with every detector
that finds the window unusual, hence with agreement. The ensemble flags a window when the
combined score exceeds a threshold set from the baseline's combined scores (its
``threshold_quantile``, or peaks-over-threshold; see :class:`EnsembleOptions`).

Without a baseline (``robust_self_fit=True``) the run itself is the baseline: detectors are
fitted once, the windows whose combined score is an outlier (above median + 3 MAD) are set
aside, and the detectors are refitted on the rest; ``Verdicts.self_fitted`` says so.

Detectors come from :mod:`reveal.analysis.detectors` by name (its registry): each is built
by its class's ``from_settings`` and scores windows with ``decision_function``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Self

import numpy as np

from reveal.analysis import detectors
from reveal.analysis.constants import MAD_TO_SIGMA
from reveal.analysis.detectors import Detector
from reveal.analysis.preprocess import RobustScaler, check_matrix
from reveal.analysis.threshold import pot_threshold, quantile_threshold
from reveal.config import DetectConfig
from reveal.errors import InputError

MIN_BASELINE_WINDOWS = 10


@dataclass(frozen=True)
class EnsembleOptions:
    """Settings of the ensemble beyond :class:`DetectConfig`.

    clip : largest |robust z| a feature may take (baseline sigmas).
    drift_window : windows of past data the feature centre follows (None: the baseline
        median is the centre); see :class:`RobustScaler`.
    drift_block : windows per update of the drift-following centre.
    combine : "surprise" (mean baseline tail surprise, default) or "ratio" (mean of
        ``(s − median) / (threshold − median)``).
    max_fit_rows : baseline windows each model is fitted on at most (seeded subsample).
    dtype : "float32" or "float64" for the scaled matrix.
    combined_threshold : "quantile" (the baseline's ``threshold_quantile``) or "pot"
        (peaks-over-threshold extrapolation at ``pot_risk``).
    pot_risk, pot_init_quantile : POT settings.
    cross_fit_folds, cross_fit_max_windows : with at most ``cross_fit_max_windows``
        baseline windows, every threshold comes from *held-out* baseline scores: the
        baseline is cut into this many contiguous folds, each scored by detectors fitted on
        the others. Scores of windows a detector was fitted on are optimistic, badly so when
        windows are few and columns many (90 windows × 6,000 columns: a held-out clean
        window lies far outside the in-sample range); 0 or 1 turns this off.
    self_fit_trim_mads : in self-fit mode, windows above median + this many MADs of the
        combined score are left out of the refit.
    self_fit_threshold_mads : in self-fit mode (``fit(..., robust_self_fit=True)``), the
        combined threshold is at least ``median + k · 1.4826 · MAD`` (k this value) of the
        baseline combined scores of the windows the detectors were refitted on (the
        inliers; all windows when none was set aside): the usual threshold, a quantile of
        the run's own inliers, flags about that share of any run, even one without an
        anomaly. None (default): the usual threshold only. No effect with a baseline.
    baseline_trim_mads : with a baseline (not self-fit), windows whose score lies more than
        this many robust sigmas (``1.4826 · MAD``) above the median of the baseline's scores
        for most detectors (the median over detectors; held-out scores where the baseline
        is cross-fitted) are left out and the detectors refitted on the rest (when at least
        ``MIN_BASELINE_WINDOWS`` remain): a burst inside the baseline no longer sets the
        threshold. None (default): no trim.
    """

    clip: float = 100.0
    drift_window: int | None = None
    drift_block: int = 60
    combine: str = "surprise"
    max_fit_rows: int | None = 50_000
    dtype: str = "float64"
    combined_threshold: str = "quantile"
    pot_risk: float = 1e-3
    pot_init_quantile: float = 0.98
    self_fit_trim_mads: float = 3.0
    self_fit_threshold_mads: float | None = None
    baseline_trim_mads: float | None = None
    cross_fit_folds: int = 5
    cross_fit_max_windows: int = 5_000


@dataclass
class Verdicts:
    """Per-window verdicts of the ensemble (``W`` windows, in time order)."""

    scores: dict[str, np.ndarray]  # detector name -> (W,) raw score
    thresholds: dict[str, float]  # detector name -> threshold (baseline quantile)
    flags: dict[str, np.ndarray]  # detector name -> bool (W,)
    agreement: np.ndarray  # int (W,): how many detectors flag the window
    combined: np.ndarray  # (W,) mean surprise over detectors (−log baseline tail share)
    flagged: np.ndarray  # bool (W,): the ensemble's verdict
    self_fitted: bool  # True when fitted on the scored run itself
    combined_threshold: float = 0.0  # threshold on ``combined`` (from the baseline)
    warnings: list[str] = field(default_factory=list)
    # (n_blocks, columns used) drift-following centres the windows were scaled with (None:
    # the baseline median); pass them to ``Ensemble.explain(..., centres=)``
    centres: np.ndarray | None = None


def persistent(above: np.ndarray, windows: int) -> np.ndarray:
    """Windows that are above the threshold and so were the ``windows − 1`` before them.

    An alerting rule's "for:" clause over window verdicts in time order (the last axis; a
    fleet's hosts × windows at once): one noisy window does not raise an alarm, a lasting
    change does, ``windows − 1`` strides later.
    """
    above = np.asarray(above, dtype=bool)
    out = above.copy()
    for lag in range(1, max(int(windows), 1)):
        out[..., lag:] &= above[..., :-lag]
        out[..., :lag] = False
    return out


def persistence_windows(persistence_s: float, stride_s: float) -> int:
    """Consecutive windows whose scores must exceed the threshold: ``1 + floor(persistence_s
    / stride_s)`` (1 with no persistence or an unknown stride). Seconds in, windows out."""
    if not (persistence_s > 0 and np.isfinite(stride_s) and stride_s > 0):
        return 1
    return 1 + int(np.floor(persistence_s / stride_s + 1e-9))


def _make_detectors(config: DetectConfig, options: EnsembleOptions,
                    grid: np.ndarray | None = None,
                    min_variance: float = 0.0) -> list[Detector]:
    """The detectors ``config.detectors`` names, unfitted, each built by its class from the
    settings (see :meth:`Detector.from_settings`)."""
    out = [detectors.get(name).from_settings(config, options, grid, min_variance)
           for name in config.detectors]
    if not out:
        raise InputError("no detector selected")
    return out


TAIL_SHARE = 0.01  # top share of baseline scores the exponential tail is fitted to


class _Surprise:
    """−log baseline tail share of a score, with an exponential tail past the baseline max."""

    def __init__(self, baseline_scores: np.ndarray) -> None:
        b = np.sort(np.asarray(baseline_scores, dtype=np.float64))
        self.sorted_ = b
        top = b[int((1.0 - TAIL_SHARE) * (b.size - 1)):]
        excess = top - top[0]
        self.tail_scale_ = float(excess.mean()) if excess.size and excess.mean() > 0 else \
            max(float(b[-1] - b[0]), 1e-12) * TAIL_SHARE
        self.median_ = float(np.median(b))

    def __call__(self, s: np.ndarray) -> np.ndarray:
        b = self.sorted_
        n = b.size
        at_least = n - np.searchsorted(b, s, side="left")
        out = -np.log((at_least + 1.0) / (n + 1.0))
        return out + np.clip(s - b[-1], 0.0, None) / self.tail_scale_


class Ensemble:
    """Robust scaling + detectors + combined verdict.

    Parameters
    ----------
    config : DetectConfig
        Which detectors, the baseline quantile, PCA variance share, forest size, ...
    options : EnsembleOptions
        Clipping, drift-following centre, combination, subsampling, dtype, threshold method.

    Attributes
    ----------
    scaler_ : RobustScaler
    detectors_ : list of Detector (fitted)
    columns_used_ : ndarray of int
        Feature columns that survive preprocessing (others get zero contributions).
    baseline_threshold_ : dict name -> float
        Each detector's threshold (its baseline scores' ``threshold_quantile``).
    combined_threshold_ : float
        Threshold on the combined score.
    self_fitted_ : bool
    fit_seconds_, score_seconds_ : dict name -> float
        Wall time of each detector's fit (baseline scoring included) and last scoring.
    """

    def __init__(self, config: DetectConfig | None = None,
                 options: EnsembleOptions | None = None) -> None:
        self.config = config
        self.options = options

    # -- fitting -----------------------------------------------------------------------
    def fit(self, baseline_features: np.ndarray, robust_self_fit: bool = False,
            scale_floor: np.ndarray | None = None) -> Self:
        """Fit on baseline windows (n, K); with ``robust_self_fit`` the run is its own baseline.

        ``scale_floor`` (K,): the least scale of each column, in its units (see
        :class:`RobustScaler`).
        """
        config = self.config or DetectConfig()
        options = self.options or EnsembleOptions()
        if options.combine not in ("surprise", "ratio"):
            raise InputError(f"unknown combination {options.combine!r} (surprise, ratio)")
        spread = options.self_fit_threshold_mads
        if spread is not None and not (np.isfinite(spread) and spread >= 0):
            raise InputError(f"self_fit_threshold_mads must be a finite number >= 0, "
                             f"got {spread}")
        X = check_matrix(baseline_features, "baseline features")
        if X.shape[0] < MIN_BASELINE_WINDOWS:
            raise InputError(f"{X.shape[0]} baseline windows; need at least "
                             f"{MIN_BASELINE_WINDOWS} to fit the detectors")
        self.scaler_ = RobustScaler(clip=options.clip, dtype=np.dtype(options.dtype),
                                    drift_window=options.drift_window,
                                    drift_block=options.drift_block,
                                    max_fit_rows=options.max_fit_rows,
                                    random_state=config.random_state).fit(X, scale_floor)
        self.columns_used_ = self.scaler_.columns_used_
        self.n_features_in_ = X.shape[1]
        # floored columns: in z units, 1 is at least the least change that counts
        floored = (np.asarray(scale_floor, dtype=np.float64)[self.columns_used_] > 0
                   if scale_floor is not None else None)
        self._grid = floored if floored is not None and config.iforest_floor_grid else None
        # in scaled units one floor is 1: no direction narrower than that
        self._min_variance = (1.0 if floored is not None and floored.any()
                              and config.floor_directions else 0.0)
        nothing = InputError(f"none of the {X.shape[1]} feature columns varies on the baseline "
                             f"(all constant or undefined); nothing to detect on")
        if self.columns_used_.size == 0:
            raise nothing
        Z = self.scaler_.transform(X, self.scaler_.centres(X, own_history=True))
        if not np.any(np.ptp(Z, axis=0) > 0):  # columns kept by a scale floor, all flat
            raise nothing
        self.warnings_: list[str] = []
        dropped = X.shape[1] - self.columns_used_.size
        if dropped:
            self.warnings_.append(f"{dropped} of {X.shape[1]} feature columns are constant or "
                                  f"undefined on the baseline and were not scored")
        self._fit_detectors(Z, config, options)
        self.self_fitted_ = bool(robust_self_fit)
        self.baseline_left_out_ = np.zeros(0, dtype=np.int64)  # rows of the baseline
        trim = options.baseline_trim_mads
        if trim is not None and not robust_self_fit:
            self._trim_baseline(Z, config, options, float(trim))
        if robust_self_fit:
            combined = self._combine(self._raw_scores(Z))
            med = float(np.median(combined))
            mad = float(np.median(np.abs(combined - med))) * MAD_TO_SIGMA
            inliers = combined <= med + options.self_fit_trim_mads * max(mad, 1e-12)
            if MIN_BASELINE_WINDOWS <= inliers.sum() < len(inliers):
                self._fit_detectors(Z[inliers], config, options)
                self.warnings_.append(f"self-fit: {int((~inliers).sum())} outlying windows left "
                                      f"out of the refit")
            if spread is not None:
                base = self.baseline_combined_
                med = float(np.median(base))
                mad = float(np.median(np.abs(base - med))) * MAD_TO_SIGMA
                self.combined_threshold_ = max(float(self.combined_threshold_),
                                               med + spread * mad)
        return self

    @property
    def baseline_trimmed_(self) -> int:
        """How many baseline windows the fit left out (``baseline_trim_mads``)."""
        return len(getattr(self, "baseline_left_out_", ()))

    def _trim_baseline(self, Z: np.ndarray, config: DetectConfig, options: EnsembleOptions,
                       k: float) -> None:
        """Refit on the baseline windows that most detectors do not score beyond ``k``
        robust sigmas of their own held-out baseline scores (see ``baseline_trim_mads``)."""
        if not (np.isfinite(k) and k >= 0):
            raise InputError(f"baseline_trim_mads must be a finite number >= 0, got {k}")
        z = []
        for det in self.detectors_:
            s = np.asarray(det.decision_scores_, dtype=np.float64)
            med = float(np.median(s))
            mad = float(np.median(np.abs(s - med))) * MAD_TO_SIGMA
            z.append((s - med) / max(mad, 1e-12))
        inliers = np.median(np.vstack(z), axis=0) <= k
        if MIN_BASELINE_WINDOWS <= inliers.sum() < len(inliers):
            self._fit_detectors(Z[inliers], config, options)
            self.baseline_left_out_ = np.flatnonzero(~inliers)
            self.warnings_.append(f"{self.baseline_trimmed_} outlying baseline windows left "
                                  f"out of the fit")

    def _fit_detectors(self, Z: np.ndarray, config: DetectConfig,
                       options: EnsembleOptions) -> None:
        self._combine_how = options.combine
        self.detectors_ = []
        self.fit_seconds_: dict[str, float] = {}
        for det in _make_detectors(config, options, self._grid, self._min_variance):
            t0 = time.perf_counter()
            self.detectors_.append(det.fit(Z))
            self.fit_seconds_[det.tag] = time.perf_counter() - t0
        held_out = self._held_out_scores(Z, config, options, self._grid, self._min_variance)
        if held_out is not None:
            for det in self.detectors_:
                det.decision_scores_ = held_out[det.tag]
                det.threshold_ = float(quantile_threshold(held_out[det.tag],
                                                          config.threshold_quantile))
        self.baseline_threshold_ = {d.tag: float(d.threshold_) for d in self.detectors_}
        self.baseline_median_ = {d.tag: float(np.median(d.decision_scores_))
                                 for d in self.detectors_}
        self._surprise = {d.tag: _Surprise(d.decision_scores_) for d in self.detectors_}
        base_combined = self._combine({d.tag: d.decision_scores_ for d in self.detectors_})
        self.baseline_combined_ = base_combined
        if options.combined_threshold == "pot":
            self.combined_threshold_ = pot_threshold(base_combined, options.pot_risk,
                                                     options.pot_init_quantile)
        elif options.combined_threshold == "quantile":
            self.combined_threshold_ = quantile_threshold(base_combined,
                                                          config.threshold_quantile)
        else:
            raise InputError(f"unknown combined threshold method "
                             f"{options.combined_threshold!r} (quantile, pot)")

    @staticmethod
    def _held_out_scores(Z: np.ndarray, config: DetectConfig, options: EnsembleOptions,
                         grid: np.ndarray | None = None,
                         min_variance: float = 0.0) -> dict[str, np.ndarray] | None:
        """Each baseline window scored by detectors fitted on the other folds (or None)."""
        folds, n = options.cross_fit_folds, Z.shape[0]
        if folds < 2 or n > options.cross_fit_max_windows or n < folds * MIN_BASELINE_WINDOWS:
            return None
        edges = np.linspace(0, n, folds + 1).astype(np.int64)
        out: dict[str, np.ndarray] = {}
        for start, stop in pairwise(edges):
            rest = np.r_[0:start, stop:n]
            for det in _make_detectors(config, options, grid, min_variance):
                det.fit(Z[rest])
                out.setdefault(det.tag, np.empty(n))[start:stop] = det.decision_function(
                    Z[start:stop])
        return out

    # -- scoring -----------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "detectors_"):
            raise InputError("the ensemble is not fitted")

    def _raw_scores(self, Z: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        self.score_seconds_: dict[str, float] = {}
        for det in self.detectors_:
            t0 = time.perf_counter()
            out[det.tag] = det.decision_function(Z)
            self.score_seconds_[det.tag] = time.perf_counter() - t0
        return out

    def _normalised(self, name: str, s: np.ndarray) -> np.ndarray:
        """A detector's score on the common scale (≥ 0 surprise, or the threshold ratio)."""
        if self._combine_how == "surprise":
            return self._surprise[name](s)
        med, thr = self.baseline_median_[name], self.baseline_threshold_[name]
        span = thr - med
        if not span > 0:
            span = max(abs(thr), 1e-12)
        return (s - med) / span

    def _combine(self, scores: dict[str, np.ndarray]) -> np.ndarray:
        return np.mean([self._normalised(n, s) for n, s in scores.items()], axis=0)

    def _centres(self, X: np.ndarray, given: np.ndarray | None = None) -> np.ndarray | None:
        """Drift centres for the windows ``X`` (None without a drift-following centre):
        ``given`` (from ``Verdicts.centres`` of the same ``X``) after a shape check, else
        computed."""
        if self.scaler_.drift_window is None:
            if given is not None:
                raise InputError("centres given, but the ensemble has no drift-following "
                                 "centre")
            return None
        if given is None:
            return self.scaler_.centres(X, own_history=self.self_fitted_)
        given = np.asarray(given)
        blocks = -(-X.shape[0] // self.scaler_.drift_block)
        if given.shape != (blocks, self.columns_used_.size):
            raise InputError(f"centres of shape {given.shape} do not fit {X.shape[0]} windows "
                             f"(expected {(blocks, self.columns_used_.size)})")
        return given

    def score(self, features: np.ndarray, persistence: int = 1) -> Verdicts:
        """Verdicts for every window of ``features`` (W, K), same columns as the baseline.

        Windows must be in time order when the drift-following centre is on, and when
        ``persistence`` > 1: a window is then flagged only when it and the ``persistence − 1``
        windows before it score above the threshold (see :func:`persistence_windows`).
        """
        self._check_fitted()
        X = check_matrix(features, "features")
        centres = self._centres(X)
        Z = self.scaler_.transform(X, centres)
        scores = self._raw_scores(Z)
        flags = {n: s > self.baseline_threshold_[n] for n, s in scores.items()}
        agreement = np.sum(list(flags.values()), axis=0).astype(np.int64)
        combined = self._combine(scores)
        warnings = list(self.warnings_)
        if self.scaler_.n_nonfinite_:
            warnings.append(f"{self.scaler_.n_nonfinite_} infinite feature values were "
                            f"treated as extreme (|z| = {self.scaler_.clip:g})")
        return Verdicts(
            scores=scores,
            thresholds=dict(self.baseline_threshold_),
            flags=flags,
            agreement=agreement,
            combined=combined,
            flagged=persistent(combined > self.combined_threshold_, persistence),
            self_fitted=self.self_fitted_,
            combined_threshold=float(self.combined_threshold_),
            warnings=warnings,
            centres=centres,
        )

    def _explainers(self) -> list[Detector]:
        """The detectors whose explanations make attributions: all, but on floored columns
        those with ``explains_floored = False`` (the forest: on the floor grid it isolates a
        rarely seen whole-floor value at once, so its credits go to one-floor steps) unless
        ``explain_forest``."""
        config = self.config or DetectConfig()
        if config.explain_forest or self._grid is None:
            return list(self.detectors_)
        chosen = [d for d in self.detectors_ if d.explains_floored]
        return chosen or list(self.detectors_)

    def explain(self, features: np.ndarray, rows: np.ndarray,
                centres: np.ndarray | None = None) -> np.ndarray:
        """Per-column contributions (len(rows), K) for the windows ``rows`` of ``features``.

        Each detector's contributions are turned into shares of its explanation and
        weighted by the window's surprise for that detector (how unusual its score is
        against the baseline); the weighted shares are summed over detectors (on floored
        columns the forest only with ``DetectConfig.explain_forest`` or when it is the only
        detector). Columns not used by the detectors get 0. ``features`` is the whole
        scored matrix (the drift centre of a window depends on the windows before it);
        ``centres`` the drift centres :meth:`score` used for it (``Verdicts.centres``),
        computed again when not given.
        """
        self._check_fitted()
        X = check_matrix(features, "features")
        rows = np.asarray(rows, dtype=np.int64).ravel()
        out = np.zeros((rows.size, self.n_features_in_), dtype=np.float64)
        if rows.size == 0:
            return out
        if rows.min() < 0 or rows.max() >= X.shape[0]:
            raise InputError(f"rows to explain fall outside the {X.shape[0]} windows")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"features have {X.shape[1]} columns, the baseline had "
                             f"{self.n_features_in_}")
        Z = self.scaler_.transform(X, self._centres(X, centres), rows=rows)
        used = np.zeros((rows.size, self.columns_used_.size), dtype=np.float64)
        for det in self._explainers():
            contrib = np.clip(det.explain(Z).astype(np.float64), 0.0, None)
            total = contrib.sum(axis=1, keepdims=True)
            share = contrib / np.where(total > 0, total, 1.0)
            weight = np.clip(self._normalised(det.tag, det.decision_function(Z)), 1e-6, None)
            used += share * weight[:, None]
        out[:, self.columns_used_] = used
        return out
