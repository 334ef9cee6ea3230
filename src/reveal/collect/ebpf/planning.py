"""From a target scan to what bpftrace attaches: exported functions, Python sources, labels.

Shared by the ``ebpf`` probe and the per-event capture.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from reveal.collect.ebpf.elf import ElfError, ElfInfo, read_elf
from reveal.collect.ebpf.functions import functions_of
from reveal.collect.ebpf.scripts import EVAL_FRAME_SYMBOL, InterpreterPlan, LibraryPlan
from reveal.collect.ebpf.targets import (
    MappedFile,
    ScanResult,
    TargetSelector,
    descendants,
    process_labels,
    read_comm,
    safe_label,
)

FileKey = tuple[tuple[int, int], int]

#: probe group → library kinds it traces
GROUP_LIBRARIES = {"cuda": ("cudart", "cuda"), "nccl": ("nccl",)}


class ExportCache:
    """ELF facts per file (device, inode), read once; None for a file that cannot be read."""

    def __init__(self) -> None:
        self._cache: dict[FileKey, ElfInfo | None] = {}

    def get(self, file: MappedFile) -> ElfInfo | None:
        if file.key not in self._cache:
            try:
                self._cache[file.key] = read_elf(file.attach)
            except (OSError, ElfError):
                self._cache[file.key] = None
        return self._cache[file.key]


def library_plans(result: ScanResult, groups: tuple[str, ...] | frozenset[str],
                  exports: ExportCache, skip: tuple[str, ...] = ()
                  ) -> list[tuple[MappedFile, LibraryPlan]]:
    """Each mapped library of the selected groups with the traced functions it exports,
    less those whose name matches a glob of ``skip``."""
    kinds = {k for g in groups for k in GROUP_LIBRARIES.get(g, ())}
    plans = []
    for file in result.library_files():
        if file.kind not in kinds:
            continue
        info = exports.get(file)
        functions = tuple(fn for fn in functions_of(file.kind)
                          if info is not None and fn.name in info.functions
                          and not any(fnmatchcase(fn.name, glob) for glob in skip))
        if functions:
            plans.append((file, LibraryPlan(file.attach, functions)))
    return plans


def choose_python_source(info: ElfInfo, version: tuple[int, int] | None,
                         wanted: str = "auto") -> str | None:
    """How to count Python function entries in an interpreter file (None: cannot).

    USDT ``function__entry`` when the interpreter has it and is older than 3.11 (CPython
    3.11 fires it only while line tracing is on, and 3.12 dropped it); else a uprobe on
    ``_PyEval_EvalFrameDefault`` (one hit per entry into the eval loop from C).
    """
    usdt = ("python", "function__entry") in info.usdt
    frame = EVAL_FRAME_SYMBOL in info.functions
    if wanted == "usdt":
        return "usdt" if usdt else None
    if wanted == "eval_frame":
        return "eval_frame" if frame else None
    if usdt and version is not None and version < (3, 11):
        return "usdt"
    return "eval_frame" if frame else ("usdt" if usdt else None)



def interpreter_plans(result: ScanResult, exports: ExportCache, wanted: str = "auto"
                      ) -> list[tuple[MappedFile, InterpreterPlan]]:
    """Each Python interpreter file of the targets that can be traced, and how."""
    plans = []
    for file in result.interpreter_files():
        info = exports.get(file)
        source = choose_python_source(info, file.version, wanted) if info is not None else None
        if source is not None:
            plans.append((file, InterpreterPlan(file.attach, source)))
    return plans


def describe_files(plans: list[tuple[MappedFile, LibraryPlan]]) -> list[dict[str, object]]:
    """JSON-ready, label-safe description of attached libraries."""
    return [{"kind": f.kind, "path": safe_label(f.path, 200, keep_tail=True),
             "functions": len(p.functions)} for f, p in plans]


class ProcessLabels:
    """Resolves pids, tasks and devices to labels for :class:`BatchConverter`."""

    def __init__(self, selector: TargetSelector, proc_root: str) -> None:
        self.selector = selector
        self.proc_root = proc_root
        self.admitted: dict[int, dict[str, str] | None] = {}
        self.sources: dict[int, str] = {}
        self._tasks: dict[int, dict[str, str]] = {}
        self._devices: dict[int, str] = {}

    def learn(self, result: ScanResult, sources: dict[FileKey, str]) -> None:
        for pid, proc in result.processes.items():
            self.admitted.setdefault(pid, proc.labels)
            if proc.interpreter is not None and proc.interpreter.key in sources:
                self.sources[pid] = sources[proc.interpreter.key]

    def process(self, pid: int) -> dict[str, str] | None:
        if pid in self.admitted:
            return self.admitted[pid]
        labels = process_labels(pid, self.proc_root)
        outside = bool(self.selector.pids) and \
            pid not in descendants(self.selector.pids, self.proc_root)
        chosen = None if outside or not self.selector.accepts(labels) else labels
        self.admitted[pid] = chosen
        return chosen

    def python_source(self, pid: int) -> str:
        return self.sources.get(pid, "?")

    def task(self, pid: int) -> dict[str, str]:
        found = self._tasks.get(pid)
        if found is None:
            comm = "swapper" if pid == 0 else read_comm(pid, self.proc_root)
            found = self._tasks[pid] = {"pid": str(pid), "comm": comm}
        return found

    def device(self, dev: int) -> str:
        name = self._devices.get(dev)
        if name is None:
            major, minor = dev >> 20, dev & 0xFFFFF
            name = f"{major}:{minor}"
            try:
                with open(f"/sys/dev/block/{major}:{minor}/uevent") as handle:
                    for line in handle:
                        if line.startswith("DEVNAME="):
                            name = safe_label(line.split("=", 1)[1], 64)
            except OSError:
                pass
            self._devices[dev] = name
        return name
