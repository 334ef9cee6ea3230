"""Which processes to trace, and the exact ``.so`` files they map.

Frameworks bundle their own CUDA libraries (a PyTorch wheel maps
``site-packages/nvidia/cuda_runtime/lib/libcudart.so.12`` or ``torch/lib/libcudart-<hash>.so``),
so the files come from ``/proc/PID/maps`` of each process, never from a fixed path. One
file (device and inode) is attached once, whichever processes map it.

Paths and names here are tenant-controlled: a path reaches a bpftrace program only when it
is plain (letters, digits, ``._+@/-``), lies in our mount namespace and names the very
inode the process maps; otherwise the kernel's ``/proc/PID/map_files/START-END`` link is
used, which is made of hex digits alone. Labels (comm, cgroup) are bounded and stripped of
control characters before they become channel labels.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

#: basename pattern → library kind
_LIBRARY_PATTERNS = (
    (re.compile(r"^libcudart(-[0-9a-f]+)?\.so(\.[0-9]+)*$"), "cudart"),
    (re.compile(r"^libcuda\.so(\.[0-9]+)*$"), "cuda"),
    (re.compile(r"^libnccl(-[0-9a-f]+)?\.so(\.[0-9]+)*$"), "nccl"),
)
_LIBPYTHON = re.compile(r"^libpython(\d+)\.(\d+)[a-z]*\.so")
_PYTHON_EXE = re.compile(r"^python(\d+)?(?:\.(\d+))?[a-z]*$")
_QUICK = (b"libcud", b"libnccl")
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9._+@/-]+$")
_MAP_LINE = re.compile(
    rb"^([0-9a-f]+)-([0-9a-f]+) \S+ [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) (\d+) +(/.*)$")
_CONTROL = re.compile(r"[^\x20-\x7e]")

COMM_MAX = 32
CGROUP_MAX = 96


def safe_label(text: str, limit: int, keep_tail: bool = False) -> str:
    """``text`` as a bounded, printable-ASCII label value (``?`` for an empty one).

    Control and non-ASCII characters become ``_``; ``, = { }`` are replaced later by
    :func:`reveal.frame.format_channel`. Longer text keeps its head (or its tail, the most
    specific part of a cgroup path) behind ``...``.
    """
    text = _CONTROL.sub("_", text.strip()) or "?"
    if len(text) > limit:
        text = "..." + text[-(limit - 3):] if keep_tail else text[:limit - 3] + "..."
    return text


def _read_text(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def read_comm(pid: int, proc_root: str = "/proc") -> str:
    """The process's command name, label-safe (``?`` when gone)."""
    return safe_label(_read_text(f"{proc_root}/{pid}/comm", 256) or "?", COMM_MAX)


def read_cgroup(pid: int, proc_root: str = "/proc") -> str:
    """The process's cgroup path, label-safe (``?`` when gone).

    The unified (v2) path when it is more than ``/``; on a hybrid host whose containers
    live in v1 hierarchies, the longest of the cpu, memory, pids and systemd paths.
    """
    text = _read_text(f"{proc_root}/{pid}/cgroup")
    if text is None:
        return "?"
    unified, legacy = "", ""
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            unified = path
        elif set(controllers.split(",")) & {"cpu", "memory", "pids", "name=systemd"} \
                and len(path) > len(legacy):
            legacy = path
    path = unified if unified not in ("", "/") else (legacy or unified or "/")
    return safe_label(path, CGROUP_MAX, keep_tail=True)


def process_labels(pid: int, proc_root: str = "/proc") -> dict[str, str]:
    """``{"pid", "comm", "cgroup"}`` labels of a process (tenant text made safe)."""
    return {"pid": str(pid), "comm": read_comm(pid, proc_root),
            "cgroup": read_cgroup(pid, proc_root)}


@dataclass(frozen=True)
class Mapping:
    """One file-backed mapping of ``/proc/PID/maps`` (``start``/``end`` as hex text)."""

    start: str
    end: str
    dev: tuple[int, int]
    inode: int
    path: str
    deleted: bool


def read_maps(pid: int, proc_root: str = "/proc") -> list[Mapping]:
    """File-backed mappings of ``pid`` that maps a CUDA/NCCL library (``[]`` for any other
    process, without parsing, and when it is gone or unreadable)."""
    try:
        with open(f"{proc_root}/{pid}/maps", "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    if not any(token in data for token in _QUICK):
        return []
    out = []
    for line in data.splitlines():
        match = _MAP_LINE.match(line)
        if match is None:
            continue
        start, end, major, minor, inode, raw = match.groups()
        if inode == b"0":
            continue
        path = raw.decode("utf-8", "surrogateescape")
        deleted = path.endswith(" (deleted)")
        if deleted:
            path = path[:-len(" (deleted)")]
        out.append(Mapping(start.decode(), end.decode(), (int(major, 16), int(minor, 16)),
                           int(inode), path, deleted))
    return out


def library_kind(path: str) -> str | None:
    """``cudart``, ``cuda`` or ``nccl`` for a library file name, else None."""
    base = os.path.basename(path)
    for pattern, kind in _LIBRARY_PATTERNS:
        if pattern.match(base):
            return kind
    return None


def python_version(path: str) -> tuple[int, int] | None:
    """``(major, minor)`` from an interpreter or libpython file name, when it says."""
    base = os.path.basename(path)
    match = _LIBPYTHON.match(base)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = _PYTHON_EXE.match(base)
    if match and match.group(1) and match.group(2):
        return int(match.group(1)), int(match.group(2))
    return None


@dataclass(frozen=True)
class MappedFile:
    """One file to attach to. ``key`` is (device, inode); ``path`` is as the process sees
    it (display only, untrusted); ``attach`` is safe to place in a bpftrace program."""

    kind: str  # cudart | cuda | nccl | python
    key: tuple[tuple[int, int], int]
    path: str
    attach: str
    version: tuple[int, int] | None = None


@dataclass
class TracedProcess:
    pid: int
    labels: dict[str, str]
    libraries: list[MappedFile] = field(default_factory=list)
    interpreter: MappedFile | None = None


@dataclass
class ScanResult:
    """Processes selected for tracing and every distinct file they map."""

    processes: dict[int, TracedProcess] = field(default_factory=dict)
    files: dict[tuple[tuple[int, int], int], MappedFile] = field(default_factory=dict)

    def library_files(self) -> list[MappedFile]:
        return sorted((f for f in self.files.values() if f.kind != "python"),
                      key=lambda f: (f.kind, f.key))

    def interpreter_files(self) -> list[MappedFile]:
        return sorted((f for f in self.files.values() if f.kind == "python"),
                      key=lambda f: f.key)


@dataclass(frozen=True)
class TargetSelector:
    """Which processes to trace.

    ``pids``: these processes and their descendants; ``cgroup``: a glob on the cgroup path;
    ``comm``: a glob on the command name. Criteria combine with AND. With none given,
    every process that maps a CUDA or NCCL library.
    """

    pids: frozenset[int] = frozenset()
    cgroup: str | None = None
    comm: str | None = None

    def describe(self) -> str:
        parts = []
        if self.pids:
            parts.append("pid " + ",".join(map(str, sorted(self.pids))) + " and descendants")
        if self.cgroup:
            parts.append(f"cgroup {self.cgroup!r}")
        if self.comm:
            parts.append(f"comm {self.comm!r}")
        return " and ".join(parts) or "every process that maps a CUDA or NCCL library"

    def accepts(self, labels: dict[str, str]) -> bool:
        if self.comm and not fnmatch.fnmatchcase(labels["comm"], self.comm):
            return False
        return not (self.cgroup and not fnmatch.fnmatchcase(labels["cgroup"], self.cgroup))


def _all_pids(proc_root: str) -> list[int]:
    try:
        return [int(name) for name in os.listdir(proc_root) if name.isdigit()]
    except OSError:
        return []


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` a scan needs."""

    ppid: int
    start: int  # start time, clock ticks after boot
    vsize: int  # virtual memory size, bytes (0 for kernel threads)


def read_stat(pid: int, proc_root: str = "/proc") -> ProcStat | None:
    text = _read_text(f"{proc_root}/{pid}/stat", 4096)
    if not text:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return ProcStat(int(fields[1]), int(fields[19]), int(fields[20]))
    except (IndexError, ValueError):
        return None


def _below(roots: Iterable[int], parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    return found


def descendants(roots: Iterable[int], proc_root: str = "/proc") -> set[int]:
    """``roots`` and every living process below them."""
    parents = {}
    for pid in _all_pids(proc_root):
        stat = read_stat(pid, proc_root)
        if stat is not None:
            parents[pid] = stat.ppid
    return _below(roots, parents)


def _same_mount_ns(pid: int, proc_root: str) -> bool:
    try:
        return os.readlink(f"{proc_root}/{pid}/ns/mnt") == os.readlink(f"{proc_root}/self/ns/mnt")
    except OSError:
        return False


def attach_path(pid: int, mapping: Mapping, same_ns: bool, proc_root: str = "/proc") -> str:
    """A path bpftrace can attach to that names exactly this mapping's file."""
    if same_ns and not mapping.deleted and _SAFE_PATH.match(mapping.path) \
            and "/../" not in mapping.path + "/":
        try:
            st = os.stat(mapping.path)
            if (os.major(st.st_dev), os.minor(st.st_dev)) == mapping.dev \
                    and st.st_ino == mapping.inode:
                return mapping.path
        except OSError:
            pass
    return f"{proc_root}/{pid}/map_files/{mapping.start}-{mapping.end}"


def _interpreter(pid: int, maps: list[Mapping], same_ns: bool,
                 proc_root: str) -> MappedFile | None:
    """The file holding the Python eval loop of ``pid`` (libpython, else the executable)."""
    for mapping in maps:
        if _LIBPYTHON.match(os.path.basename(mapping.path)):
            return MappedFile("python", (mapping.dev, mapping.inode), mapping.path,
                              attach_path(pid, mapping, same_ns, proc_root),
                              python_version(mapping.path))
    try:
        exe = os.readlink(f"{proc_root}/{pid}/exe")
    except OSError:
        return None
    if not _PYTHON_EXE.match(os.path.basename(exe).removesuffix(" (deleted)")):
        return None
    for mapping in maps:
        if mapping.path == exe.removesuffix(" (deleted)"):
            return MappedFile("python", (mapping.dev, mapping.inode), mapping.path,
                              attach_path(pid, mapping, same_ns, proc_root),
                              python_version(mapping.path))
    return None


class Scanner:
    """Repeated scans of ``/proc``. A process's maps are read again only when it is new or
    its virtual size changed since the last scan (loading a library grows it), so a rescan
    costs one small ``stat`` read per process."""

    def __init__(self, proc_root: str = "/proc") -> None:
        self.proc_root = proc_root
        self._seen: dict[int, tuple[int, int, list[Mapping]]] = {}  # pid → (start, vsize, maps)
        self._labels: dict[int, tuple[int, dict[str, str]]] = {}  # pid → (start, labels)
        self.maps_read = 0  # maps files read so far (a measure of the scan cost)

    def _maps(self, pid: int, stat: ProcStat) -> list[Mapping]:
        seen = self._seen.get(pid)
        if seen is not None and seen[0] == stat.start and seen[1] == stat.vsize:
            return seen[2]
        maps = read_maps(pid, self.proc_root)
        self.maps_read += 1
        self._seen[pid] = (stat.start, stat.vsize, maps)
        return maps

    def scan(self, selector: TargetSelector, exclude: Iterable[int] = ()) -> ScanResult:
        """Find the selected processes and the CUDA/NCCL/Python files each one maps."""
        root = self.proc_root
        stats = {pid: stat for pid in _all_pids(root)
                 if (stat := read_stat(pid, root)) is not None}
        for gone in set(self._seen) - set(stats):
            del self._seen[gone]
        for gone in set(self._labels) - set(stats):
            del self._labels[gone]
        candidates = set(stats)
        if selector.pids:
            candidates &= _below(selector.pids, {p: s.ppid for p, s in stats.items()})
        candidates -= set(exclude)
        result = ScanResult()
        for pid in sorted(candidates):
            stat = stats[pid]
            maps = self._maps(pid, stat) if stat.vsize else []
            libraries = [m for m in maps if library_kind(m.path)]
            if not libraries and not selector.pids:
                continue
            cached = self._labels.get(pid)
            if cached is None or cached[0] != stat.start:
                cached = self._labels[pid] = (stat.start, process_labels(pid, root))
            labels = cached[1]
            if labels["comm"] == "?" or not selector.accepts(labels):
                continue
            result.processes[pid] = self._process(pid, labels, maps, libraries, result)
        return result

    def _process(self, pid: int, labels: dict[str, str], maps: list[Mapping],
                 libraries: list[Mapping], result: ScanResult) -> TracedProcess:
        same_ns = _same_mount_ns(pid, self.proc_root)
        process = TracedProcess(pid, labels)
        seen: set[tuple[tuple[int, int], int]] = set()
        for mapping in libraries:
            key = (mapping.dev, mapping.inode)
            if key in seen:
                continue
            seen.add(key)
            kind = library_kind(mapping.path)
            assert kind is not None
            found = result.files.get(key) or MappedFile(
                kind, key, mapping.path, attach_path(pid, mapping, same_ns, self.proc_root))
            result.files.setdefault(key, found)
            process.libraries.append(found)
        if libraries:
            process.interpreter = _interpreter(pid, maps, same_ns, self.proc_root)
            if process.interpreter is not None:
                result.files.setdefault(process.interpreter.key, process.interpreter)
        return process


def scan(selector: TargetSelector, proc_root: str = "/proc",
         exclude: Iterable[int] = ()) -> ScanResult:
    """One scan (see :class:`Scanner` for repeated ones)."""
    return Scanner(proc_root).scan(selector, exclude)
