"""NVML access shared by the per-GPU and per-process probes: load the bindings, start NVML."""

from __future__ import annotations

import importlib
from typing import Any

from reveal.collect.probe import ProbeUnavailable


def load_nvml(options: dict[str, Any], probe: str) -> Any:
    """The ``pynvml`` module, or an injected pynvml-shaped object (``options["nvml"]``)."""
    injected = options.get("nvml")
    if injected is not None:
        return injected
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise ProbeUnavailable(f"{probe}: the NVML Python bindings are not installed "
                               "(pip install nvidia-ml-py)") from exc


def start_nvml(nvml: Any, probe: str) -> None:
    """``nvmlInit``; a failure becomes :class:`ProbeUnavailable` with the reason."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise ProbeUnavailable(f"{probe}: NVML could not start ({exc}): no NVIDIA driver or "
                               "libnvidia-ml.so.1 on this host") from exc


def error_is(nvml: Any, exc: Exception, *names: str) -> bool:
    """Whether an NVMLError carries one of the named codes (``NVML_ERROR_...``)."""
    value = getattr(exc, "value", None)
    return any(getattr(nvml, name, object()) == value for name in names)
