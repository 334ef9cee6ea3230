"""NVML access shared by the per-GPU and per-process probes: load the bindings, start NVML,
name errors, read probe options."""

from __future__ import annotations

import importlib
from typing import Any

from reveal.collect.probe import Probe, ProbeUnavailable

#: NVML answers that mean "this query does not exist here" (drop its channels, say so),
#: as opposed to a transient failure (NaN for that poll).
DROP_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION",
               "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT")


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


def open_nvml(probe: Probe) -> Any:
    """The bindings of ``probe`` (its ``nvml`` option, else pynvml), started; a failure
    marks the probe unavailable with the reason and raises :class:`ProbeUnavailable`."""
    try:
        nvml = load_nvml(probe.options, probe.name)
        start_nvml(nvml, probe.name)
    except ProbeUnavailable as exc:
        probe.status, probe.reason = "unavailable", str(exc)
        raise
    return nvml


def error_is(nvml: Any, exc: Exception, *names: str) -> bool:
    """Whether an NVMLError carries one of the named codes (``NVML_ERROR_...``)."""
    value = getattr(exc, "value", None)
    return any(getattr(nvml, name, object()) == value for name in names)


def text(value: Any) -> str:
    """An NVML string answer (bytes in older bindings) as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def option_bool(options: dict[str, Any], key: str, default: bool) -> bool:
    """A yes/no probe option given as a bool, a number or a word (``false``, ``off``...)."""
    value = options.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(value)


def option_float(options: dict[str, Any], key: str, default: float) -> float:
    """A positive number probe option; ValueError names the key when it is not one."""
    value = float(options.get(key, default))
    if not value > 0:
        raise ValueError(f"option {key} must be positive, got {value}")
    return value
