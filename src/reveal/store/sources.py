"""Open telemetry from any supported source by one spec string.

- a run directory (has ``meta.json``): :func:`reveal.store.run_reader.read_run`;
- ``*.csv`` / ``*.csv.gz``: :func:`reveal.store.csv_source.read_csv`;
- ``smd:MACHINE[:train|test]`` / ``asd:MACHINE[:train|test]``: the labelled data sets
  (default part ``test``); their ``train`` part is the natural baseline.
"""

from __future__ import annotations

from pathlib import Path

from reveal.errors import InputError
from reveal.frame import Telemetry
from reveal.store.csv_source import read_csv
from reveal.store.labelled import default_data_root, list_machines, load_machine
from reveal.store.run_reader import read_run

LABELLED = ("smd", "asd")


def parse_labelled(spec: str) -> tuple[str, str, str] | None:
    """``smd:machine-1-1[:part]`` → (dataset, machine, part), else None."""
    dataset, sep, rest = spec.partition(":")
    if not sep or dataset not in LABELLED:
        return None
    machine, _, part = rest.partition(":")
    part = part or "test"
    if part not in ("train", "test"):
        raise InputError(f"part must be 'train' or 'test', got {part!r}", spec)
    return dataset, machine, part


def open_source(spec: str | Path) -> Telemetry:
    """Telemetry from a run directory, a CSV file or a labelled-data spec."""
    text = str(spec)
    labelled = parse_labelled(text)
    if labelled is not None:
        dataset, machine, part = labelled
        root = default_data_root()
        if root is None:
            raise InputError("labelled data not found (set REVEAL_DATA to the data folder)",
                             text)
        if machine not in list_machines(root, dataset):
            raise InputError(f"no {dataset} machine named {machine!r}", text)
        loaded = load_machine(root, dataset, machine)
        tel = loaded.train if part == "train" else loaded.test
        tel.meta["path"] = text
        return tel
    path = Path(text)
    if path.is_dir():
        return read_run(path)
    if path.name.endswith((".csv", ".csv.gz")):
        return read_csv(path)
    if not path.exists():
        raise InputError("no such run directory or file", text)
    raise InputError("not a run directory, CSV file or smd:/asd: spec", text)


def default_baseline(spec: str | Path) -> str | None:
    """The natural baseline of a source: ``smd:M`` → ``smd:M:train``; else None."""
    labelled = parse_labelled(str(spec))
    if labelled is not None and labelled[2] == "test":
        return f"{labelled[0]}:{labelled[1]}:train"
    return None
