"""Every assert in the tests can fail: none compares an expression with itself
(``assert x >= x``, ``x == x``, ``x <= x``), and none asks only that something is not
empty (``len(...) > 0``, ``len(...) >= 1``, ``len(...)`` alone) — assert what it holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

#: Comparisons that always hold between an expression and itself (NaN aside).
ALWAYS = (ast.Eq, ast.GtE, ast.LtE, ast.Is)

#: Hits that are fine, by (file name, the assert's condition as ``ast.unparse`` writes it):
#: the reason each is. Keep it short.
ALLOWED: dict[tuple[str, str], str] = {
    ("test_netns_probe.py", "len(first)"):
        "a guard that says why before the next assert reads first[0], the join time",
}


def _is_len(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "len" and len(node.args) == 1)


def _self_comparisons(test: ast.expr) -> list[str]:
    """The comparisons inside ``test`` whose two sides are the same expression."""
    out = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, sides[:-1], sides[1:], strict=True):
                if isinstance(op, ALWAYS) and ast.dump(a) == ast.dump(b):
                    out.append(f"compares {ast.unparse(a)} with itself")
    return out


def _only_not_empty(test: ast.expr) -> bool:
    """``test`` asks only that a length is not zero."""
    if _is_len(test):
        return True
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_len(test.left):
        op, right = test.ops[0], test.comparators[0]
        if isinstance(right, ast.Constant) and not isinstance(right.value, bool):
            return ((isinstance(op, ast.Gt | ast.NotEq) and right.value == 0)
                    or (isinstance(op, ast.GtE) and right.value == 1))
    return False


def hits(source: str, name: str) -> list[tuple[str, int, str, str]]:
    """(file name, line, condition, why) for each assert in ``source`` that cannot fail or
    only asks for something not empty."""
    out = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if not isinstance(node, ast.Assert):
            continue
        why = _self_comparisons(node.test)
        if _only_not_empty(node.test):
            why.append(f"asks only that {ast.unparse(node.test)}")
        if isinstance(node.test, ast.Constant) and node.test.value:
            why.append("asserts a true constant")
        out += [(name, node.lineno, ast.unparse(node.test), w) for w in why]
    return out


@pytest.mark.parametrize(("source", "found"), [
    ("assert a.b >= a.b", ["compares a.b with itself"]),
    ("assert f(x) == f(x) and y", ["compares f(x) with itself"]),
    ("assert 0 <= n <= n", ["compares n with itself"]),
    ("assert len(xs) > 0", ["asks only that len(xs) > 0"]),
    ("assert len(xs) >= 1", ["asks only that len(xs) >= 1"]),
    ("assert len(xs)", ["asks only that len(xs)"]),
    ("assert True", ["asserts a true constant"]),
    ("assert a >= b", []), ("assert f(x) == f(y)", []), ("assert len(xs) == 3", []),
    ("assert len(xs) > 0 and xs[0] == 1", []), ("assert len(xs) >= 2", []),
    ("assert a < a", []),  # never holds: it fails, which is what is asked
])
def test_the_check_finds_what_it_should(source: str, found: list[str]) -> None:
    assert [why for *_, why in hits(source, "t.py")] == found


def test_no_test_asserts_what_cannot_fail() -> None:
    found = [h for path in sorted(TESTS.glob("*.py"))
             for h in hits(path.read_text(encoding="utf-8"), path.name)]
    assert sorted(TESTS.glob("*.py")), "no test files found"
    left = [f"{name}:{line}: {why}" for name, line, test, why in found
            if (name, test) not in ALLOWED]
    assert not left, "\n".join(left)
    stale = set(ALLOWED) - {(name, test) for name, _, test, _ in found}
    assert not stale, f"allowed hits that are no longer there: {sorted(stale)}"
