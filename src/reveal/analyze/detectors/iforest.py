"""``IF``: scikit-learn's Isolation Forest, explained by a simplified DIFFI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import numpy as np
from scipy import sparse

from reveal.analyze.detectors.base import Detector, robust_center_scale
from reveal.analyze.detectors.registry import register
from reveal.errors import InputError

if TYPE_CHECKING:
    from reveal.analyze.ensemble import EnsembleOptions
    from reveal.config import DetectConfig


@register
class IsolationForest(Detector):
    """scikit-learn's Isolation Forest; score = ``-score_samples`` (in (0, 1], 1 = isolated).

    Explanation (a simplified DIFFI): every split on a window's path through a tree credits
    its column with ``1 / path length`` of that window in that tree, so columns that
    isolate the window early get most. A forest splits on random columns, so in many
    dimensions these credits are spread thinly; each column's credit is therefore
    multiplied by the window's |z| in that column (how far it sits from the baseline centre
    there), and the products are scaled to sum to the score.

    Parameters
    ----------
    n_estimators : int
        Trees.
    max_samples : int or "auto"
        Baseline windows per tree (256 for "auto", as in the original method).
    n_jobs : int or None
        Threads for scikit-learn.
    grid : bool array (K,) or None
        Columns in units of their scale floor (the ensemble marks the columns with a floor,
        whose unit is the least change that counts), rounded to whole units before the
        forest sees them. A forest is blind to each column's scale: it splits anywhere
        between a node's smallest and largest value, so a window 0.02 floors beyond the
        baseline's range in one column is isolated at once, and floors would change
        nothing. On the grid such a column moves only when it moves by about a floor. A
        column within half a floor of its median on the whole baseline becomes constant,
        and a forest never splits on a constant column (as it never did on a column
        constant on the baseline): the other detectors watch those.
    """

    name = "iforest"
    tag = "IF"
    # on the floor grid a rarely seen whole-floor value is isolated at once: its credits
    # then go to one-floor steps (see Ensemble._explainers)
    explains_floored = False

    def __init__(self, n_estimators: int = 200, max_samples: int | str = "auto",
                 n_jobs: int | None = None, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 grid: np.ndarray | None = None) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.n_jobs = n_jobs
        self.grid = grid

    @classmethod
    def from_settings(cls, config: DetectConfig, options: EnsembleOptions,
                      grid: np.ndarray | None = None, min_variance: float = 0.0) -> Self:
        return cls(n_estimators=config.iforest_trees, grid=grid,
                   **cls.shared_settings(config, options))

    def _on_grid(self, X: np.ndarray) -> np.ndarray:
        """``X`` (float32) with the ``grid`` columns rounded to whole units."""
        Xf = X.astype(np.float32, copy=True)
        if self.grid is not None and np.any(self.grid):
            cols = np.flatnonzero(self.grid)
            Xf[:, cols] = np.round(Xf[:, cols])
        return Xf

    def _fit(self, X: np.ndarray) -> None:
        from sklearn.ensemble import IsolationForest as SkIsolationForest

        if self.grid is not None and len(self.grid) != X.shape[1]:
            raise InputError(f"grid marks {len(self.grid)} columns, data has {X.shape[1]}")
        self.center_, self.scale_ = robust_center_scale(X)
        self.forest_ = SkIsolationForest(
            n_estimators=self.n_estimators, max_samples=self.max_samples,
            random_state=self.random_state, n_jobs=self.n_jobs,
        ).fit(self._on_grid(X))

    def _score(self, X: np.ndarray) -> np.ndarray:
        return -self.forest_.score_samples(self._on_grid(X))

    def _explain(self, X: np.ndarray) -> np.ndarray:
        Xf = self._on_grid(X)
        n, k = Xf.shape
        credit = sparse.csr_matrix((n, k), dtype=np.float64)
        for tree, feats in zip(self.forest_.estimators_, self.forest_.estimators_features_,
                               strict=True):
            path = tree.decision_path(Xf[:, feats]).tocsr()  # (n, nodes) 0/1
            depth = np.asarray(path.sum(axis=1)).ravel() - 1.0  # splits on the path
            weight = 1.0 / np.maximum(depth, 1.0)
            node_feat = tree.tree_.feature
            split = node_feat >= 0
            nodes = np.flatnonzero(split)
            onehot = sparse.csr_matrix(
                (np.ones(nodes.size), (nodes, feats[node_feat[nodes]])),
                shape=(node_feat.size, k))
            credit = credit + sparse.diags(weight) @ path @ onehot
        credit = credit.toarray() * np.abs(X - self.center_.astype(X.dtype)) / self.scale_
        total = credit.sum(axis=1, keepdims=True)
        score = self._score(X)[:, None]
        return credit * (score / np.where(total > 0, total, 1.0))
