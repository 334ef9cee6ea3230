"""The detectors by name: what ``DetectConfig.detectors`` and ``--detectors`` may list.

A detector class joins with the :func:`register` decorator, keyed by its ``name``; the
ensemble builds each listed detector with ``get(name).from_settings(...)``. Importing
:mod:`reveal.analysis.detectors` imports the built-in detector modules below, so the
registry then holds them, in this order.
"""

from __future__ import annotations

import importlib
from typing import TypeVar

from reveal.analysis.detectors.base import Detector
from reveal.registry import Registry

#: modules of this package that define the built-in detectors (imported in this order)
BUILTIN_MODULES = ("zscore", "pca_mahalanobis", "iforest", "gmm", "pca_error")

#: the detector classes by name (a :class:`reveal.registry.Registry`)
DETECTORS: Registry[type[Detector]] = Registry("detector", Detector, identifier=True)

D = TypeVar("D", bound=type[Detector])


def register(cls: D) -> D:
    """Class decorator: make ``cls`` available under ``cls.name``.

    Raises ``ValueError`` for a class without a name of its own, or for a name another
    class already holds (registering the same class again does nothing).
    """
    return DETECTORS.register(cls)


def unregister(name: str) -> None:
    """Remove the detector registered as ``name`` (a no-op when there is none)."""
    DETECTORS.unregister(name)


def get(name: str) -> type[Detector]:
    """The detector class registered as ``name``; ``InputError`` naming the known ones."""
    return DETECTORS.lookup(name)


def names() -> tuple[str, ...]:
    """Registered detector names, in registration order (the built-ins first)."""
    return DETECTORS.names()


for _module in BUILTIN_MODULES:
    importlib.import_module(f"{__package__}.{_module}")
