"""Reveal: find performance anomalies in ML hosts from hardware and OS telemetry alone.

In Python (docs/api.md)::

    import reveal
    result = reveal.analyze(df, baseline=df0)   # DataFrames, run paths or Telemetry
    result.anomalies                            # a DataFrame, one row per flagged window

``import reveal`` stays light: the names below are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from reveal._version import __version__

#: public names and the modules that define them (imported on first access)
_LAZY = {
    "analyze": "reveal.api",
    "Result": "reveal.result",
    "Reveal": "reveal.model",
    "Report": "reveal.report.schema",
    "Telemetry": "reveal.frame",
    "RevealError": "reveal.errors",
    "InputError": "reveal.errors",
    "open_source": "reveal.store.sources",
    "telemetry_from_frame": "reveal.dataframe",
    "frame_from_telemetry": "reveal.dataframe",
    "window_features": "reveal.api",
}

__all__ = ["__version__", "load", *_LAZY]


def load(path: Any) -> Any:
    """A fitted model written by ``Reveal.save`` (:meth:`reveal.model.Reveal.load`)."""
    return importlib.import_module("reveal.model").Reveal.load(path)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reveal' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(__all__) | {k for k in globals() if k.startswith("__")})
