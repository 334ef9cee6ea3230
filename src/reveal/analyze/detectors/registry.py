"""The detectors by name: what ``DetectConfig.detectors`` and ``--detectors`` may list.

A detector class joins with the :func:`register` decorator, keyed by its ``name``; the
ensemble builds each listed detector with ``get(name).from_settings(...)``. Importing
:mod:`reveal.analyze.detectors` imports the built-in detector modules below, so the
registry then holds them, in this order.
"""

from __future__ import annotations

import importlib
from typing import TypeVar

from reveal.analyze.detectors.base import Detector
from reveal.errors import InputError

#: modules of this package that define the built-in detectors (imported in this order)
BUILTIN_MODULES = ("zscore", "pca_mahalanobis", "iforest", "gmm", "pca_error")

_REGISTRY: dict[str, type[Detector]] = {}

D = TypeVar("D", bound=type[Detector])


def register(cls: D) -> D:
    """Class decorator: make ``cls`` available under ``cls.name``.

    Raises ``ValueError`` for a class without a name of its own, or for a name another
    class already holds (registering the same class again does nothing).
    """
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise ValueError(f"{cls!r} is not a Detector subclass")
    name = cls.name
    if not name or name == Detector.name or not name.isidentifier():
        raise ValueError(f"{cls.__name__} needs a name (an identifier), got {name!r}")
    held = _REGISTRY.get(name)
    if held is not None and held is not cls:
        raise ValueError(f"detector name {name!r} is taken by {held.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def unregister(name: str) -> None:
    """Remove the detector registered as ``name`` (a no-op when there is none)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> type[Detector]:
    """The detector class registered as ``name``; ``InputError`` naming the known ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InputError(f"unknown detector {name!r}; known: {', '.join(_REGISTRY)}") \
            from None


def names() -> tuple[str, ...]:
    """Registered detector names, in registration order (the built-ins first)."""
    return tuple(_REGISTRY)


for _module in BUILTIN_MODULES:
    importlib.import_module(f"{__package__}.{_module}")
