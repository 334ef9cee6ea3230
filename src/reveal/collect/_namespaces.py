"""Network namespaces of this host: finding them, entering them, holding their files.

- :func:`scan` lists every network namespace: the unique ``/proc/PID/ns/net`` of every
  process (threads that entered another namespace on their own are not seen), plus those
  only a bind mount keeps alive (``ip netns add`` puts them under ``/run/netns``), with
  their names. The scan costs about 5 µs per process; a result is reused for a second, so
  two probes refreshing together scan once.
- A namespace is read through ``/proc/PID/net/*`` of one process inside it; one with no
  process is entered with ``setns`` (root, or CAP_SYS_ADMIN) on a short-lived thread of
  its own, which opens ``/proc/thread-self/net/*`` or a netlink socket there and leaves.
- Every file or socket opened that way holds a reference on the namespace: the kernel
  keeps a namespace (and its interfaces, so a veth peer on the host) alive while we hold
  one. So a namespace whose last process exited and whose bind mount went away is
  *released* at once by :meth:`NsFile.release`, which puts ``/dev/null`` on the same
  descriptor number (``dup2``): readers in C that still hold the number read nothing,
  fail their layout check and are NaN until the probe drops them at its next refresh.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reveal.collect._procfs import pread_all

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
#: Where Docker bind-mounts its containers' namespaces (watched for arrivals when present).
DOCKER_NETNS_DIR = "/run/docker/netns"
#: How long a scan is reused, seconds.
SCAN_TTL_S = 1.0

T = TypeVar("T")


@dataclass
class Namespace:
    """One network namespace: its inode, names under ``/run/netns``, processes inside."""

    ino: int
    names: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)  # ascending


@dataclass
class Scan:
    """What :func:`scan` found: the namespaces other than ``own``, and how many processes'
    namespaces could not be read (another user's processes, without root)."""

    own: int
    namespaces: dict[int, Namespace]
    hidden: int = 0
    at: float = 0.0


_cache: dict[tuple[str, str], Scan] = {}
_cache_lock = threading.Lock()


def ns_inode(link: str) -> int | None:
    """``net:[4026531840]`` → 4026531840 (None for anything else)."""
    if link.startswith("net:[") and link.endswith("]"):
        return int(link[5:-1])
    return None


def _nsfs_dev(proc_root: str) -> int | None:
    try:
        return os.stat(f"{proc_root}/self/ns/net").st_dev
    except OSError:
        return None


def scan(proc_root: str = "/proc", netns_dir: str = NETNS_DIR, max_age_s: float = SCAN_TTL_S
         ) -> Scan:
    """Every network namespace but this process's own (see the module docstring)."""
    key = (proc_root, netns_dir)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and now - hit.at < max_age_s:
            return hit
    own = ns_inode(os.readlink(f"{proc_root}/self/ns/net")) or 0
    found: dict[int, Namespace] = {}
    hidden = 0
    try:
        entries = os.listdir(proc_root)
    except OSError:
        entries = []
    pids = sorted(int(e) for e in entries if e.isdigit())
    readlink = os.readlink
    for pid in pids:
        try:
            ino = ns_inode(readlink(f"{proc_root}/{pid}/ns/net"))
        except PermissionError:
            hidden += 1
            continue
        except OSError:  # exited meanwhile, or a kernel thread being reaped
            continue
        if ino is None or ino == own:
            continue
        ns = found.get(ino)
        if ns is None:
            ns = found[ino] = Namespace(ino)
        ns.pids.append(pid)
    nsfs = _nsfs_dev(proc_root)
    for name, ino in bind_mounts(netns_dir, nsfs).items():
        if ino != own:
            found.setdefault(ino, Namespace(ino)).names.append(name)
    result = Scan(own, found, hidden, now)
    with _cache_lock:
        _cache[key] = result
    return result


def bind_mounts(netns_dir: str, nsfs_dev: int | None) -> dict[str, int]:
    """``{name: namespace inode}`` of the namespace bind mounts in ``netns_dir``."""
    out: dict[str, int] = {}
    try:
        names = sorted(os.listdir(netns_dir))
    except OSError:
        return out
    for name in names:
        try:
            st = os.stat(os.path.join(netns_dir, name))
        except OSError:
            continue
        if nsfs_dev is not None and st.st_dev == nsfs_dev:  # a mounted namespace file
            out[name] = st.st_ino
    return out


def forget_scan() -> None:
    """Drop the cached scan (the next :func:`scan` looks again)."""
    with _cache_lock:
        _cache.clear()


_libc: Any = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def name_thread(name: str) -> None:
    """Give the calling thread ``name`` (15 bytes at most) where ``top -H`` and
    ``/proc/PID/task/*/comm`` show it."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def run_inside(ns_path: str, ino: int, func: Callable[[], T]) -> T:
    """Call ``func`` on a new thread that has entered the network namespace at ``ns_path``
    (``/run/netns/NAME`` or ``/proc/PID/ns/net``), checked to be ``ino``. Needs
    CAP_SYS_ADMIN. What ``func`` opens stays bound to that namespace after the thread
    leaves it; no other thread ever changes namespace."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if os.fstat(fd).st_ino != ino:
                    raise OSError(errno.ESTALE, "another namespace is there now", ns_path)
                home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    _setns(fd)
                    try:
                        box["value"] = func()
                    finally:
                        _setns(home)  # if this failed, the thread ends here anyway
                finally:
                    os.close(home)
            finally:
                os.close(fd)
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name="reveal-setns", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class NsFile:
    """A descriptor of a file (or socket) bound to one namespace, re-read from offset 0
    to end of file (the same contract as :class:`reveal.collect._procfs.OpenFile`)."""

    __slots__ = ("fd", "path", "released", "size")

    def __init__(self, fd: int, path: str, size: int = 4096) -> None:
        self.fd, self.path, self.size = fd, path, size
        self.released = False

    def read(self) -> bytes:
        if self.released:
            return b""
        data = pread_all(self.fd, self.size)
        while len(data) >= self.size:
            self.size *= 4
        return data

    def release(self, devnull: int) -> None:
        """Drop the namespace now: ``/dev/null`` takes the descriptor number, so a reader
        still holding the number reads nothing and no other file ever gets it."""
        if self.fd >= 0 and not self.released:
            os.dup2(devnull, self.fd, inheritable=False)
            self.released = True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_net_files(ns: Namespace, names: tuple[str, ...], proc_root: str = "/proc",
                   netns_dir: str = NETNS_DIR) -> tuple[dict[str, NsFile], str]:
    """Open ``proc/net/<name>`` files of namespace ``ns``: through a process inside it
    (checked to be in it after opening), else by entering it. Returns the files and how
    they were reached (``pid N`` or ``setns NAME``); OSError when neither works."""
    for pid in ns.pids[:4]:
        files: dict[str, NsFile] = {}
        try:
            for name in names:
                path = f"{proc_root}/{pid}/net/{name}"
                files[name] = NsFile(os.open(path, os.O_RDONLY | os.O_CLOEXEC), path)
            if ns_inode(os.readlink(f"{proc_root}/{pid}/ns/net")) == ns.ino:
                return files, f"pid {pid}"
        except OSError:
            pass
        for handle in files.values():
            handle.close()
    if not ns.names:
        raise OSError(errno.ESRCH, "no process inside any more")

    def inside() -> dict[str, NsFile]:
        opened: dict[str, NsFile] = {}
        try:
            for name in names:
                path = f"/proc/thread-self/net/{name}"
                opened[name] = NsFile(os.open(path, os.O_RDONLY | os.O_CLOEXEC),
                                      f"{netns_dir}/{ns.names[0]}:net/{name}")
        except BaseException:
            for handle in opened.values():
                handle.close()
            raise
        return opened

    try:
        return run_inside(os.path.join(netns_dir, ns.names[0]), ns.ino, inside), \
            f"setns {ns.names[0]}"
    except PermissionError as exc:
        raise PermissionError(exc.errno, "no process inside, and entering it needs "
                                         "CAP_SYS_ADMIN") from None


def still_there(ns: Namespace, holder: int, proc_root: str = "/proc",
                netns_dir: str = NETNS_DIR, nsfs_dev: int | None = None) -> int | None:
    """Whether namespace ``ns`` still exists without us: a process of it (``holder``
    first, then the others last seen) is still inside, or its bind mount is still there.
    Returns a live process inside (0 when only the mount keeps it), None when gone."""
    want = f"net:[{ns.ino}]"
    for pid in [holder, *ns.pids] if holder else ns.pids:
        try:
            if os.readlink(f"{proc_root}/{pid}/ns/net") == want:
                return pid
        except OSError:
            continue
    for name in ns.names:
        try:
            st = os.stat(os.path.join(netns_dir, name))
        except OSError:
            continue
        if st.st_ino == ns.ino and (nsfs_dev is None or st.st_dev == nsfs_dev):
            return 0
    return None


class Cadence:
    """When a probe's periodic work is due: by its own thread's timer, or, once the sampler
    drives it (:meth:`drive`; then it calls the probe's ``poll`` after each of its own
    wake-ups, about once a second), at those calls: a thread waking up on its own costs
    several hundred µs of CPU a second with cold caches, for a few tens of µs of work."""

    #: A driven thread still wakes this often (seconds) when no event comes.
    DRIVEN_WAIT_S = 60.0

    def __init__(self, period_s: float) -> None:
        self.period_s = max(0.05, period_s)
        self.next_at = time.monotonic()
        self.driven = False

    def drive(self) -> None:
        self.driven = True

    def timeout(self) -> float:
        """How long the probe's thread may wait for an event now (seconds)."""
        if self.driven:
            return self.DRIVEN_WAIT_S
        return max(0.0, self.next_at - time.monotonic())

    def due(self) -> bool:
        """True (and the next time set) when the work is due; a call up to a tenth of a
        period early counts, so that calls a period apart never skip one."""
        now = time.monotonic()
        if now < self.next_at - (0.1 * self.period_s if self.driven else 0.0):
            return False
        self.next_at += self.period_s
        if self.next_at < now:
            self.next_at = now + self.period_s
        return True


class DrivenPeriodic:
    """``drive`` and ``poll`` of a probe whose periodic work (``_periodic``) runs on its own
    thread (waiting on ``_exits``) until the sampler drives it (see :class:`Cadence`), and
    that thread: it watches the processes of :meth:`_holders` and the descriptors of
    :meth:`_readable`, hands what fired to :meth:`_fired` and does the periodic work when
    due and not driven."""

    _cadence: Cadence
    _exits: Exits | None
    _stop: threading.Event
    _thread: threading.Thread | None
    info: dict[str, Any]

    def _start_thread(self, name: str) -> None:
        """Start the probe's thread, called ``name`` (``_cadence`` is set by the caller)."""
        self._exits = Exits()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(name,), name=name,
                                        daemon=True)
        self._thread.start()

    def _stop_thread(self) -> None:
        """Stop the probe's thread (waiting up to 5 s for it) and close its :class:`Exits`."""
        self._stop.set()
        if self._exits is not None:
            self._exits.wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._exits is not None:
            self._exits.close()
            self._exits = None

    def _run(self, name: str) -> None:
        """The probe's thread: wait for a watched process to exit or a descriptor to be
        readable (at most until the periodic work is due), handle it, then do the periodic
        work when due, unless the sampler drives that (:meth:`poll`). The first error is
        kept in ``info["poll_error"]``; the thread waits a period and goes on."""
        name_thread(name)
        cadence = self._cadence
        exits = self._exits
        assert exits is not None
        while not self._stop.is_set():
            try:
                exits.watch_only(self._holders())
                fired = exits.wait(cadence.timeout(), self._stop, self._readable())
                if self._stop.is_set():
                    break
                self._fired(fired)
                if not cadence.driven and cadence.due():
                    self._periodic()
            except Exception as exc:  # keep going; say it once
                self.info.setdefault("poll_error", f"{type(exc).__name__}: {exc}")
                self._stop.wait(cadence.period_s)

    def _holders(self) -> dict[Any, int]:
        """The process to watch for each live namespace (key → pid, 0 for none)."""
        raise NotImplementedError

    def _readable(self) -> dict[int, Any]:
        """Descriptors to wait on besides the processes (fd → key); none here."""
        return {}

    def _fired(self, keys: list[Any]) -> None:
        """Handle the keys :meth:`Exits.wait` returned."""
        raise NotImplementedError

    def drive(self) -> bool:
        """The sampler calls :meth:`poll` from now on; the thread only waits for events."""
        self._cadence.drive()
        if self._exits is not None:
            self._exits.wake()  # out of a timed wait
        return True

    def poll(self) -> None:
        """The periodic work, when due (the sampler calls this about once a second)."""
        if self._cadence.driven and self._cadence.due():
            self._periodic()

    def _periodic(self) -> None:
        raise NotImplementedError


class Exits:
    """Wait for processes to exit: a pidfd per watched process (Linux 5.3+), polled
    together with a timeout, so a namespace's last process leaving is noticed at once and
    costs nothing while it runs. Where pidfds are refused, :meth:`wait` just sleeps and
    reports every watched key each time (the caller then checks them all)."""

    def __init__(self) -> None:
        self._fds: dict[Any, tuple[int, int]] = {}  # key → (pid, pidfd or -1)
        self.supported = hasattr(os, "pidfd_open")
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def wake(self) -> None:
        """End the current :meth:`wait` now (from another thread)."""
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def watching(self) -> set[Any]:
        return set(self._fds)

    def watch(self, key: Any, pid: int) -> None:
        """Watch ``pid`` for ``key`` (replacing what ``key`` watched); 0 watches nothing."""
        old = self._fds.get(key)
        if old is not None and old[0] == pid:
            return
        self.forget(key)
        if pid <= 0:
            return
        fd = -1
        if self.supported:
            try:
                fd = os.pidfd_open(pid)
            except OSError as exc:
                if exc.errno in (errno.ENOSYS, errno.EPERM):
                    self.supported = False
        self._fds[key] = (pid, fd)

    def watch_only(self, pids: dict[Any, int]) -> None:
        """Watch exactly ``pids`` (key → pid): forget the keys not in it."""
        for key in self.watching() - pids.keys():
            self.forget(key)
        for key, pid in pids.items():
            self.watch(key, pid)

    def forget(self, key: Any) -> None:
        old = self._fds.pop(key, None)
        if old is not None and old[1] >= 0:
            os.close(old[1])

    def wait(self, timeout_s: float, stop: threading.Event | None = None,
             readable: dict[int, Any] | None = None) -> list[Any]:
        """Sleep until ``timeout_s`` passed, a watched process exited or one of the
        ``readable`` descriptors (fd → key) has data; the keys whose process exited (or
        could not be watched), with their watch dropped, then the keys of the readable
        descriptors."""

        fds = {fd: key for key, (_, fd) in self._fds.items() if fd >= 0}
        blind = [key for key, (_, fd) in self._fds.items() if fd < 0]
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in [*fds, *(readable or {})]:
            poller.register(fd, select.POLLIN)
        if stop is not None and stop.is_set():
            return []
        events = poller.poll(max(0, int(timeout_s * 1000)))
        if any(fd == self._wake_r for fd, _ in events):
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 64)
        fired = [fds[fd] for fd, _ in events if fd in fds]
        for key in fired:
            self.forget(key)
        ready = [readable[fd] for fd, _ in events if readable and fd in readable]
        return fired + blind + ready

    def close(self) -> None:
        for key in list(self._fds):
            self.forget(key)
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def settle(items: list[tuple[Any, Namespace, int]], proc_root: str, netns_dir: str,
           nsfs_dev: int | None) -> tuple[dict[Any, tuple[Namespace, int]], list[Any]]:
    """Which of ``items`` (key, namespace, holder) still exist without us: ``{key:
    (namespace as seen now, a live process inside or 0 for a bind mount only)}``, and the
    keys of those that ended. A namespace none of whose known processes is left is looked
    for again in a fresh scan (processes may have entered it since)."""
    alive: dict[Any, tuple[Namespace, int]] = {}
    lost: list[tuple[Any, Namespace]] = []
    for key, ns, holder in items:
        pid = still_there(ns, holder, proc_root, netns_dir, nsfs_dev)
        if pid is None:
            lost.append((key, ns))
        else:
            alive[key] = (ns, pid)
    ended: list[Any] = []
    if lost:
        fresh = scan(proc_root, netns_dir, max_age_s=0.0)
        for key, ns in lost:
            again = fresh.namespaces.get(ns.ino)
            if again is None:
                ended.append(key)
            else:
                alive[key] = (again, again.pids[0] if again.pids else 0)
    return alive, ended
