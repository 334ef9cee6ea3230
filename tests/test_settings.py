"""Settings in one tree: ``--set NAME=VALUE`` on every command that analyses, checked by
name and kind before any work, and ``reveal config --show`` printing the effective tree."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from reveal.analysis.presets import MINUTE, TELEMETRY, with_overrides
from reveal.cli import main
from reveal.errors import InputError
from reveal.fleet.config import FleetConfig
from reveal.live.config import WatchConfig
from reveal.live.fitproc import fit_in_child
from reveal.live.keeper import (
    RECOMMENDED_LEARN_S,
    learn_settings,
    left_out_text,
    left_out_windows,
)
from reveal.model import Reveal
from reveal.settings import (
    flatten,
    parse_sets,
    replace_dotted,
    set_arguments,
    split_fleet,
)
from reveal.store.run_writer import write_run
from synthetic import ar1_host


def test_values_are_json_else_text_and_lists_become_tuples():
    got = parse_sets(["detect.persistence_s=2", "detect.detectors=[\"zscore\",\"gmm\"]",
                      "preset=custom", "refit.every_s=null", "detect.significance=false"])
    assert got == {"detect.persistence_s": 2, "detect.detectors": ("zscore", "gmm"),
                   "preset": "custom", "refit.every_s": None, "detect.significance": False}
    assert parse_sets(None) == {}
    with pytest.raises(InputError, match="NAME=VALUE"):
        parse_sets(["detect.persistence_s"])
    # the arguments that give settings read back as the same settings
    args = set_arguments(got)
    assert parse_sets(args[1::2]) == got and args[0::2] == ["--set"] * len(got)


def test_names_and_kinds_are_checked():
    config = with_overrides(TELEMETRY, {"detect.persistence_s": 2, "window.size_rows": 10,
                                        "detect.detectors": ["zscore"]})
    assert config.detect.persistence_s == 2.0 and isinstance(config.detect.persistence_s, float)
    assert config.window.size_rows == 10 and config.detect.detectors == ("zscore",)
    for bad, words in (({"detect.nope": 1}, "unknown analysis setting detect.nope"),
                       ({"nope": 1}, "unknown analysis setting nope"),
                       ({"detect": 1}, "is a group"),
                       ({"detect.persistence_s": "abc"}, "takes a number"),
                       ({"detect.significance": 1}, "true or false"),
                       ({"detect.detectors": "zscore"}, "a list"),
                       ({"window.size_s.x": 1}, "has no part")):
        with pytest.raises(InputError, match=words):
            with_overrides(TELEMETRY, bad)


def test_the_fleet_has_its_branch_of_the_tree():
    analysis, fleet = split_fleet({"fleet.min_score": 12, "fleet.window.size_s": 5,
                                   "detect.persistence_s": 2})
    assert analysis == {"detect.persistence_s": 2}
    config = replace_dotted(FleetConfig(), fleet, "fleet", "fleet.")
    assert config.min_score == 12.0 and config.window.size_s == 5.0
    with pytest.raises(InputError, match=r"unknown fleet setting fleet\.min_scor"):
        replace_dotted(FleetConfig(), {"min_scor": 1}, "fleet", "fleet.")
    names = flatten(FleetConfig())
    assert "window.size_s" in names and "min_score" in names


def test_config_show_prints_the_effective_tree(capsys):
    assert main(["config", "--show", "--set", "detect.persistence_s=2",
                 "--set", "fleet.min_score=12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("# analysis: preset telemetry")
    assert "detect.persistence_s = 2.0  # --set" in lines
    assert "fleet.min_score = 12.0  # --set" in lines
    assert f"detect.threshold_quantile = {TELEMETRY.detect.threshold_quantile}" in lines
    assert f"watch.learn_floor_s = {RECOMMENDED_LEARN_S}" in lines
    # every setting of the three branches, once
    names = [x.split(" = ")[0] for x in lines if not x.startswith("#")]
    assert len(names) == len(set(names)) == (len(flatten(TELEMETRY))
                                             + len(flatten(FleetConfig()))
                                             + len(flatten(WatchConfig())))
    assert main(["config", "--set", "watch.learn_floor_s=15"]) == 0
    assert "watch.learn_floor_s = 15.0  # --set" in capsys.readouterr().out.splitlines()
    assert main(["config", "--set", "watch.learn_floor_s=0"]) == 2
    assert "watch.learn_floor_s takes a number of seconds > 0" in capsys.readouterr().err
    # the preset chosen by the sampling interval, as the analysis chooses it
    assert main(["config", "--interval", "60", "--json"]) == 0
    tree = json.loads(capsys.readouterr().out)
    assert tree["preset"] == "minute" and tree["window.size_rows"] == MINUTE.window.size_rows
    assert main(["config", "--set", "detect.nope=1"]) == 2
    assert "unknown analysis setting detect.nope" in capsys.readouterr().err
    # what a watch learns with: its own defaults marked, --set still over them
    assert "baseline_trim_mads = null" in lines
    assert main(["config", "--watch"]) == 0
    assert "baseline_trim_mads = 12.0  # watch" in capsys.readouterr().out.splitlines()
    assert main(["config", "--watch", "--set", "baseline_trim_mads=20"]) == 0
    assert "baseline_trim_mads = 20.0  # --set" in capsys.readouterr().out.splitlines()
    assert main(["config", "--watch", "--set", "baseline_trim_mads=lots"]) == 2
    assert "baseline_trim_mads takes a number of robust sigmas" in capsys.readouterr().err


def test_analyze_applies_set_after_its_options(tmp_path, capsys):
    base = write_run(ar1_host(300, seed=1), tmp_path / "base")
    run = write_run(ar1_host(60, seed=3, fault=(20, 40)), tmp_path / "run")
    out = tmp_path / "r.json"
    assert main(["analyze", str(run), "--baseline", str(base), "--json", str(out),
                 "--format", "none", "--quiet", "--persistence", "1",
                 "--set", "detect.persistence_s=0"]) == 0
    decision = json.loads(out.read_text())["decision"]
    assert decision["persistence_s"] == 0.0 and decision["persistence_windows"] == 1


@pytest.mark.parametrize("command", [
    ["analyze", "RUN"], ["validate", "--reanalyse", "DIR"], ["demo"], ["watch"],
    ["profile", "--", "true"], ["evaluate", "--machines", "none"], ["fleet", "RUN"],
])
def test_every_command_that_analyses_refuses_an_unknown_setting_first(command, tmp_path,
                                                                      capsys):
    argv = [str(tmp_path) if a in ("RUN", "DIR") else a for a in command]
    if command[0] in ("demo", "validate"):
        argv += ["--out", str(tmp_path / "out")]
    if command[0] == "watch":
        argv += ["--state", str(tmp_path / "state"), "--listen", "none"]
    name = "fleet.nope" if command[0] == "fleet" else "detect.nope"
    assert main([argv[0], "--set", f"{name}=1", *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert f"setting {name}" in err and "Traceback" not in err
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists()


def test_the_watch_fits_its_model_with_its_settings(tmp_path):
    tel = ar1_host(120, seed=4)
    run = write_run(tel, tmp_path / "run")
    start, end = int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1
    path = fit_in_child(run, start, end, tmp_path / "model.reveal",
                        settings={"detect.detectors": ("zscore", "gmm"),
                                  "detect.persistence_s": 2})
    config = Reveal.load(path).fitted_.config
    assert config.detect.detectors == ("zscore", "gmm") and config.detect.persistence_s == 2.0
    with pytest.raises(InputError, match=r"detect\.nope"):
        fit_in_child(run, start, end, tmp_path / "other.reveal", settings={"detect.nope": 1})


def test_the_watch_leaves_a_burst_in_its_learn_out_of_the_fit(tmp_path):
    """A watch learns on whatever the host did: an 8 s burst inside the span is left out
    of its fit (``LEARN_SETTINGS``), as it is not from a baseline given to ``analyze``."""
    tel = ar1_host(300, seed=4, fault=(150.0, 158.0))
    run = write_run(tel, tmp_path / "run")
    start, end = int(tel.timestamps_ns[0]), int(tel.timestamps_ns[-1]) + 1
    learned = Reveal.load(fit_in_child(run, start, end, tmp_path / "watch.reveal",
                                       settings=learn_settings(None)))
    assert learned.fitted_.config.baseline_trim_mads == 12.0
    assert learned.fitted_.ensemble.baseline_trimmed_ >= 8  # the burst's windows
    plain = Reveal().fit(tel)
    assert plain.fitted_.ensemble.baseline_trimmed_ == 0 and left_out_text(plain) == ""
    # the watch says which seconds of its learn it left out: the burst's among them
    text = left_out_text(learned)
    n = learned.fitted_.ensemble.baseline_trimmed_
    assert text.startswith(f"; {n} of {learned.fitted_.baseline_windows} windows")
    spans = re.findall(r"(\d+)(?:–(\d+))? s", text.split("(at ", 1)[1])
    assert any(int(a) <= 155 and int(b or a) >= 150 for a, b in spans), text
    assert left_out_windows(learned).size == n and left_out_windows(plain).size == 0
    mine = learn_settings({"baseline_trim_mads": None})  # --set goes over the default
    assert mine == {"baseline_trim_mads": None}


def test_watch_help_offers_set():
    text = subprocess.run([sys.executable, "-m", "reveal.cli", "watch", "--help"],
                          capture_output=True, text=True, check=True).stdout
    assert "--set NAME=VALUE" in text


def test_a_watch_that_loads_a_model_learned_otherwise_says_set_waits(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    learned = learn_settings({"detect.persistence_s": 2.0})  # as a watch learns it
    Reveal(overrides=learned).fit(ar1_host(120, seed=4)).save(state / "model.reveal")

    def first_lines(*extra: str) -> str:
        proc = subprocess.Popen([sys.executable, "-m", "reveal.cli", "watch", "--state",
                                 str(state), "--listen", "none", *extra],
                                stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if "model loaded from" in line:
                    break
            return "".join(lines)
        finally:
            proc.terminate()
            proc.wait(60)

    other = first_lines("--set", "detect.persistence_s=3")
    assert f"learned with settings {learned}" in other
    assert "'detect.persistence_s': 3" in other
    assert "apply at the next learn (--relearn" in other
    same = first_lines("--set", "detect.persistence_s=2")
    assert "model loaded from" in same and "learned with settings" not in same
