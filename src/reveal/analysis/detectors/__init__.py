"""Unsupervised window detectors: fit on baseline windows, score windows, explain scores.

One module per detector, each registered by name (:mod:`.registry`); importing this
package registers the built-in ones. Every detector is a scikit-learn estimator derived
from :class:`Detector` (:mod:`.base`): ``fit(X)`` on baseline windows (n, K) sets
``decision_scores_`` and ``threshold_``; ``decision_function(X)`` gives scores (n,),
higher = more anomalous; ``explain(X)`` splits them into non-negative per-column
contributions (n, K); ``from_settings`` builds the detector the ensemble fits.

Input is a (windows, columns) matrix, normally already scaled by
:class:`reveal.analysis.preprocess.RobustScaler` (robust z, no NaN).

===================  ========  ===============================================================
name (module)        tag       score
===================  ========  ===============================================================
``zscore``           ``Z``     mean |z| over columns (robust z against the baseline median / MAD)
``pca_mahalanobis``  ``MAHA``  Mahalanobis distance (Hotelling T²) in the PCA subspace keeping
                               ``variance`` of the baseline variance, plus the residual
``pca_error``        ``PE``    each column's PCA reconstruction error on its own held-out
                               baseline scale; the largest (or mean of the ``top`` largest)
``iforest``          ``IF``    Isolation Forest (scikit-learn), mean isolation "surprise" in
                               (0, 1]
``gmm``              ``GMM``   Gaussian mixture in the PCA subspace, components chosen by BIC;
                               negative log-likelihood
===================  ========  ===============================================================
"""

from __future__ import annotations

# the registry first: it imports the built-in detector modules in its order
from reveal.analysis.detectors import registry
from reveal.analysis.detectors.base import Detector
from reveal.analysis.detectors.gmm import GMM
from reveal.analysis.detectors.iforest import IsolationForest
from reveal.analysis.detectors.pca_error import PCAError
from reveal.analysis.detectors.pca_mahalanobis import PCAMahalanobis
from reveal.analysis.detectors.registry import get, names, register, unregister
from reveal.analysis.detectors.zscore import ZScore

__all__ = [
    "GMM",
    "Detector",
    "IsolationForest",
    "PCAError",
    "PCAMahalanobis",
    "ZScore",
    "get",
    "names",
    "register",
    "registry",
    "unregister",
]
