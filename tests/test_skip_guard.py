"""The skip guard (tests/skip_guard.py): skip reasons matched to components, and real pytest
runs (pytester) that fail when a test skipped for a component this host has."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import skip_guard
from skip_guard import hides_failure, needs

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a skip for root as root)")


@pytest.mark.parametrize(("reason", "components"), [
    ("/usr/bin/chromium is not installed", {"chromium"}),
    ("needs the Debian packages prometheus and prometheus-alertmanager",
     {"prometheus", "alertmanager"}),
    ("prometheus and promtool are not installed (apt-get install prometheus)", {"prometheus"}),
    ("needs root (namespaces, sysctl)", {"root"}),
    ("recording a fleet needs root", {"root"}),
    ("the C reader is not built here", {"C extension"}),
    ("C extension reveal.collect._procread not built", {"C extension"}),
    ("could not import 'reveal.collect._procread': No module named x", {"C extension"}),
    ("/proc/sys/vm/drop_caches is not writable (needs root)", set()),
    ("no NVIDIA GPU with its driver and nvidia-smi on this host", set()),
    ("labelled data (REVEAL_DATA) absent", set()),
])
def test_reasons_name_their_components(reason: str, components: set[str]) -> None:
    assert needs(reason).components == components


def test_a_skip_fails_only_when_everything_it_names_is_present() -> None:
    def has(*names: str) -> Callable[[str], bool]:
        return lambda name: name in names

    assert hides_failure("needs root to create cgroups", has("root"))
    assert not hides_failure("needs root to create cgroups", has())
    assert hides_failure("needs root, stress-ng and fio", has("root", "stress-ng", "fio"))
    assert not hides_failure("needs root, stress-ng and fio", has("root", "fio"))
    assert not hides_failure("needs root and zram hot_add", has("root"))  # cannot check zram
    assert not hides_failure("prometheus and promtool are not installed", has("prometheus"))
    assert not hides_failure("needs the Debian packages prometheus and prometheus-alertmanager",
                             has("prometheus"))
    assert not hides_failure("no NVIDIA GPU here", has(*skip_guard.COMPONENTS))


def _run(pytester: pytest.Pytester, reason: str) -> pytest.RunResult:
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_generated=f"""
        import pytest

        def test_runs():
            pass

        def test_skips():
            pytest.skip({reason!r})
        """)
    return pytester.runpytest("-p", "skip_guard")


@as_root
def test_a_root_skip_as_root_fails_the_run(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(skip_guard.ALLOW_ENV, raising=False)
    result = _run(pytester, "needs root to create cgroups")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*= skipped although present =*",
        "skipped although present: root: test_generated.py::test_skips — needs root to create "
        "cgroups",
        "the run fails*",
    ])
    result.stdout.fnmatch_lines(["root: present, 0 ran, 1 skipped"])


@as_root
def test_allow_skips_lists_without_failing(pytester: pytest.Pytester,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(skip_guard.ALLOW_ENV, "1")
    result = _run(pytester, "needs root to create cgroups")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["skipped although present: root: *", "REVEAL_ALLOW_SKIPS=1*"])


@pytest.mark.parametrize("reason", ["no NVIDIA GPU with its driver and nvidia-smi on this host",
                                    "needs a flux capacitor",
                                    "needs root and a flux capacitor"])
def test_skips_for_what_is_absent_pass(pytester: pytest.Pytester,
                                       monkeypatch: pytest.MonkeyPatch, reason: str) -> None:
    monkeypatch.delenv(skip_guard.ALLOW_ENV, raising=False)
    result = _run(pytester, reason)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.no_fnmatch_line("*skipped although present*")
    result.stdout.fnmatch_lines(["*= components =*", "chromium: * 0 ran, 0 skipped"])


def test_tests_that_can_skip_for_a_component_count_as_ran(pytester: pytest.Pytester) -> None:
    """A test whose skip mark names a component, and is not skipped, ran for it."""
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_marked=f"""
        import pytest

        @pytest.mark.skipif(False, reason={"/usr/bin/chromium is not installed"!r})
        def test_page():
            pass

        def test_body():
            if False:
                pytest.skip({"the C reader is not built here"!r})
        """)
    result = pytester.runpytest("-p", "skip_guard")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["chromium: * 1 ran, 0 skipped",
                                 "C extension: * 1 ran, 0 skipped"])
