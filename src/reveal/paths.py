"""Output paths checked before any long work starts.

A command that records for minutes or analyses a long run first makes sure it can write
what it will produce: ``check_writable_file`` for a file it writes (its directory must
exist), ``check_writable_dir`` for a directory it writes into or creates (with its missing
parents). Both try for real, creating and removing a hidden scratch file, since as root the
permission bits say nothing about a read-only mount, /proc or a full disk. A failed check
raises :class:`reveal.errors.InputError` with a one-line message naming the path.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from reveal.errors import InputError

_SCRATCH_PREFIX = ".reveal-write-check-"


def _try_create_in(directory: Path, target: Path) -> None:
    """Create and remove a scratch file in ``directory``; refuse ``target`` when that fails
    or when the file system holding it has no free space left."""
    try:
        fd, scratch = tempfile.mkstemp(prefix=_SCRATCH_PREFIX, dir=directory)
    except OSError as exc:
        raise InputError(f"cannot write in {directory} ({exc.strerror or exc})",
                         str(target)) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(scratch)
    _check_space(directory, target)


def _check_space(directory: Path, target: Path) -> None:
    try:
        fs = os.statvfs(directory)
    except OSError:
        return
    free = fs.f_bfree if os.geteuid() == 0 else fs.f_bavail
    if fs.f_blocks > 0 and free == 0:
        raise InputError(f"no space left on the file system holding {directory}", str(target))


def _nearest_existing(path: Path) -> Path:
    current = path
    while not os.path.lexists(current) and current.parent != current:
        current = current.parent
    return current


def check_writable_dir(path: str | Path) -> Path:
    """Check that ``path`` is a directory that can be written into, or one that can be
    created (the nearest existing ancestor is a writable directory). Creates nothing.
    Returns ``path`` as a Path."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a directory", str(path))
    existing = _nearest_existing(path.absolute())
    if not existing.is_dir():
        raise InputError(f"cannot create it: {existing} is not a directory", str(path))
    _try_create_in(existing, path)
    return path


def check_writable_file(path: str | Path) -> Path:
    """Check that the file ``path`` can be written: its directory exists and takes a new
    file, and an existing file opens for writing (it is not changed). Returns a Path."""
    path = Path(path)
    if path.is_dir():
        raise InputError("is a directory, not a file", str(path))
    parent = path.absolute().parent
    if not parent.is_dir():
        existing = _nearest_existing(parent)
        if existing.is_dir():
            raise InputError(f"no such directory: {parent}", str(path))
        raise InputError(f"cannot create it: {existing} is not a directory", str(path))
    if not path.exists():
        _try_create_in(parent, path)
        return path
    regular = stat.S_ISREG(path.stat().st_mode)
    # an existing file is written in place: opening it (without truncating) is the check;
    # a device such as /dev/null or /dev/stdout likewise
    flags = os.O_WRONLY | (os.O_APPEND if regular else os.O_NONBLOCK)
    try:
        os.close(os.open(path, flags))
    except OSError as exc:
        raise InputError(f"cannot write it ({exc.strerror or exc})", str(path)) from None
    if regular:
        _check_space(parent, path)
    return path
