"""Every command's --help: defaults shown where they say something, never twice."""

from __future__ import annotations

import argparse

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
