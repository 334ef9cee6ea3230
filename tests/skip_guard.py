"""A pytest plugin that fails the run when a test skipped for a component this host has.

A test that needs the headless browser, Prometheus, Alertmanager, root, the C reader,
stress-ng, fio, bpftrace, a C compiler, iproute2, Dask, the feature oracles, a mount
(root mounting a tmpfs) or podman (with runc and debootstrap, to build and run the image)
skips where
that is missing; where it is present, such a skip hides a failure (a wrong path, a stale
build, a broken check). Each skip reason, of a test or of a whole module skipped at
collection, is matched to the components it names; when every one of them, and every tool
it names beside them, is present here, the test is listed under "skipped although present"
and the run exits 1 (``REVEAL_ALLOW_SKIPS=1`` lists without failing). Reasons that name
nothing the plugin can check (a GPU, labelled data, a kernel feature) never fail the run.

``REVEAL_REQUIRE=all`` (or a comma-separated list of components), as CI sets it, makes the
named components required: the run stops before any test when one of them is absent, a
skip that names one fails the run whatever else it names, and ``REVEAL_ALLOW_SKIPS`` is
refused. ``python tests/skip_guard.py --require all`` makes the same check before pytest
starts. The guard cannot be switched off: ``-p no:reveal_skip_guard`` is a usage error, and
with ``REVEAL_GUARD_REPORT=FILE`` it writes its summary as JSON there, so a runner can tell
that it ran (``scripts/test.sh`` fails when the file is missing).

The terminal summary always has one line per component: present or absent, and how many of
its tests ran and skipped. Loaded by ``tests/conftest.py``, or anywhere with ``-p skip_guard``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import inspect
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

NAME = "reveal_skip_guard"
ALLOW_ENV = "REVEAL_ALLOW_SKIPS"
REQUIRE_ENV = "REVEAL_REQUIRE"
REPORT_ENV = "REVEAL_GUARD_REPORT"
_PROPERTY = "reveal_components"  # user property: the components a test may skip for

#: components, in the order the summary lists them
COMPONENTS = ("chromium", "prometheus", "alertmanager", "root", "C extension", "stress-ng",
              "fio", "bpftrace", "C compiler", "iproute2", "dask", "feature oracles", "mount",
              "podman")

_PATTERNS = {
    "chromium": re.compile(r"chromium", re.IGNORECASE),
    "prometheus": re.compile(r"\bprometheus\b(?!-)", re.IGNORECASE),
    "alertmanager": re.compile(r"alertmanager", re.IGNORECASE),
    "C extension": re.compile(r"\bC (?:reader|extension)\b|_procread"),
    "stress-ng": re.compile(r"(?<![\w-])stress-ng(?![\w-])"),
    "fio": re.compile(r"(?<![\w-])fio(?![\w-])"),
    "bpftrace": re.compile(r"(?<![\w-])bpftrace(?![\w-])"),
    "C compiler": re.compile(r"\bC compiler\b|(?<![\w-])gcc(?![\w-])"),
    "iproute2": re.compile(r"(?<![\w-])iproute2(?![\w-])"),
    "dask": re.compile(r"\bdask\b|'distributed'", re.IGNORECASE),
    "feature oracles": re.compile(r"tsfresh|statsmodels"),
    "mount": re.compile(r"\bmount(?:\(8\))?\b"),
    "podman": re.compile(r"(?<![\w-])(?:podman|debootstrap|runc)(?![\w-])"),
}
_ROOT = re.compile(r"\bneeds? root\b")

#: tools a reason may name beside a component, and the program that stands for each
TOOLS = {"tc": "tc", "setpriv": "setpriv", "unshare": "unshare", "promtool": "promtool"}
_TOOL_WORDS = {tool: re.compile(rf"(?<![\w-]){re.escape(tool)}(?![\w-])") for tool in TOOLS}


def _program(*names: str) -> bool:
    return any(shutil.which(n) or os.access(f"/usr/bin/{n}", os.X_OK) for n in names)


def _modules(*names: str) -> bool:
    return all(importlib.util.find_spec(n) is not None for n in names)


def _can_mount() -> bool:
    """Root may mount here: a 64 KiB tmpfs mounted on a fresh directory and unmounted."""
    if os.geteuid() != 0 or not _program("mount", "umount"):
        return False
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="reveal-guard-mount-") as where:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", where],
                              capture_output=True, check=False)
        if done.returncode != 0:
            return False
        subprocess.run(["umount", where], capture_output=True, check=False)
    return True


def _c_extension() -> bool:
    try:
        from reveal.collect import _procfs
    except ImportError:  # Reveal not importable: the extension is not here either
        return False
    return _procfs._procread is not None


_PRESENT: dict[str, Callable[[], bool]] = {
    "chromium": lambda: _program("chromium", "chromium-browser"),
    "prometheus": lambda: _program("prometheus"),
    "alertmanager": lambda: _program("alertmanager", "prometheus-alertmanager"),
    "root": lambda: os.geteuid() == 0,
    "C extension": _c_extension,
    "stress-ng": lambda: _program("stress-ng"),
    "fio": lambda: _program("fio"),
    "bpftrace": lambda: _program("bpftrace"),
    "C compiler": lambda: _program("gcc"),
    "iproute2": lambda: _program("ip"),
    "dask": lambda: _modules("distributed"),
    "feature oracles": lambda: _modules("tsfresh", "statsmodels"),
    "mount": _can_mount,
    "podman": lambda: _program("podman") and _program("runc") and _program("debootstrap"),
}


@functools.cache
def present(name: str) -> bool:
    """Whether a component (or a tool of :data:`TOOLS`) is on this host."""
    if name in _PRESENT:
        return _PRESENT[name]()
    return shutil.which(TOOLS[name]) is not None


def required(value: str | None = None) -> frozenset[str]:
    """The components ``value`` (default: ``$REVEAL_REQUIRE``) names: ``all``, or a
    comma-separated list; unknown names raise :class:`ValueError`."""
    text = os.environ.get(REQUIRE_ENV, "") if value is None else value
    names = {n.strip() for n in text.split(",") if n.strip()}
    if "all" in names:
        return frozenset(COMPONENTS)
    unknown = names - set(COMPONENTS)
    if unknown:
        raise ValueError(f"{REQUIRE_ENV} names no such component: {', '.join(sorted(unknown))}"
                         f" (known: {', '.join(COMPONENTS)}, or all)")
    return frozenset(names)


@dataclass(frozen=True)
class Needs:
    """What a skip reason says the test needs."""

    components: frozenset[str]
    tools: frozenset[str]
    unknown: bool  # it also names something the plugin cannot check


def _root_needs(reason: str) -> tuple[bool, bool]:
    """(names root, names something unknown beside it) for "needs root ..." reasons.

    "needs root" in parentheses after another condition ("... is not writable (needs root)")
    is a hint, not the requirement. An explanation after it ("needs root (namespaces)",
    "needs root to create cgroups") adds nothing; a list ("needs root, stress-ng and fio")
    adds each item, unknown unless a component or a tool of :data:`TOOLS`."""
    for match in _ROOT.finditer(reason):
        before = reason[:match.start()]
        if before.count("(") > before.count(")"):
            continue
        rest = re.sub(r"^\s*\([^)]*\)", "", reason[match.end():])
        if not rest.strip(" .") or rest.startswith(" to "):
            return True, False
        if not rest.startswith((",", " and ")):
            return True, True
        rest = re.sub(r"^(?:,\s*|\s+and\s+)", "", rest).strip(" .")
        items = [i for i in re.split(r",\s*|\s+and\s+", rest) if i]
        return True, any(i not in TOOLS and i not in _PATTERNS for i in items)
    return False, False


@functools.cache
def needs(reason: str) -> Needs:
    """The components and tools ``reason`` names."""
    found = {name for name, pattern in _PATTERNS.items() if pattern.search(reason)}
    root, unknown = _root_needs(reason)
    if root:
        found.add("root")
    tools = frozenset(t for t, word in _TOOL_WORDS.items() if word.search(reason))
    return Needs(frozenset(found), tools, unknown)


def hides_failure(reason: str, has: Callable[[str], bool] = present,
                  must: frozenset[str] = frozenset()) -> bool:
    """True when ``reason`` names a component and everything it names is present, or when
    it names a component of ``must`` (required: nothing excuses its skip)."""
    n = needs(reason)
    if n.components & must:
        return True
    return bool(n.components) and not n.unknown and all(map(has, n.components | n.tools))


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason of a skipped report, without pytest's "Skipped: " prefix."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return text.removeprefix("Skipped: ")


_SKIP_CALL = re.compile(r"""pytest\.skip\(\s*f?(["'])(.*?)\1""")
_IMPORT_SKIP = re.compile(r"""importorskip\(\s*(["'])(.*?)\1""")


@functools.cache
def _source_reasons(func: Callable[..., object]) -> tuple[str, ...]:
    """The literal reasons of the ``pytest.skip``/``importorskip`` calls in ``func``."""
    try:
        source = inspect.getsource(func)
    except (OSError, TypeError):
        return ()
    return (*(m[2] for m in _SKIP_CALL.finditer(source)),
            *(f"could not import {m[2]!r}" for m in _IMPORT_SKIP.finditer(source)))


def _item_reasons(item: pytest.Item, root: Path) -> Iterable[str]:
    """Reasons ``item`` could skip for: its skip marks, the ``root`` mark, and the skip
    calls in its own body and in the project's fixtures it uses."""
    for mark in item.iter_markers():
        if mark.name in ("skip", "skipif"):
            reason = mark.kwargs.get("reason", mark.args[0] if mark.name == "skip" and mark.args
                                     else None)
            if isinstance(reason, str):
                yield reason
        elif mark.name == "root":
            yield "needs root"
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name, ()) if info is not None else ()
        funcs.extend(d.func for d in defs)
    for func in funcs:
        try:
            where = inspect.getsourcefile(func) if func is not None else None
        except TypeError:
            where = None
        if where is not None and Path(where).is_relative_to(root):
            yield from _source_reasons(func)


class SkipGuard:
    """Collects skips and outcomes; reports per component and fails on hidden failures.

    Under pytest-xdist the controller sees every report but collects nothing: the
    components a test may skip for travel with its reports as a user property."""

    def __init__(self, config: pytest.Config) -> None:
        self.root = config.rootpath
        self.must = required()
        self.expected: dict[str, frozenset[str]] = {}  # nodeid -> components it may skip for
        self.ran: set[str] = set()
        self.skipped: dict[str, str] = {}  # nodeid -> reason
        self.hidden: list[tuple[str, str, str]] = []  # (components, nodeid, reason)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            found: set[str] = set()
            for reason in _item_reasons(item, self.root):
                found |= needs(reason).components
            self.expected[item.nodeid] = frozenset(found)
            item.user_properties.append((_PROPERTY, sorted(found)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module skipped at collection (``importorskip`` at its top) skips all of it."""
        if report.skipped:
            self.skipped[report.nodeid] = skip_reason(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _PROPERTY:
                self.expected[report.nodeid] = frozenset(value)
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped[report.nodeid] = skip_reason(report)
        elif report.when == "call" or report.failed:
            self.ran.add(report.nodeid)

    def _allowed(self) -> bool:
        return os.environ.get(ALLOW_ENV) == "1" and not self.must

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller judges
            return
        self.hidden = [(", ".join(sorted(needs(reason).components)), nodeid, reason)
                       for nodeid, reason in self.skipped.items()
                       if hides_failure(reason, must=self.must)]
        if self.hidden and not self._allowed() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        path = os.environ.get(REPORT_ENV)
        if path:
            Path(path).write_text(json.dumps(self.summary(), indent=1) + "\n")

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per component: (tests that ran and could have skipped for it, tests skipped)."""
        ran = self.ran - self.skipped.keys()
        return {name: (sum(name in self.expected.get(nodeid, ()) for nodeid in ran),
                       sum(name in needs(r).components for r in self.skipped.values()))
                for name in COMPONENTS}

    def summary(self) -> dict[str, object]:
        """What the guard saw, as the JSON it writes to ``$REVEAL_GUARD_REPORT``."""
        return {"required": sorted(self.must),
                "components": {name: {"present": present(name), "ran": ran, "skipped": skipped}
                               for name, (ran, skipped) in self.counts().items()},
                "skipped": self.skipped,
                "hidden": [{"components": c, "test": t, "reason": r}
                           for c, t, r in self.hidden],
                "fails_run": bool(self.hidden) and not self._allowed()}

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        tr.write_sep("=", "components")
        for name, (n_ran, n_skipped) in self.counts().items():
            state = "present" if present(name) else "absent"
            need = ", required" if name in self.must else ""
            tr.write_line(f"{name}: {state}{need}, {n_ran} ran, {n_skipped} skipped")
        if not self.hidden:
            return
        allowed = self._allowed()
        tr.write_sep("=", "skipped although present", red=not allowed, yellow=allowed)
        for components, nodeid, reason in self.hidden:
            tr.write_line(f"skipped although present: {components}: {nodeid} — {reason}")
        tr.write_line(f"{ALLOW_ENV}=1: not failing the run" if allowed else
                      f"the run fails: these skips hide failures ({ALLOW_ENV}=1 allows them "
                      f"where {REQUIRE_ENV} is not set)", red=not allowed)


def missing(must: Iterable[str]) -> list[str]:
    """The components of ``must`` that this host lacks."""
    return [name for name in COMPONENTS if name in must and not present(name)]


def register(config: pytest.Config) -> None:
    """Add the guard to ``config`` (once); refuse a run that switched it off, or that lacks
    a required component."""
    manager = config.pluginmanager
    for name in (NAME, "skip_guard"):
        if manager.is_blocked(name):
            raise pytest.UsageError(f"the skip guard cannot be switched off (-p no:{name})")
    try:
        must = required()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if must and os.environ.get(ALLOW_ENV) == "1":
        raise pytest.UsageError(f"{ALLOW_ENV}=1 is refused where {REQUIRE_ENV} is set")
    absent = missing(must)
    if absent and not hasattr(config, "workerinput"):
        raise pytest.UsageError(f"required components absent: {', '.join(absent)}")
    if not manager.has_plugin(NAME):
        manager.register(SkipGuard(config), NAME)


def pytest_configure(config: pytest.Config) -> None:
    register(config)


def main(argv: list[str] | None = None) -> int:
    """``python tests/skip_guard.py --require all``: list the components, exit 1 when a
    required one is absent (before pytest starts)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--require", default=os.environ.get(REQUIRE_ENV, ""),
                        help="'all' or a comma-separated list of components "
                             f"(default: ${REQUIRE_ENV})")
    args = parser.parse_args(argv)
    try:
        must = required(args.require)
    except ValueError as exc:
        print(f"skip guard: {exc}", file=sys.stderr)
        return 2
    for name in COMPONENTS:
        state = "present" if present(name) else "ABSENT"
        print(f"{name}: {state}{', required' if name in must else ''}")
    absent = missing(must)
    if absent:
        print(f"skip guard: required components absent: {', '.join(absent)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.exit(main())
