"""The SMD / ASD layout of labelled telemetry (see ../shared/data/README.md).

``DATASET/{train,test,test_label,interpretation_label}/MACHINE.txt.gz``: comma-separated
rows, one per minute (SMD) or five minutes (ASD); labels one 0/1 per test row;
interpretation lines ``start-end:d1,d2,...`` (0-based start, exclusive end, 1-based columns).
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reveal.catalog import source_entries
from reveal.errors import InputError
from reveal.frame import Telemetry

ROW_SECONDS = {"smd": 60.0, "asd": 300.0}
#: SMD's 38 columns in the dataset's order, as the catalog names them (``smd.NAME``).
SMD_COLUMNS: tuple[str, ...] = tuple(entry.name.removeprefix("smd.")
                                     for entry in source_entries("smd")
                                     if entry.name.startswith("smd."))


@dataclass
class Interpretation:
    """One labelled anomalous segment: rows ``[start, end)`` and 0-based responsible columns."""

    start: int
    end: int
    columns: list[int]


@dataclass
class LabelledMachine:
    dataset: str
    machine: str
    train: Telemetry
    test: Telemetry
    labels: np.ndarray  # int8, shape (len(test),)
    interpretation: list[Interpretation]


def default_data_root() -> Path | None:
    """``$REVEAL_DATA``, else the first ``shared/data`` found beside or above cwd / package."""
    env = os.environ.get("REVEAL_DATA")
    if env:
        return Path(env) if Path(env).is_dir() else None
    starts = [Path.cwd().resolve(), Path(__file__).resolve()]
    for start in starts:
        for parent in [start, *start.parents]:
            candidate = parent / "shared" / "data"
            if (candidate / "smd").is_dir() or (candidate / "asd").is_dir():
                return candidate
    return None


def list_machines(root: Path, dataset: str) -> list[str]:
    test_dir = root / dataset / "test"
    return sorted(p.name.removesuffix(".txt.gz").removesuffix(".txt")
                  for p in test_dir.glob("*.txt*"))


def _file(root: Path, dataset: str, part: str, machine: str) -> Path:
    for suffix in (".txt.gz", ".txt"):
        path = root / dataset / part / f"{machine}{suffix}"
        if path.is_file():
            return path
    raise InputError(f"no {part} file for {machine}", str(root / dataset / part))


def _load_matrix(path: Path) -> np.ndarray:
    try:
        data = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"unreadable data ({exc})", str(path)) from None
    if data.size == 0:
        raise InputError("file holds no rows", str(path))
    return data


def parse_interpretation(text: str, path: str = "") -> list[Interpretation]:
    segments = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        try:
            span, _, cols = line.partition(":")
            start, _, end = span.partition("-")
            columns = sorted({int(c) - 1 for c in cols.split(",") if c.strip()})
            segments.append(Interpretation(int(start), int(end), columns))
        except ValueError:
            raise InputError(f"line {lineno}: expected 'start-end:d1,d2,...', got {line!r}",
                             path) from None
    return segments


def _telemetry(data: np.ndarray, dataset: str, machine: str, part: str,
               first_row: int = 0) -> Telemetry:
    if dataset == "smd" and data.shape[1] == len(SMD_COLUMNS):
        channels = [f"smd.{name}" for name in SMD_COLUMNS]
    else:
        channels = [f"{dataset}.m{i + 1}" for i in range(data.shape[1])]
    step_ns = int(ROW_SECONDS.get(dataset, 60.0) * 1e9)
    timestamps = (np.arange(data.shape[0], dtype=np.int64) + first_row) * step_ns
    meta = {"interval_s": ROW_SECONDS.get(dataset, 60.0), "source": f"{dataset}/{part}",
            "dataset": dataset, "machine": machine}
    return Telemetry(machine, timestamps, data, channels, meta)


def load_machine(root: Path, dataset: str, machine: str) -> LabelledMachine:
    """Load one machine's train, test, labels and interpretation labels."""
    train = _load_matrix(_file(root, dataset, "train", machine))
    test = _load_matrix(_file(root, dataset, "test", machine))
    label_path = _file(root, dataset, "test_label", machine)
    labels = _load_matrix(label_path).ravel().astype(np.int8)
    if len(labels) != len(test):
        raise InputError(f"{len(labels)} labels for {len(test)} test rows", str(label_path))
    if train.shape[1] != test.shape[1]:
        raise InputError(f"train has {train.shape[1]} columns, test {test.shape[1]}",
                         str(root / dataset))
    try:
        interp_path = _file(root, dataset, "interpretation_label", machine)
        opener = gzip.open if interp_path.suffix == ".gz" else open
        with opener(interp_path, "rt", encoding="utf-8") as handle:
            interpretation = parse_interpretation(handle.read(), str(interp_path))
    except InputError:
        interpretation = []
    return LabelledMachine(
        dataset, machine,
        _telemetry(train, dataset, machine, "train"),
        _telemetry(test, dataset, machine, "test", first_row=len(train)),
        labels, interpretation,
    )
