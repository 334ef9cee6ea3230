"""Hear directories gain or lose entries (inotify), so a probe asks for a refresh at once
instead of waiting for the periodic one.

A cgroup made for a new container, a namespace bind-mounted by ``ip netns add`` or a
container runtime: each is a directory entry created somewhere the probe already knows. One
inotify descriptor per probe watches those directories for ``IN_CREATE``, ``IN_DELETE`` and
moves; :meth:`DirWatch.changed` drains the queued events without blocking (one ``read``
system call a second while nothing happens) and says whether any came. The kernel drops a
watch by itself when its directory is removed. Where inotify is refused (another OS, the
per-user watch limit reached) the probe keeps its periodic refresh alone, which is what it
had before: nothing is lost, arrivals wait for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys

IN_MODIFY = 0x00000002
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000  # the watch was removed (its directory went)
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
#: what counts as a change of a watched directory's entries
ENTRY_EVENTS = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO

_libc: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        if not name:
            return None
        try:
            lib = ctypes.CDLL(name, use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


class DirWatch:
    """Watch a changing set of directories for entries created, deleted or moved.

    ``supported`` is False where inotify cannot be had (then :meth:`changed` is always
    False); ``unwatched`` counts directories a watch was refused for (the per-user limit,
    ``fs.inotify.max_user_watches``), ``reason`` says why once.
    """

    def __init__(self, mask: int = ENTRY_EVENTS) -> None:
        self.mask = mask | IN_ONLYDIR
        self.reason = ""
        self.unwatched = 0
        self._wd: dict[str, int] = {}  # path → watch descriptor
        self._fd = -1
        lib = _lib()
        if lib is None:
            self.reason = "inotify: no C library"
            return
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            self.reason = f"inotify: {os.strerror(ctypes.get_errno())}"
            return
        self._fd = fd

    @property
    def supported(self) -> bool:
        return self._fd >= 0

    @property
    def watching(self) -> int:
        return len(self._wd)

    def watch(self, paths: set[str] | list[str]) -> None:
        """Watch exactly ``paths`` from now on (new ones added, the others dropped)."""
        if self._fd < 0:
            return
        lib = _lib()
        assert lib is not None
        wanted = set(paths)
        for path in [p for p in self._wd if p not in wanted]:
            lib.inotify_rm_watch(self._fd, self._wd.pop(path))  # EINVAL when already gone
        refused = 0
        for path in wanted - self._wd.keys():
            wd = lib.inotify_add_watch(self._fd, os.fsencode(path), self.mask)
            if wd >= 0:
                self._wd[path] = wd
                continue
            code = ctypes.get_errno()
            if code == errno.ENOSPC:
                refused += 1
                self.reason = ("inotify: the watch limit (fs.inotify.max_user_watches) is "
                               "reached: some directories are only re-read at each refresh")
            # ENOENT/ENOTDIR: gone meanwhile; EACCES: unreadable (not read either)
        self.unwatched = refused

    def changed(self) -> bool:
        """Whether an entry of a watched directory was created, deleted or moved since the
        last call (events queued meanwhile are all consumed)."""
        if self._fd < 0:
            return False
        seen = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return seen
            except OSError:
                return seen
            if not data:
                return seen
            at = 0
            while at + 16 <= len(data):
                wd = int.from_bytes(data[at:at + 4], sys.byteorder, signed=True)
                mask = int.from_bytes(data[at + 4:at + 8], sys.byteorder)
                length = int.from_bytes(data[at + 12:at + 16], sys.byteorder)
                if mask & (self.mask | IN_Q_OVERFLOW) & ~IN_ONLYDIR:
                    seen = True
                if mask & IN_IGNORED:  # a directory made again at that path needs a new one
                    self._forget_wd(wd)
                at += 16 + length

    def _forget_wd(self, wd: int) -> None:
        for path, known in list(self._wd.items()):
            if known == wd:
                del self._wd[path]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._wd = {}
