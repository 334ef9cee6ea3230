"""A small slice of a real labelled machine shared by the evaluation tests."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reveal.store.labelled import LabelledMachine, load_machine


def smd_slice(root: Path, lo: int = 3600, hi: int = 6600) -> LabelledMachine:
    """SMD machine-1-2: the last 4,000 train rows and test rows ``lo..hi`` (two labelled
    segments), labels and interpretation cut to match."""
    lm = load_machine(root, "smd", "machine-1-2")
    lm.train = lm.train.slice_rows(lm.train.n_samples - 4000, lm.train.n_samples)
    lm.test = lm.test.slice_rows(lo, hi)
    lm.labels = lm.labels[lo:hi]
    lm.interpretation = [dataclasses.replace(i, start=i.start - lo, end=i.end - lo)
                         for i in lm.interpretation if i.end > lo and i.start < hi]
    return lm
