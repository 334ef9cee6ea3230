"""Published simple baselines (anchors) Reveal is measured against on labelled data.

Quo Vadis (Sarfraz et al., ICML 2024; repository ssarfraz/QuoVadisTAD,
``quovadis_tad/baselines/simple_baselines.py`` ``PCAError`` and
``quovadis_tad/evaluation/evaluation_utils.py``), written from its description: PCA with 10
components fitted on min-max scaled train rows, each sensor's absolute reconstruction error
normalised, a moving average over rows, the maximum over sensors.

- :func:`run_qv_published`: the published protocol, which reads the test part twice (the
  normalisation fitted on test errors, the best of three per trace; a centred average);
- :func:`run_qv_causal`: normalised on train errors (median / IQR), a trailing average,
  an automatic threshold at the train scores' 99th percentile.

``bench/bench_anchors.py`` runs these beside Gauss-D-K scorings and Reveal on every machine;
the tests hold Reveal at or above :func:`run_qv_causal` on a fixed slice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from reveal.evaluate.metrics import best_f1

AUTO_QUANTILE = 0.99  # automatic threshold: this quantile of (held-out) train scores
QV_COMPONENTS = 10
QV_IQR_EPS = 1e-2
QV_HALF_WINDOW = 5  # published centred mean: rows i-5 .. i+3
QV_TRAILING = 10  # causal variant: trailing mean over 10 rows


@dataclass
class Output:
    """One method's test-row scores and, where it has one, its automatic verdict."""

    scores: np.ndarray
    flagged: np.ndarray | None
    extra: dict = field(default_factory=dict)


# ---------------------------------------------------------------- shared pieces

def minmax(fit: np.ndarray, *xs: np.ndarray) -> list[np.ndarray]:
    """Scale each of ``xs`` by ``fit``'s per-column min and range (a zero range counts 1)."""
    lo = fit.min(axis=0)
    span = fit.max(axis=0) - lo
    span[span == 0] = 1.0
    return [(x - lo) / span for x in xs]


def trailing_mean(x: np.ndarray, rows: int) -> np.ndarray:
    """Mean of each row and the ``rows - 1`` before it (fewer at the start)."""
    c = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    t = np.arange(x.shape[0])
    lo = np.maximum(0, t - rows + 1)
    return (c[t + 1] - c[lo]) / (t + 1 - lo)[:, None]


def auto_flags(train_scores: np.ndarray, test_scores: np.ndarray) -> tuple[np.ndarray, float]:
    """Rows above the train scores' :data:`AUTO_QUANTILE` and that threshold."""
    threshold = float(np.quantile(train_scores, AUTO_QUANTILE))
    return test_scores > threshold, threshold


def qv_pca_errors(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Quo Vadis PCAError: |x - reconstruction| per sensor (min-max scaled, 10 components)."""
    from sklearn.decomposition import PCA

    train_s, test_s = minmax(train, train, test)
    dim = QV_COMPONENTS if train.shape[1] >= QV_COMPONENTS else min(max(2, train.shape[1] // 5),
                                                                    train.shape[1])
    pca = PCA(n_components=dim, svd_solver="full").fit(train_s)

    def error(x: np.ndarray) -> np.ndarray:
        return np.abs(x - pca.inverse_transform(pca.transform(x)))

    return error(train_s), error(test_s)


def normalise(err: np.ndarray, ref: np.ndarray, how: str) -> np.ndarray:
    """Per-sensor normalisation of ``err`` with statistics of ``ref``."""
    if how == "median-iqr":
        q25, q50, q75 = np.percentile(ref, [25, 50, 75], axis=0)
        return (err - q50) / (np.abs(q75 - q25) + QV_IQR_EPS)
    if how == "mean-std":
        std = ref.std(axis=0)
        std[std == 0] = 1.0
        return (err - ref.mean(axis=0)) / std
    return err


def published_smooth(x: np.ndarray, half: int = QV_HALF_WINDOW) -> np.ndarray:
    """Quo Vadis' smoothing: row i (≥ ``half``) = mean of rows i-half .. i+half-2; the first
    ``half`` rows are 0 (centred, looks ahead)."""
    n = x.shape[0]
    c = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    out = np.zeros_like(x)
    i = np.arange(half, n)
    end = np.minimum(i + half - 1, n)
    out[half:] = (c[end] - c[i - half]) / (end - (i - half))[:, None]
    return out


# ---------------------------------------------------------------- Quo Vadis anchors

def run_qv_published(train: np.ndarray, test: np.ndarray, labels: np.ndarray) -> Output:
    """Test-normalised, centred-smoothed PCA error; the best of three normalisations."""
    _, err = qv_pca_errors(train, test)
    best: tuple[float, str, np.ndarray] | None = None
    f1s: dict[str, float] = {}
    for how in ("median-iqr", "mean-std", "none"):
        scores = published_smooth(normalise(err, err, how)).max(axis=1)
        f1s[how] = best_f1(labels, scores)[0].f1
        if best is None or f1s[how] > best[0]:
            best = (f1s[how], how, scores)
    assert best is not None
    return Output(best[2], None, {"normalisation": best[1], "best_f1_by_normalisation": f1s})


def run_qv_causal(train: np.ndarray, test: np.ndarray) -> Output:
    """Train-normalised (median/IQR), trailing-smoothed PCA error; train 99th percentile."""
    err_train, err_test = qv_pca_errors(train, test)
    both = normalise(np.vstack([err_train, err_test]), err_train, "median-iqr")
    scores = trailing_mean(both, QV_TRAILING).max(axis=1)
    n = train.shape[0]
    flagged, threshold = auto_flags(scores[:n], scores[n:])
    return Output(scores[n:], flagged, {"threshold": threshold})
