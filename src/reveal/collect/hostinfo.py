"""Facts about the recording host for ``meta.json``: names, kernel, CPUs, GPUs, clocks."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import time
from typing import Any

from reveal.collect._procfs import read_str


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """CPU numbers from the kernel's online list (``0-3,6``); all CPUs if unreadable."""
    try:
        with open(path, encoding="ascii") as handle:
            text = handle.read().strip()
    except OSError:
        return list(range(os.cpu_count() or 1))
    cpus: list[int] = []
    for part in text.split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (x86 ``model name``, else ``Processor``/``cpu model``)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return platform.processor() or platform.machine()
    for key in ("model name", "Processor", "cpu model", "Model"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return platform.processor() or platform.machine()


def mem_total_bytes(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def boot_id() -> str:
    """The kernel's boot id: monotonic timestamps compare only within one boot."""
    return read_str("/proc/sys/kernel/random/boot_id") or ""


def wall_offset_ns(tries: int = 5) -> int:
    """``unix_ns - monotonic_ns``, from the closest-spaced of a few clock pairs."""
    best: tuple[int, int] | None = None
    for _ in range(tries):
        a = time.monotonic_ns()
        wall = time.time_ns()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


def gpus() -> list[dict[str, Any]]:
    """One entry per NVIDIA GPU (``index``, ``name``, ``uuid``, ``pci_bus_id``); [] if none."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no library: a host without NVIDIA GPUs
        return []
    found: list[dict[str, Any]] = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            found.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
            })
    except Exception:
        pass
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    return found


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def host_meta() -> dict[str, Any]:
    """The host part of ``meta.json``."""
    return {
        "host": socket.gethostname(),
        "kernel": os.uname().release,
        "cpu_model": cpu_model(),
        "n_cpus": len(online_cpus()),
        "mem_total_bytes": mem_total_bytes(),
        "boot_id": boot_id(),
        "gpus": gpus(),
    }
