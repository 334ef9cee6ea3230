"""Shared fixtures: the labelled data root (skips cleanly when ../shared/data is absent)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reveal.store.labelled import default_data_root


@pytest.fixture(scope="session")
def data_root() -> Path:
    root = default_data_root()
    if root is None:
        pytest.skip("labelled data (../shared/data) not present")
    return root


@pytest.fixture
def native_on() -> Iterator[None]:
    """New file groups get the C reader's plans (restored after the test)."""
    from reveal.collect import _procfs

    before = _procfs.USE_NATIVE
    _procfs.USE_NATIVE = True
    yield
    _procfs.USE_NATIVE = before
