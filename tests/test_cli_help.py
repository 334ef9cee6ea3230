"""Every command's --help: defaults shown where they say something, never twice."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from reveal.cli import build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub
                found.update({f"{name} {k}": v for k, v in _subparsers(sub).items()})
    return found


COMMANDS = _subparsers(build_parser())


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_shows_useful_defaults_once(name: str) -> None:
    text = COMMANDS[name].format_help()
    assert "(default: None)" not in text and "(default: False)" not in text
    for line in text.replace("\n", " ").split("(default")[1:]:
        assert "(default" not in line.split(")")[0]  # never two defaults in one option


def test_collect_help_states_interval_and_segment_defaults() -> None:
    text = " ".join(COMMANDS["collect"].format_help().split())
    assert "(default: 0.1)" in text and "(default: 300.0)" in text


def test_demo_help_says_what_running_it_again_does() -> None:
    text = " ".join(COMMANDS["demo"].format_help().split())
    assert "DIR-2, DIR-3" in text and "earlier one is kept" in text
    assert "--force replace the report already in DIR instead" in text


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_a_bad_number_of_seconds_is_named_in_plain_words(value: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["analyze", "run", "--persistence", value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--persistence: must be a number of seconds ≥ 0, got '{value}'" in err
    assert "invalid" not in err


def test_every_help_loads_no_command_work_and_each_command_loads_its_own() -> None:
    """Building the parser (``reveal --help``, any ``reveal CMD --help``) imports only the
    commands' arguments: no analysis, collector, report or third-party stack. Each command's
    work is a module of its own, loaded when it runs, with its imports at the top. (``reveal
    analyze --help`` alone looks up the detector registry, to list the detectors' names.)"""
    names = sorted(n for n in COMMANDS if " " not in n and n != "analyze")
    code = (
        "import sys\n"
        "from reveal.cli import build_parser\n"
        "parser = build_parser()\n"
        f"for name in {names!r}:\n"
        "    try:\n"
        "        parser.parse_args([name, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'pandas', 'sklearn', 'scipy', 'pyarrow', 'matplotlib', 'distributed'))\n"
        "work = sorted(m for m in sys.modules if m.startswith(('reveal.analysis.', "
        "'reveal.collect.', 'reveal.report.', 'reveal.live.', 'reveal.inject.', "
        "'reveal.fleet.', 'reveal.model')) or (m.startswith('reveal.commands.') "
        "and not m.startswith(('reveal.commands.parsers', 'reveal.commands._'))))\n"
        "work.remove('reveal.live.sinks')  # the alert sinks' registry: each adds its option\n"
        "print(repr((heavy[:5], work)), file=sys.stderr)\n"
        "assert not heavy and not work\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("usage: reveal") == len(names) == 13
    for name in [*names, "analyze"]:
        module = importlib.import_module(f"reveal.commands.{name}")
        assert callable(module.run), name
