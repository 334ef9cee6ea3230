"""The node agent without Reveal's extras (what the image ships): collect, watch and an
analysis to JSON run with no report or fleet package importable; a command that needs one
says which extra brings it, in one line, before any work."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECORDING = ROOT / "bench" / "recordings" / "distributed_cpu_contention.tar.xz"
#: the top-level modules of the extras' distributions (pyproject.toml), none importable here
EXTRAS_MODULES = ("matplotlib", "bokeh", "distributed", "dask", "pandas")

# runs reveal's CLI with the extras' modules unimportable (as where they are not installed:
# a library that tries one goes on without it), then says which libraries it loaded
AGENT = """
import json, sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
from reveal.cli import main
rc = main(sys.argv[1:])
loaded = sorted(m for m in ("pyarrow", "sklearn") if m in sys.modules)
print(json.dumps({{"rc": rc, "loaded": loaded}}), file=sys.stderr)
"""


def _agent(*args: str, timeout: float = 300) -> tuple[int, str, str, list[str]]:
    done = subprocess.run([sys.executable, "-c", AGENT.format(blocked=EXTRAS_MODULES), *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "{}"
    status = json.loads(last) if last.startswith("{") else {"rc": done.returncode}
    return int(status.get("rc", done.returncode)), done.stdout, done.stderr, \
        list(status.get("loaded", []))


def test_the_extras_message_names_the_extra() -> None:
    from reveal.cli import needs_package

    assert "pip install 'reveal[report]'" in needs_package("matplotlib")
    assert "pip install 'reveal[fleet]'" in needs_package("distributed")
    assert "pip install scikit-learn" in needs_package("scikit-learn")


def test_the_extras_named_in_errors_are_those_of_pyproject() -> None:
    """Every package the errors send to an extra is in that extra, and none of the node
    agent's own dependencies is sent to one."""
    import re
    import tomllib

    from reveal.errors import EXTRA_OF

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs: list[str]) -> set[str]:
        return {re.split(r"[<>=\[; ]", spec, maxsplit=1)[0].lower() for spec in specs}

    extras = {extra: names(specs) for extra, specs in project["optional-dependencies"].items()}
    core = names(project["dependencies"])
    for package, extra in EXTRA_OF.items():
        assert package not in core
        # dask comes with distributed (the fleet extra's Dask scheduler and workers)
        assert package in extras[extra] or (package, extra) == ("dask", "fleet"), package
    assert set(EXTRAS_MODULES) <= set(EXTRA_OF)


def test_collect_and_an_analysis_to_json_need_no_extra(tmp_path: Path) -> None:
    if not RECORDING.is_file():
        pytest.fail(f"{RECORDING} is part of the repository and missing")
    with tarfile.open(RECORDING) as tar:
        tar.extractall(tmp_path / "rec")  # the project's own file
    runs = tmp_path / "rec" / "runs" / "distributed"
    out = tmp_path / "report.json"
    rc, _stdout, stderr, loaded = _agent("analyze", str(runs / "run1"), "--baseline",
                                         str(runs / "baseline1"), "--format", "none",
                                         "--json", str(out), "--quiet")
    assert rc == 0, stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["summary"]["anomalous_windows"] > 0 and "sklearn" in loaded

    rc, _stdout, stderr, _ = _agent("collect", "--duration", "1", "--quiet", "--out",
                                    str(tmp_path / "rec1"))
    assert rc == 0, stderr[-2000:]
    assert any((tmp_path / "rec1").rglob("*.parquet"))
    rc, stdout, stderr, _ = _agent("watch", "--help")
    assert rc == 0 and "--learn" in stdout


def test_a_command_needing_an_extra_says_which_before_any_work(tmp_path: Path) -> None:
    rc, _stdout, stderr, _ = _agent("analyze", str(tmp_path / "nothing"), "--baseline",
                                    str(tmp_path / "nothing"), "--html",
                                    str(tmp_path / "r.html"), timeout=60)
    assert rc == 2
    # one line, the error: no progress line, so no analysis began (and the run's absence
    # is not what it complains of)
    lines = [line for line in stderr.splitlines() if line.startswith("reveal analyze:")]
    assert len(lines) == 1 and "pip install 'reveal[report]'" in lines[0], stderr
    rc, _stdout, stderr, _ = _agent("report", str(tmp_path / "nothing.json"), "--html",
                                    str(tmp_path / "r.html"), timeout=60)
    assert rc == 2 and "pip install 'reveal[report]'" in stderr
    table = tmp_path / "host.csv"
    table.write_text("timestamp,cpu.user\n0,1\n1,2\n")
    rc, _stdout, stderr, _ = _agent("analyze", str(table), "--baseline", str(table),
                                    timeout=60)
    assert rc == 2 and "pip install 'reveal[pandas]'" in stderr
