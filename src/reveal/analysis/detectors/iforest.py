"""``IF``: scikit-learn's Isolation Forest, explained by a simplified DIFFI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from scipy import sparse

from reveal.analysis.detectors.base import Detector, robust_center_scale
from reveal.analysis.detectors.registry import register
from reveal.analysis.estimator_params import keep_params
from reveal.errors import InputError


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
    settings: ClassVar[Mapping[str, str]] = {"n_estimators": "iforest_trees", "grid": "grid"}

    def __init__(self, n_estimators: int = 200, max_samples: int | str = "auto",
                 n_jobs: int | None = None, threshold_quantile: float = 0.99,
                 max_fit_rows: int | None = None, random_state: int = 0,
                 grid: np.ndarray | None = None) -> None:
        super().__init__(threshold_quantile, max_fit_rows, random_state)
        keep_params(self, n_estimators=n_estimators, max_samples=max_samples, n_jobs=n_jobs,
                    grid=grid)

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
        Xf = self._on_grid(X)
        if Xf.shape[0] <= WALK_MAX_ROWS:  # a few windows (live scoring): walk all trees at once
            return _forest_scores(self._walk_table(), Xf)
        return -self.forest_.score_samples(Xf)  # the same numbers, faster for many windows

    def _walk_table(self) -> _ForestTable:
        """The fitted trees as padded arrays (built once, after fitting or loading)."""
        table = getattr(self, "table_", None)
        if table is None:
            table = self.table_ = _ForestTable.of(self.forest_)
        return table

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


def average_path_length(n: np.ndarray) -> np.ndarray:
    """c(n): the mean path length of an unsuccessful search in a binary search tree of
    ``n`` points (0 for n ≤ 1, 1 for n = 2), as in the Isolation Forest paper."""
    n = np.asarray(n, dtype=np.float64)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


class _ForestTable:
    """Every tree of a fitted forest as (trees, nodes) arrays, padded to the largest tree:
    split column (−1 at leaves), threshold, children, and the path length a window
    reaching each node is given (its splits above it + c(samples in it)). Scoring walks all
    trees for all windows at once, one tree level per step, instead of one tree at a time
    through Python (a fixed ~70 ms per call for 200 trees, whatever the number of windows).
    """

    def __init__(self, feature: np.ndarray, threshold: np.ndarray, left: np.ndarray,
                 right: np.ndarray, path: np.ndarray, depth: int, norm: float) -> None:
        self.feature, self.threshold = feature, threshold
        self.left, self.right, self.path = left, right, path
        self.depth, self.norm = depth, norm

    @classmethod
    def of(cls, forest: Any) -> _ForestTable:
        """The table of a fitted scikit-learn ``IsolationForest``."""
        trees = [t.tree_ for t in forest.estimators_]
        for feats in forest.estimators_features_:
            if not np.array_equal(feats, np.arange(feats.size)):
                raise InputError("the forest was fitted on column subsets; not supported")
        size = max(t.node_count for t in trees)
        shape = (len(trees), size)
        feature = np.full(shape, -1, dtype=np.intp)
        threshold = np.zeros(shape)
        left = np.zeros(shape, dtype=np.intp)
        right = np.zeros(shape, dtype=np.intp)
        path = np.zeros(shape)
        deepest = 0
        for i, t in enumerate(trees):
            m = t.node_count
            feature[i, :m] = t.feature
            threshold[i, :m] = t.threshold
            left[i, :m] = np.where(t.children_left >= 0, t.children_left, np.arange(m))
            right[i, :m] = np.where(t.children_right >= 0, t.children_right, np.arange(m))
            node_depth = np.ones(m)  # the root's depth is 1
            for node in range(m):  # children always follow their parent
                for child in (t.children_left[node], t.children_right[node]):
                    if child >= 0:
                        node_depth[child] = node_depth[node] + 1.0
            deepest = max(deepest, int(node_depth.max()) - 1)
            path[i, :m] = node_depth + average_path_length(t.n_node_samples) - 1.0
        norm = float(average_path_length(np.array([forest.max_samples_]))[0])
        return cls(feature, threshold, left, right, path, deepest, norm)


ROWS_PER_WALK = 2048  # windows walked at a time (bounds the (trees, rows) temporaries)
#: Up to this many windows, walking every tree at once in NumPy is faster than
#: scikit-learn's tree-by-tree scoring (its fixed cost is ~20 ms for 200 trees; the walk's
#: ~0.05 ms per window); the two give bit-identical scores.
WALK_MAX_ROWS = 256


def _forest_scores(table: _ForestTable, X: np.ndarray) -> np.ndarray:
    """Isolation Forest scores in (0, 1] (1 = isolated at once): ``2 ** (−mean path length /
    c(max_samples))``, equal to scikit-learn's ``−score_samples``."""
    n = X.shape[0]
    out = np.empty(n)
    trees = np.arange(table.feature.shape[0])[:, None]
    for lo in range(0, n, ROWS_PER_WALK):
        rows = X[lo:lo + ROWS_PER_WALK]
        cols = np.arange(rows.shape[0])[None, :]
        node = np.zeros((trees.size, rows.shape[0]), dtype=np.intp)
        for _ in range(table.depth):
            feature = table.feature[trees, node]
            leaf = feature < 0
            value = rows[cols, np.where(leaf, 0, feature)]
            go_left = value <= table.threshold[trees, node]
            node = np.where(leaf, node, np.where(go_left, table.left[trees, node],
                                                 table.right[trees, node]))
        lengths = table.path[trees, node]
        depths = np.zeros(rows.shape[0])
        for per_tree in lengths:  # tree by tree, in order: the same sums as scikit-learn
            depths += per_tree
        denominator = trees.size * table.norm
        out[lo:lo + rows.shape[0]] = 2.0 ** (-(depths / denominator) if denominator else -1.0)
    return out
