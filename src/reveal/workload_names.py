"""Names of the reference workloads (:mod:`reveal.inject.workloads`), in a module of their
own with no imports, so that the command-line parsers can list them without loading the
injection suite."""

from __future__ import annotations

#: every reference workload
WORKLOADS = ("torch_train", "torch_busy", "torch_ddp", "numpy_train")
#: the single-process ones (``reveal validate --workload``, ``reveal demo --workload``)
SINGLE_WORKLOADS = ("torch_train", "torch_busy", "numpy_train")
