"""Shared fixtures: the labelled data root (skips cleanly when ../shared/data is absent);
the skip guard (:mod:`skip_guard`) is loaded for every run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import skip_guard
from reveal.store.labelled import default_data_root


def pytest_configure(config: pytest.Config) -> None:
    skip_guard.register(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``quiet_host`` run first: they record this host at rest, and a thousand
    tests before them leave it otherwise (a full page cache written back in bursts, servers
    winding down), which is the suite's doing, not what those tests examine.

    Run in parallel, ``scripts/test.sh`` gives each module to one worker (pytest-xdist's
    ``--dist loadfile --no-loadscope-reorder``): its module and session fixtures
    (recordings, servers, fitted models) are then made once, not once per worker. Modules
    with a test marked ``slow`` come first, so that the longest modules start first and the
    workers finish together, not one long module alone at the end."""
    slow_modules = {item.module.__name__ for item in items
                    if isinstance(item, pytest.Function) and item.get_closest_marker("slow")}
    items.sort(key=lambda item: (item.get_closest_marker("quiet_host") is None,
                                 not isinstance(item, pytest.Function)
                                 or item.module.__name__ not in slow_modules))


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


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A scratch directory named as the injection suite names its own (``rvinj-<pid>-``),
    removed after the test."""
    import shutil

    from reveal.inject.cleanup import make_temp_dir

    path = make_temp_dir("test")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def entries_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An importable package of the test's own, for catalog entry files
    (``Catalog.from_package``)."""
    import sys

    package = tmp_path / "test_catalog_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    sys.modules.pop("test_catalog_pkg", None)
