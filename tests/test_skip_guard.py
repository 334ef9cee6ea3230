"""The skip guard (tests/skip_guard.py): skip reasons matched to components, and real pytest
runs (pytester) that fail when a test skipped for a component this host has."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import skip_guard
from skip_guard import hides_failure, needs

pytest_plugins = ["pytester"]

HERE = Path(__file__).parent
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a skip for root as root)")


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs below judge the guard's own settings, not those of the run around them
    (CI sets REVEAL_REQUIRE)."""
    for name in (skip_guard.REQUIRE_ENV, skip_guard.ALLOW_ENV, skip_guard.REPORT_ENV):
        monkeypatch.delenv(name, raising=False)


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
    ("stress-ng not installed", {"stress-ng"}),
    ("needs root, stress-ng and fio", {"root", "stress-ng", "fio"}),
    ("needs root, unshare and bpftrace", {"root", "bpftrace"}),
    ("no C compiler to build the clock shim", {"C compiler"}),
    ("gcc is not installed", {"C compiler"}),
    ("needs root and iproute2", {"root", "iproute2"}),
    ("could not import 'distributed': No module named 'distributed'", {"dask"}),
    ("could not import 'tsfresh.feature_extraction.feature_calculators'", {"feature oracles"}),
    ("chromium is not installed (neither chromium nor chromium-browser on PATH)",
     {"chromium"}),
    ("needs a full mount (root and mount(8))", {"mount"}),
    ("cannot mount a tmpfs here: permission denied", {"mount"}),
    ("the amount of memory is too small", set()),
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


def test_required_components_fail_a_skip_whatever_else_it_names() -> None:
    def has(*names: str) -> Callable[[str], bool]:
        return lambda name: name in names

    must = frozenset({"root"})
    assert not hides_failure("needs root and zram hot_add", has("root"))
    assert hides_failure("needs root and zram hot_add", has("root"), must=must)
    assert not hides_failure("no NVIDIA GPU here", has(), must=frozenset(skip_guard.COMPONENTS))
    assert skip_guard.required("all") == frozenset(skip_guard.COMPONENTS)
    assert skip_guard.required("fio, bpftrace") == {"fio", "bpftrace"}
    with pytest.raises(ValueError, match="no such component: flux"):
        skip_guard.required("fio,flux")


def test_a_module_skipped_at_collection_is_seen(pytester: pytest.Pytester) -> None:
    """``importorskip`` at a module's top skips it while collecting, before any test."""
    pytester.syspathinsert(HERE)
    pytester.makepyfile(test_oracle="""
        import pytest

        pytest.importorskip("tsfresh_absent_module", reason="tsfresh is not installed")

        def test_never_collected():
            pass
        """, test_other="def test_runs():\n    pass\n")
    result = pytester.runpytest("-p", "skip_guard")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # tsfresh is present here
    result.stdout.fnmatch_lines([
        "feature oracles: present, 0 ran, 1 skipped",
        "skipped although present: feature oracles: test_oracle.py — tsfresh is not installed",
    ])


def test_required_mode_refuses_allowing_and_fails_on_any_named_skip(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(skip_guard.REQUIRE_ENV, "chromium")
    monkeypatch.setenv(skip_guard.ALLOW_ENV, "1")
    refused = _run(pytester, "no GPU here")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*REVEAL_ALLOW_SKIPS=1 is refused where REVEAL_REQUIRE is set*"])
    monkeypatch.delenv(skip_guard.ALLOW_ENV)
    result = _run(pytester, "chromium is not installed and a flux capacitor is absent")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["chromium: present, required, 0 ran, 1 skipped",
                                 "skipped although present: chromium: *"])


def test_the_guard_cannot_be_switched_off(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(HERE)
    pytester.makeconftest("import skip_guard\n\n"
                          "def pytest_configure(config):\n    skip_guard.register(config)\n")
    pytester.makepyfile(test_plain="def test_runs():\n    pass\n")
    result = pytester.runpytest("-p", "no:reveal_skip_guard")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the skip guard cannot be switched off*"])


def test_the_guard_writes_its_summary_where_asked(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    report = tmp_path / "guard.json"
    monkeypatch.setenv(skip_guard.REPORT_ENV, str(report))
    result = _run(pytester, "stress-ng not installed")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # stress-ng is present here
    summary = json.loads(report.read_text())
    assert summary["fails_run"] is True
    assert summary["components"]["stress-ng"] == {"present": True, "ran": 0, "skipped": 1}
    assert summary["hidden"] == [{"components": "stress-ng",
                                  "test": "test_generated.py::test_skips",
                                  "reason": "stress-ng not installed"}]


def test_the_preflight_names_absent_required_components(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert skip_guard.main(["--require", "all"]) == 0
    assert "fio: present, required" in capsys.readouterr().out
    assert skip_guard.main(["--require", "flux"]) == 2
    assert "no such component: flux" in capsys.readouterr().err
    # a component this host lacks: the probe for fio answers as on a host without it
    monkeypatch.setitem(skip_guard._PRESENT, "fio", lambda: False)
    skip_guard.present.cache_clear()
    try:
        assert skip_guard.main(["--require", "fio,root"]) == 1
        out, err = capsys.readouterr()
        assert "fio: ABSENT, required" in out
        assert "required components absent: fio" in err
    finally:
        skip_guard.present.cache_clear()


@as_root
def test_the_preflight_runs_as_a_script() -> None:
    done = subprocess.run([sys.executable, str(HERE / "skip_guard.py"), "--require", "root,fio"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "root: present, required" in done.stdout
