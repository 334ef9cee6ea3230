"""What one method gives on one labelled machine's test part: scores, verdicts, the
per-metric ranking of labelled rows, and its time."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class MachineRun:
    """Test-row outputs of one method on one machine."""

    scores: np.ndarray  # (T,) anomaly score per test row
    flagged: np.ndarray  # bool (T,) automatic-threshold verdict
    metric_scores: np.ndarray  # (n_labelled, C) per-metric ranking scores, labelled rows
    labelled_rows: np.ndarray  # test rows of metric_scores
    seconds: float
    extra: dict = field(default_factory=dict)
