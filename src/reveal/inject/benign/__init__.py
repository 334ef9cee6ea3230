"""Benign activity: ordinary host work that is not a fault, run and recorded like one.

Each kind follows the Fault contract (:mod:`reveal.inject.faults.base`) with one intensity,
``default``, is bounded in size and time, and carries ``benign = True``; ``informational``
says whether an operator would want a note (something appeared) rather than silence.
:func:`reveal.inject.faults.make_fault` resolves these kinds too, so scenarios run them
and record their ground truth in ``events.jsonl`` as they do faults'.

=====================  =========  ====  ===============================================
kind                   subsystem  info  what it does
=====================  =========  ====  ===============================================
page_cache_drop        memory           sync; echo 1 > /proc/sys/vm/drop_caches
thp_compact            memory           echo 1 > /proc/sys/vm/compact_memory
git_commit             storage          git init, 200 small files, add, commit
short_compile          cpu              gcc -O2 of a small generated C file, 3 times
package_install        software         a tiny local wheel, pip install --no-index --target
log_rotation           storage          20 MB of log lines appended, renamed, gzipped
cron_burst             software         100 short processes (true, date, sh -c) in 2 s
ssh_login              software         su -l nobody: a login shell runs id, ls, exits
container_start_stop   software   yes   cgroup + netns + veth, sleep inside 5 s, torn down
new_interface          network    yes   dummy (or bridge) interface up 4 s, deleted
clock_step             software         CLOCK_REALTIME +0.5 s, back 3 s later
checkpoint             storage          150 MB written in 4 MiB chunks, fsynced
epoch_boundary         storage          200 MB of shards written, evicted, read through
load_change            cpu              one process busy 5 ms of every 100 ms (≈ 5 % CPU)
watch_restart          software         reveal watch stopped and started on its state
                                        (live suite only: :data:`LIVE_ONLY`)
=====================  =========  ====  ===============================================
"""

from __future__ import annotations

import importlib

from reveal.inject.benign.base import BENIGN, PREFIX, BenignActivity, register

#: modules of this package that define the built-in kinds (registered in this order)
BUILTIN_MODULES = ("caches", "devtools", "logs", "login", "container", "clock", "job",
                   "watch")
for _module in BUILTIN_MODULES:
    importlib.import_module(f"{__package__}.{_module}")

LIVE_ONLY = ("watch_restart",)
#: The batch suite's kinds.
BATCH_KINDS = tuple(k for k in BENIGN if k not in LIVE_ONLY)

#: Three kinds for ``reveal validate --benign --quick``: a burst of processes, the page
#: cache dropped, and one informational kind.
QUICK = ("cron_burst", "page_cache_drop", "new_interface")


def is_informational(kind: str) -> bool:
    return bool(getattr(BENIGN[kind], "informational", False))


__all__ = ["BATCH_KINDS", "BENIGN", "LIVE_ONLY", "PREFIX", "QUICK", "BenignActivity",
           "is_informational", "register"]
