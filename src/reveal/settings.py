"""Every setting in one tree, changed by dotted name: ``--set NAME=VALUE``.

The tree's root is the analysis (:class:`reveal.config.AnalyzeConfig`: ``window.*``,
``select.*``, ``detect.*``, ``refit.*`` and the top-level settings), whose values come
from a preset chosen by the data's sampling interval (:mod:`reveal.analysis.presets`); a
preset is a named set of overrides of it. Beside it, ``fleet.*`` holds the peer comparison
(:class:`reveal.fleet.config.FleetConfig`) and ``watch.*`` the live watch's own settings
(:class:`reveal.live.config.WatchConfig`). Every command that analyses takes ``--set``;
``reveal config --show`` prints the effective tree.

Values are read as JSON (``2``, ``true``, ``null``, ``["zscore","gmm"]``), else as text,
and must match the setting's kind (a number for a number, a list for a list).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from reveal.errors import InputError

#: the prefix of the fleet's settings in the tree
FLEET = "fleet"
#: the prefix of the watch's own settings in the tree (``reveal watch``)
WATCH = "watch"

SET_HELP = ("change one setting by dotted name, e.g. detect.persistence_s=2 (repeatable; "
            "values read as JSON; `reveal config --show` lists every setting)")


def add_set_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--set NAME=VALUE`` (repeatable), collected in ``args.settings``."""
    parser.add_argument("--set", dest="settings", action="append", default=None,
                        metavar="NAME=VALUE", help=SET_HELP + (f"; {what}" if what else ""))


def parse_sets(items: Sequence[str] | None) -> dict[str, Any]:
    """``NAME=VALUE`` items as a dict by dotted name (lists become tuples); a malformed
    item is an :class:`InputError`. Later items win."""
    out: dict[str, Any] = {}
    for item in items or ():
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise InputError(f"--set takes NAME=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        out[name] = tuple(value) if isinstance(value, list) else value
    return out


def set_arguments(settings: Mapping[str, Any] | None) -> list[str]:
    """``settings`` as the command-line arguments that give them (``--set NAME=JSON``)."""
    return [arg for name, value in (settings or {}).items()
            for arg in ("--set", f"{name}={shown(value)}")]


def split_branch(settings: Mapping[str, Any],
                 branch: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` as (the others, those of ``branch`` without their ``branch.`` prefix)."""
    others, mine = {}, {}
    for name, value in settings.items():
        head, _, rest = name.partition(".")
        if head == branch and rest:
            mine[rest] = value
        else:
            others[name] = value
    return others, mine


def split_fleet(settings: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``settings`` as (analysis settings, fleet settings without their ``fleet.`` prefix)."""
    return split_branch(settings, FLEET)


def _kind_error(current: Any, value: Any) -> str | None:
    """Why ``value`` cannot replace ``current`` (None: it can)."""
    if current is None or value is None:
        return None
    if isinstance(current, bool):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(current, int | float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else "a number"
    if isinstance(current, tuple):
        return None if isinstance(value, tuple | list) else 'a list, e.g. ["a","b"]'
    if isinstance(current, str):
        return None if isinstance(value, str) else "text"
    return None


def _coerced(current: Any, value: Any) -> Any:
    """``value`` in the kind of ``current`` (an integer where a float is kept as float)."""
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return tuple(value) if isinstance(value, list) else value


def replace_dotted(config: Any, overrides: Mapping[str, Any] | None,
                   what: str = "analysis", prefix: str = "") -> Any:
    """The frozen dataclass ``config`` with ``overrides`` applied by dotted name
    (``{"window.size_s": 5.0}``); an unknown name, or a value of the wrong kind, is an
    :class:`InputError` naming the setting (``prefix``: the names' place in the tree)."""
    if not overrides:
        return config
    nested: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            top[key] = value
    fields = {f.name for f in dataclasses.fields(config)}
    for key in [*top, *nested]:
        if key not in fields:
            rest = next(iter(nested[key])) if key in nested else ""
            raise InputError(f"unknown {what} setting {prefix}{key}"
                             f"{'.' + rest if rest else ''}")
    changes: dict[str, Any] = {}
    for key, value in top.items():
        current = getattr(config, key)
        if dataclasses.is_dataclass(current):
            raise InputError(f"{what} setting {prefix}{key} is a group: set one of its "
                             f"settings ({prefix}{key}.NAME=VALUE)")
        why = _kind_error(current, value)
        if why is not None:
            raise InputError(f"{what} setting {prefix}{key} takes {why}, got {value!r}")
        changes[key] = _coerced(current, value)
    for head, values in nested.items():
        part = getattr(config, head)
        if not dataclasses.is_dataclass(part):
            raise InputError(f"{what} setting {prefix}{head} has no part "
                             f"{next(iter(values))!r}")
        changes[head] = replace_dotted(part, values, what, f"{prefix}{head}.")
    return dataclasses.replace(config, **changes)


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Every setting of the dataclass ``config`` by dotted name, in field order."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        name = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def shown(value: Any) -> str:
    """A setting's value as ``--set`` takes it (JSON)."""
    return json.dumps(list(value) if isinstance(value, tuple) else value)
