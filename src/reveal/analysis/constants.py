"""Constants the analysis and the fleet share, each written once (a leaf module: it imports
nothing of the project's own)."""

import statistics

#: a robust sigma from a median absolute deviation: σ ≈ 1.4826 · MAD for a normal sample
#: (1 / Φ⁻¹(3/4))
MAD_TO_SIGMA = 1.4826

#: features that describe a window's level; ``state`` channels (see the catalog) keep only
#: the others (spread, trend, shape): their level records history, their change activity
LEVEL_FEATURES = ("mean", "median", "min", "max")
#: Of those, the window's typical level (not a lone sample's minimum or maximum).
TYPICAL_LEVEL_FEATURES = ("mean", "median")

#: seconds without a flagged window after which an episode has ended: the live watch's
#: default ``--resolve-after``, and the gap a report bridges between two groups of flagged
#: windows of the same subsystem (a fault and its aftermath are one episode)
EPISODE_GAP_S = 30.0

#: upper quantile of a baseline's window values that a burst of a channel moving in
#: bursts must pass to count (direct signs, the least change that matters)
TAIL_QUANTILE = 0.99
#: The distance of a normal law's :data:`TAIL_QUANTILE` quantile from its median, in
#: sigmas: a tail measured there, divided by this, is a sigma.
TAIL_SIGMAS = statistics.NormalDist().inv_cdf(TAIL_QUANTILE)
