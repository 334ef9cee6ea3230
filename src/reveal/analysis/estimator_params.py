"""An estimator's ``__init__`` parameters, stored as given (scikit-learn's rule)."""

from __future__ import annotations

from typing import Any


def keep_params(estimator: object, **params: Any) -> None:
    """Set each of ``params`` on ``estimator`` unchanged, as scikit-learn's
    ``get_params``, ``set_params`` and ``clone`` expect an ``__init__`` to do."""
    for name, value in params.items():
        setattr(estimator, name, value)
