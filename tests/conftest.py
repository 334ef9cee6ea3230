"""Shared fixtures: the labelled data root (skips cleanly when ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reveal.store.labelled import default_data_root


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = default_data_root()
    if root is None:
        pytest.skip("labelled data (../shared/data) not present")
    return root
