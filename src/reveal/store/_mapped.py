"""Arrays in their own anonymous memory mapping, returned to the kernel when freed.

The collector's segment buffers (a segment's rows × channels, tens of MB) live for one
segment and are then replaced. From malloc they would come from the heap once glibc's
dynamic mmap threshold has risen (or once :mod:`reveal.analysis._feat_alloc` raised it),
and a freed buffer between live blocks stays part of the process's resident memory. A
mapping of their own is unmapped when the last array viewing it goes, and its pages are
only made resident as rows are written.
"""

from __future__ import annotations

import mmap
from math import prod

import numpy as np


def mapped_zeros(shape: tuple[int, ...], dtype: type | np.dtype) -> np.ndarray:
    """A zero-filled array of ``shape`` backed by an anonymous private mapping."""
    dtype = np.dtype(dtype)
    count = prod(shape)
    if count == 0:
        return np.zeros(shape, dtype)
    buffer = mmap.mmap(-1, count * dtype.itemsize,
                       flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return np.frombuffer(buffer, dtype=dtype, count=count).reshape(shape)
