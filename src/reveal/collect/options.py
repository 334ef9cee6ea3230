"""Probe options from the command line (``--probe-option NAME.KEY=VALUE``) and from a TOML
configuration file (``--config FILE``), checked against what each probe declares.

A configuration file may hold a ``[collect]`` table (the ``reveal collect`` options by their
long names, ``-`` or ``_`` alike: ``interval = 0.1``, ``probes = ["cpu", "memory"]``) and one
``[probes.NAME]`` table per probe (``[probes.gpu] pcie_throughput = false``). Options given
on the command line win over the file.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reveal.collect.probe import Probe
from reveal.errors import InputError

ProbeOptions = dict[str, dict[str, Any]]
"""Probe name → {option key: value}."""

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def parse_value(text: str) -> Any:
    """A command-line option value as the type it reads as: ``true``/``false`` (also
    yes/no/on/off), an integer, a decimal, a comma-separated list, else the text itself."""
    word = text.strip()
    if word.lower() in _TRUE:
        return True
    if word.lower() in _FALSE:
        return False
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    if "," in word:
        return [part.strip() for part in word.split(",") if part.strip()]
    return word


def parse_probe_option(text: str) -> tuple[str, str, Any]:
    """``NAME.KEY=VALUE`` → ``(NAME, KEY, value)``; InputError when it is not that shape."""
    target, sep, value = text.partition("=")
    name, dot, key = target.strip().partition(".")
    if not sep or not dot or not name or not key:
        raise InputError(f"--probe-option wants PROBE.KEY=VALUE (e.g. gpu.pcie_throughput="
                         f"false), got {text!r}")
    return name, key.strip(), parse_value(value)


def options_from_args(items: Iterable[str]) -> ProbeOptions:
    """Every ``--probe-option`` given, by probe."""
    options: ProbeOptions = {}
    for item in items:
        name, key, value = parse_probe_option(item)
        options.setdefault(name, {})[key] = value
    return options


def load_config(path: Path) -> dict[str, Any]:
    """The TOML file at ``path`` as ``{"collect": {...}, "probes": {NAME: {...}}}``;
    InputError (one line) when it cannot be read or parsed, or holds other tables."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise InputError(f"cannot read the configuration ({exc.strerror})", str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", str(path)) from None
    unknown = sorted(set(data) - {"collect", "probes"})
    if unknown:
        raise InputError(f"unknown table(s) {', '.join(map(repr, unknown))}; a configuration "
                         f"holds [collect] and [probes.NAME]", str(path))
    probes = data.get("probes", {})
    if not isinstance(probes, dict) or not all(isinstance(v, dict) for v in probes.values()):
        raise InputError("[probes] must hold one table per probe: [probes.NAME]", str(path))
    collect = data.get("collect", {})
    if not isinstance(collect, dict):
        raise InputError("[collect] must be a table", str(path))
    return {"collect": {k.replace("-", "_"): v for k, v in collect.items()},
            "probes": {name: dict(table) for name, table in probes.items()}}


def merge(base: ProbeOptions, override: ProbeOptions) -> ProbeOptions:
    """``base`` updated, probe by probe, with ``override``."""
    merged = {name: dict(values) for name, values in base.items()}
    for name, values in override.items():
        merged.setdefault(name, {}).update(values)
    return merged


def check_probe_options(options: Mapping[str, Mapping[str, Any]],
                        known: Mapping[str, type[Probe]]) -> None:
    """InputError naming the first unknown probe or option key, with what is known."""
    for name, values in options.items():
        cls = known.get(name)
        if cls is None:
            raise InputError(f"option for unknown probe {name!r}; known: {', '.join(known)}")
        allowed = probe_options_help(cls)
        for key in values:
            if key not in allowed:
                listed = ", ".join(sorted(allowed)) or "none"
                raise InputError(f"probe {name} has no option {key!r}; its options: {listed} "
                                 f"(`reveal probes --options`)")


def probe_options_help(cls: type[Probe]) -> dict[str, str]:
    """The options ``cls`` reads: its own ``options_help`` and those of its bases."""
    merged: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        merged.update(getattr(klass, "options_help", {}) or {})
    return merged


def as_list(value: Any) -> list[str]:
    """A list option given as a list, or as one text (one item, or comma-separated)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(item) for item in value]
