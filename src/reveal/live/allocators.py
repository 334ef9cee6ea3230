"""Memory settings for a process that runs for months: few malloc arenas, no jemalloc,
no library it never calls.

glibc gives each thread that allocates its own arena (up to 8 per CPU), and memory freed
in one arena is not reused by another: a ``watch`` with a tick thread, a drain thread,
probe threads, an HTTP server and sinks keeps a dozen partly empty heaps. PyArrow's
default pool (jemalloc) keeps freed pages too. Measured with ``bench/bench_watch.py``
(``--learn 70s --seconds 40 --score-every 5``): RSS 310 → 317 MB with the defaults, 275 →
280 MB with two arenas and the system pool for Arrow set before anything is imported, 289
→ 296 MB when set only once the watch had imported everything.

A fit allocates far more than scoring does (a 10-minute learn: the whole span's rows and
their features); :func:`trim_heap` hands what it freed back to the kernel afterwards.
Scoring keeps the memory it frees for its next call (``reuse_freed_memory``: no trim at
the heap's top, blocks up to 32 MB from the heap), so the heap's free holes would only
grow over hours; the watch trims it once a minute as well (a few ms).

scikit-learn imports pandas whenever it is installed (``sklearn.utils.fixes``), only to
recognise DataFrames it is given; a watch gives it arrays. :func:`leave_out_unused` makes
such optional imports fail in the watch's process (the importer then goes on without them,
as it does where they are not installed): about 31 MB of Python objects and 33 MB of
mapped libraries less, measured by importing everything the watch imports with and
without it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.abc
import os
import sys

from reveal.analysis._feat_alloc import glibc

_M_ARENA_MAX = -8
ARENAS = 2


def lean_allocators(arenas: int = ARENAS) -> dict[str, bool]:
    """At most ``arenas`` malloc arenas (glibc) and the system allocator for Arrow
    buffers; call first thing, before heavy imports and threads. Returns what took
    effect."""
    done = {"arenas": False, "arrow_system_pool": False}
    libc = glibc()
    if libc is not None:
        done["arenas"] = libc.mallopt(_M_ARENA_MAX, arenas) == 1
    if "pyarrow" not in sys.modules:  # read when Arrow first allocates
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
        done["arrow_system_pool"] = os.environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    else:
        with contextlib.suppress(ImportError, NotImplementedError):
            import pyarrow as pa

            pa.set_memory_pool(pa.system_memory_pool())
            done["arrow_system_pool"] = True
    return done


#: Libraries that a watch's imports load only because they are installed, never calling
#: them: each is imported by its users inside ``try/except ImportError``.
UNUSED_BY_WATCH = ("pandas",)


class _LeftOut(importlib.abc.MetaPathFinder):
    """A finder that answers "not installed" for the names it holds."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (left out of this "
                                      f"process)", name=fullname)


def leave_out_unused(names: tuple[str, ...] = UNUSED_BY_WATCH) -> list[str]:
    """Make ``import NAME`` raise ModuleNotFoundError in this process, as if it were not
    installed, for each of ``names`` not yet imported; call before the heavy imports.
    Returns the names left out."""
    left_out = [name for name in names if name not in sys.modules]
    if left_out:
        sys.meta_path.insert(0, _LeftOut(set(left_out)))
    return left_out


def trim_heap(collect: bool = True) -> bool:
    """Return the free memory of every malloc arena to the kernel (glibc
    ``malloc_trim``), after a garbage collection when ``collect``; True where something
    was returned."""
    if collect:
        gc.collect()
    libc = glibc()
    return libc is not None and bool(libc.malloc_trim(0))
