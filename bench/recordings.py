"""Recorded suites kept beside the figures they gave: packed, opened, named.

A figure in ``docs/`` that a recorded suite gave can be re-scored with today's code only
while the recording exists. Suites are kept under ``bench/recordings/`` as one xz-compressed
tar each (``NAME.tar.xz``, a few MB: the runs' Parquet segments and metadata, their
``events.jsonl``, the suite's ``validate.json``; the collectors' logs left out), and a
result made from one names it by its path from the repository's root (``recordings`` in
the result's JSON), so ``bench/rescore.py`` can score it again.

    python bench/recordings.py pack DIR bench/recordings/NAME.tar.xz
    python bench/recordings.py list
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT = ROOT / "bench" / "recordings"
SUFFIX = ".tar.xz"
#: files of a recorded suite a re-scoring does not read
LEFT_OUT = (".log",)


def is_archive(path: Path) -> bool:
    """Whether ``path`` names a packed suite."""
    return path.name.endswith(SUFFIX)


def name_of(path: Path) -> str:
    """``path`` as a result names it: from the repository's root where it lies inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(path)


def pack(directory: Path, archive: Path) -> Path:
    """Pack the recorded suite ``directory`` (it holds ``runs/``) into ``archive``."""
    if not (directory / "runs").is_dir():
        raise SystemExit(f"{directory} holds no recorded suite (no runs/ in it)")
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=9) as tar:
        for path in sorted(directory.rglob("*")):
            if path.is_file() and not path.name.endswith(LEFT_OUT):
                tar.add(path, arcname=str(path.relative_to(directory)), recursive=False)
    tmp.replace(archive)
    return archive


def _extract(tar: tarfile.TarFile, where: Path) -> None:
    """Unpack ``tar`` into ``where``: plain files and directories inside it only (the
    ``data`` filter where this Python has it, the same checks by hand where it does not)."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(where, filter="data")
        return
    for member in tar.getmembers():
        target = (where / member.name).resolve()
        if not (member.isfile() or member.isdir()) or not target.is_relative_to(where.resolve()):
            raise SystemExit(f"refusing {member.name!r} in the recording: not a plain file "
                             "inside it")
    tar.extractall(where)


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    """The recorded suite at ``path`` as a directory: itself, or an archive unpacked into a
    temporary directory for the life of the context."""
    if not is_archive(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="reveal-recording-") as where, \
            tarfile.open(path, "r:xz") as tar:
        _extract(tar, Path(where))
        yield Path(where)


def kept_parser(description: str | None) -> argparse.ArgumentParser:
    """The command line of a benchmark that scores kept live scenarios: the scenarios
    (archives or directories) and ``--result``, the JSON to write."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kept", type=Path, nargs="+",
                        help="kept live scenarios (archives or directories)")
    parser.add_argument("--result", type=Path, required=True, help="the JSON to write")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    packing = sub.add_parser("pack", help="pack a recorded suite into one archive")
    packing.add_argument("directory", type=Path)
    packing.add_argument("archive", type=Path)
    sub.add_parser("list", help="the kept recordings and their sizes")
    args = parser.parse_args(argv)
    if args.command == "pack":
        done = pack(args.directory, args.archive)
        print(f"{name_of(done)}: {done.stat().st_size / 2**20:.1f} MiB")
        return 0
    for archive in sorted(KEPT.glob(f"*{SUFFIX}")):
        print(f"{name_of(archive)}: {archive.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
