"""The analysis of one host: derive, select, features, detectors, attribution.

The package is also callable: ``reveal.analyze(data, baseline=None, *, preset="auto",
model=None, host=None, progress=None)`` analyses a run (a pandas DataFrame, a run path or
Telemetry) and returns a :class:`reveal.result.Result`; it is :func:`reveal.api.analyze`
(see there, and docs/api.md). Its submodules import as usual
(``from reveal.analyze import pipeline``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any

#: the module of the function a call of this package runs (imported on the first call:
#: the analysis modules never depend on it)
API_MODULE = "reveal.api"
_PACKAGE_DOC = __doc__


class _CallablePackage(types.ModuleType):
    """This package's type: a module that, called, runs :func:`reveal.api.analyze`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Analyse a run: :func:`reveal.api.analyze` (returns a ``Result``)."""
        return importlib.import_module(API_MODULE).analyze(*args, **kwargs)

    @property
    def __signature__(self) -> Any:  # what inspect.signature and help() show for a call
        return inspect.signature(importlib.import_module(API_MODULE).analyze)

    @property
    def __doc__(self) -> str:  # type: ignore[override]  # help(): the package, then the call
        api = importlib.import_module(API_MODULE).analyze
        return (f"{_PACKAGE_DOC}\nCalled: analyze{inspect.signature(api)}\n\n"
                f"{inspect.getdoc(api)}\n")


sys.modules[__name__].__class__ = _CallablePackage
