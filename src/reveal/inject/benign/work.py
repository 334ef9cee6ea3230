"""The work of several benign activities, as a child process (stdlib only, run by path).

    python work.py checkpoint FILE BYTES CHUNK     write BYTES in CHUNK-byte writes, fsync
    python work.py epoch DIR FILES BYTES           write FILES files (BYTES in all), evict
                                                   them from the page cache, read them back
    python work.py logrotate FILE BYTES            append BYTES of log lines, then rotate:
                                                   FILE → FILE.1 → gzip, new empty FILE
    python work.py burst COUNT SPAN_S              COUNT short processes within SPAN_S s
    python work.py duty BUSY_S PERIOD_S            busy BUSY_S of every PERIOD_S, until killed
    python work.py wheel DIR NAME                  write a tiny pure-Python wheel into DIR

Sizes are bytes, times seconds. Nothing here touches anything outside its arguments.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

_BLOCK = os.urandom(1 << 20)  # checkpoint/data bytes: incompressible, cheap to reuse


def _write(path: Path, size: int, chunk: int) -> None:
    data = memoryview(_BLOCK * max(1, -(-chunk // len(_BLOCK))))[:chunk]
    with open(path, "wb") as handle:
        written = 0
        while written < size:
            n = min(chunk, size - written)
            handle.write(data[:n])
            written += n
        handle.flush()
        os.fsync(handle.fileno())


def checkpoint(path: str, size: str, chunk: str) -> None:
    """A training job's checkpoint: bounded chunks, then one fsync."""
    _write(Path(path), int(size), int(chunk))


def epoch(directory: str, files: str, size: str) -> None:
    """A data loader's epoch boundary: the shard files are (re)staged, dropped from the
    page cache, then read through in order, as a new epoch's first pass reads them."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    count, total = int(files), int(size)
    paths = [root / f"shard-{i:04d}.bin" for i in range(count)]
    for path in paths:
        _write(path, total // count, 1 << 20)
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    digest = hashlib.blake2b(digest_size=8)
    for path in paths:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block[:64])


def logrotate(path: str, size: str) -> None:
    """A service's log filling up, then logrotate's copy: rename, gzip, new empty file."""
    log = Path(path)
    line = (b"2026-11-28T10:32:05.123456+00:00 host app[4242]: INFO request handled "
            b"method=GET path=/api/v1/items status=200 bytes=5123 duration_ms=12.7\n")
    lines = max(1, int(size) // len(line))
    with open(log, "ab") as handle:
        for start in range(0, lines, 256):  # a logger's buffered writes, 256 lines each
            handle.write(line * min(256, lines - start))
            handle.flush()
    rotated = log.with_name(log.name + ".1")
    os.replace(log, rotated)
    log.touch()
    subprocess.run(["gzip", "-f", str(rotated)], check=True)


def burst(count: str, span: str) -> None:
    """A cron minute: COUNT short processes (true, date, a shell), evenly over SPAN s."""
    commands = (["true"], ["date"], ["sh", "-c", "echo job >/dev/null"])
    n, gap = int(count), float(span) / max(int(count), 1)
    for i in range(n):
        subprocess.run(commands[i % len(commands)], stdout=subprocess.DEVNULL, check=False)
        time.sleep(gap)


def duty(busy: str, period: str) -> None:
    """One process busy ``busy`` of every ``period`` seconds, until it is stopped."""
    busy_s, period_s = float(busy), float(period)
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < busy_s:
            pass
        time.sleep(max(0.0, period_s - (time.perf_counter() - start)))


def wheel(directory: str, name: str) -> None:
    """A tiny, valid pure-Python wheel ``NAME-1.0-py3-none-any.whl`` (PEP 427)."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": "VALUE = 1\n",
        f"{name}/util.py": "def double(x):\n    return 2 * x\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": ("Wheel-Version: 1.0\nGenerator: reveal\nRoot-Is-Purelib: true\n"
                          "Tag: py3-none-any\n"),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    out = Path(directory) / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, text in files.items():
            archive.writestr(path, text)


TASKS = {"checkpoint": checkpoint, "epoch": epoch, "logrotate": logrotate, "burst": burst,
         "duty": duty, "wheel": wheel}


if __name__ == "__main__":
    TASKS[sys.argv[1]](*sys.argv[2:])
