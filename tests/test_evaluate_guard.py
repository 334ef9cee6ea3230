"""A regression guard on labelled data: on a fixed slice of SMD and ASD machines (the first
three of each by name, whole), Reveal's default analysis keeps its automatic-threshold F1,
best F1 and AUPRC within a margin of the figures of record, and stays at or above the
causal Quo Vadis PCA-error anchor (:mod:`reveal.evaluate.anchors`)."""

from __future__ import annotations

import numpy as np
import pytest

from reveal.evaluate.anchors import run_qv_causal
from reveal.evaluate.labelled import EvalSettings, run_reveal, score_run
from reveal.evaluate.metrics import auprc, best_f1, point_prf
from reveal.store.labelled import default_data_root, list_machines, load_machine

ROOT = default_data_root()
#: Means over the slice with the default analysis (windows of 10 and 5 rows;
#: bench/results/evaluate_two_sizes.json, per machine)
RECORD = {"smd": {"best_f1": 0.442, "auprc": 0.365, "auto_f1": 0.425},
          "asd": {"best_f1": 0.430, "auprc": 0.375, "auto_f1": 0.385}}
MARGIN = 0.02


def _slice(dataset: str) -> list[str]:
    return list_machines(ROOT, dataset)[:3]


@pytest.mark.skipif(ROOT is None, reason="labelled data (../shared/data) not present")
@pytest.mark.parametrize("dataset", ["smd", "asd"])
def test_reveal_holds_its_figures_and_beats_the_causal_anchor(dataset):
    ours, anchor = [], []
    for name in _slice(dataset):
        lm = load_machine(ROOT, dataset, name)
        result = score_run(lm, run_reveal(lm, EvalSettings()))
        ours.append((result["best_f1"], result["auprc"], result["auto"]["f1"]))
        qv = run_qv_causal(lm.train.values, lm.test.values)
        y = lm.labels.astype(bool)
        anchor.append((best_f1(y, qv.scores)[0].f1, auprc(y, qv.scores),
                       point_prf(y, qv.flagged).f1))
    mine, theirs = np.mean(ours, axis=0), np.mean(anchor, axis=0)
    for k, key in enumerate(("best_f1", "auprc", "auto_f1")):
        assert mine[k] >= RECORD[dataset][key] - MARGIN, (key, mine[k])
        assert mine[k] >= theirs[k], (key, mine[k], theirs[k])
