"""``Z``: mean |robust z| over columns."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import numpy as np

from reveal.analysis.detectors.base import Detector, blockwise, robust_center_scale
from reveal.analysis.detectors.registry import register

if TYPE_CHECKING:
    from reveal.analysis.ensemble import EnsembleOptions
    from reveal.config import DetectConfig


@register
class ZScore(Detector):
    """Mean |robust z| over columns (against the baseline median / MAD); a column's
    contribution is its |z| / K, so contributions sum to the score.

    Parameters
    ----------
    min_scale : float
        Least per-column scale. The ensemble sets 1.0: its input is already robust z, and
        a scale floor applied upstream is then not undone.
    threshold_quantile, max_fit_rows, random_state
        See :class:`Detector`.

    Attributes
    ----------
    center_, scale_ : ndarray of shape (K,)
        Baseline median and scale of each column.
    """

    name = "zscore"
    tag = "Z"

    def __init__(self, min_scale: float = 0.0, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        self.min_scale = min_scale

    @classmethod
    def from_settings(cls, config: DetectConfig, options: EnsembleOptions,
                      grid: np.ndarray | None = None, min_variance: float = 0.0) -> Self:
        # its input is already in baseline sigmas: keep the floors
        return cls(min_scale=1.0, **cls.shared_settings(config, options))

    def _fit(self, X: np.ndarray) -> None:
        self.center_, self.scale_ = robust_center_scale(X)
        self.scale_ = np.maximum(self.scale_, self.min_scale)

    def _z(self, X: np.ndarray) -> np.ndarray:
        return np.abs((X - self.center_.astype(X.dtype)) / self.scale_.astype(X.dtype))

    def _score(self, X: np.ndarray) -> np.ndarray:
        return blockwise(X, lambda B: self._z(B).mean(axis=1, dtype=np.float64))

    def _explain(self, X: np.ndarray) -> np.ndarray:
        return self._z(X) / X.shape[1]
