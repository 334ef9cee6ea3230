"""A pytest plugin that fails the run when a test skipped for a component this host has.

A test that needs the headless browser, Prometheus, Alertmanager, root or the C reader
skips where that is missing; where it is present, such a skip hides a failure (a wrong
path, a stale build, a broken check). Each skip reason is matched to the components it
names; when every one of them, and every tool it names beside them, is present here, the
test is listed under "skipped although present" and the run exits 1
(``REVEAL_ALLOW_SKIPS=1`` lists without failing). Reasons that name nothing the plugin can
check (a GPU, labelled data, a kernel feature) never fail the run. The terminal summary
always has one line per component: present or absent, and how many of its tests ran and
skipped. Loaded by ``tests/conftest.py``, or anywhere with ``-p skip_guard``.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

NAME = "reveal_skip_guard"
ALLOW_ENV = "REVEAL_ALLOW_SKIPS"

#: components, in the order the summary lists them
COMPONENTS = ("chromium", "prometheus", "alertmanager", "root", "C extension")

_PATTERNS = {
    "chromium": re.compile(r"chromium", re.IGNORECASE),
    "prometheus": re.compile(r"\bprometheus\b(?!-)", re.IGNORECASE),
    "alertmanager": re.compile(r"alertmanager", re.IGNORECASE),
    "C extension": re.compile(r"\bC (?:reader|extension)\b|_procread"),
}
_ROOT = re.compile(r"\bneeds? root\b")

#: tools a reason may name beside a component, and the program that stands for each
TOOLS = {"iproute2": "ip", "tc": "tc", "setpriv": "setpriv", "stress-ng": "stress-ng",
         "fio": "fio", "unshare": "unshare", "bpftrace": "bpftrace", "gcc": "gcc",
         "promtool": "promtool", "mount(8)": "mount"}
_TOOL_WORDS = {tool: re.compile(rf"(?<![\w-]){re.escape(tool)}(?![\w-])") for tool in TOOLS}


def _program(*names: str) -> bool:
    return any(shutil.which(n) or os.access(f"/usr/bin/{n}", os.X_OK) for n in names)


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
}


@functools.cache
def present(name: str) -> bool:
    """Whether a component (or a tool of :data:`TOOLS`) is on this host."""
    if name in _PRESENT:
        return _PRESENT[name]()
    return shutil.which(TOOLS[name]) is not None


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
    adds each item, unknown unless a tool of :data:`TOOLS`."""
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
        return True, any(i not in TOOLS for i in items)
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


def hides_failure(reason: str, has: Callable[[str], bool] = present) -> bool:
    """True when ``reason`` names a component and everything it names is present."""
    n = needs(reason)
    return bool(n.components) and not n.unknown and all(map(has, n.components | n.tools))


def skip_reason(report: pytest.TestReport) -> str:
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
    """Collects skips and outcomes; reports per component and fails on hidden failures."""

    def __init__(self, config: pytest.Config) -> None:
        self.root = config.rootpath
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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped[report.nodeid] = skip_reason(report)
        elif report.when == "call" or report.failed:
            self.ran.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.hidden = [(", ".join(sorted(needs(reason).components)), nodeid, reason)
                       for nodeid, reason in self.skipped.items() if hides_failure(reason)]
        if (self.hidden and os.environ.get(ALLOW_ENV) != "1"
                and session.exitstatus == pytest.ExitCode.OK):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        tr.write_sep("=", "components")
        ran = self.ran - self.skipped.keys()
        for name in COMPONENTS:
            n_ran = sum(name in self.expected.get(nodeid, ()) for nodeid in ran)
            n_skipped = sum(name in needs(r).components for r in self.skipped.values())
            state = "present" if present(name) else "absent"
            tr.write_line(f"{name}: {state}, {n_ran} ran, {n_skipped} skipped")
        if not self.hidden:
            return
        allowed = os.environ.get(ALLOW_ENV) == "1"
        tr.write_sep("=", "skipped although present", red=not allowed, yellow=allowed)
        for components, nodeid, reason in self.hidden:
            tr.write_line(f"skipped although present: {components}: {nodeid} — {reason}")
        tr.write_line(f"{ALLOW_ENV}=1: not failing the run" if allowed else
                      f"the run fails: these skips hide failures ({ALLOW_ENV}=1 allows them)",
                      red=not allowed)


def register(config: pytest.Config) -> None:
    """Add the guard to ``config`` (once)."""
    if not config.pluginmanager.has_plugin(NAME):
        config.pluginmanager.register(SkipGuard(config), NAME)


def pytest_configure(config: pytest.Config) -> None:
    register(config)
