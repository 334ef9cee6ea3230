"""Segment buffers in their own mapping go back to the kernel when freed."""

from __future__ import annotations

import gc

import numpy as np

from reveal.analysis._feat_alloc import reuse_freed_memory
from reveal.store._mapped import mapped_zeros


def _rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_mapped_zeros_is_zero_and_shaped():
    block = mapped_zeros((3016, 7), np.float64)
    assert block.shape == (3016, 7) and block.dtype == np.float64
    assert not block.any()
    block[5] = 1.5
    assert block.sum() == 1.5 * 7
    assert mapped_zeros((0, 4), np.int64).shape == (0, 4)


def test_a_freed_buffer_leaves_the_resident_set_even_under_raised_malloc_thresholds():
    reuse_freed_memory()  # the watch's setting: 24 MB from malloc would stay on the heap
    size = 24 * 2**20
    before = _rss_bytes()
    block = mapped_zeros((size // 8,), np.float64)
    block[:] = 1.0  # every page made resident
    during = _rss_bytes()
    del block
    gc.collect()
    after = _rss_bytes()
    assert during - before > 0.8 * size
    assert during - after > 0.8 * size
