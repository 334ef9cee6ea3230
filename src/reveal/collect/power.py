"""CPU frequency, idle states, RAPL energy, thermal zones and hwmon sensors (sysfs).

Channels, each family only where the host exposes it:

- ``cpufreq.cur_mhz{cpu=N}``: current core frequency, MHz (cpufreq ``scaling_cur_freq``,
  else the ``cpu MHz`` lines of /proc/cpuinfo; ``info["cpufreq_source"]`` says which).
  The /proc/cpuinfo fallback costs a large read each tick; where its value cannot move
  (x86 without ``aperfmperf``, as on most VMs) it is read at open and every refresh only
  and the probe's reason says so. ``cpuinfo=False`` turns it off.
- ``cpuidle.time_us{cpu=N,state=NAME}`` (cumulative residency, µs) and
  ``cpuidle.usage{cpu=N,state=NAME}`` (cumulative entries).
- ``rapl.energy_uj{zone=intel-rapl:0,domain=package-0}``: cumulative energy, µJ; it wraps
  at ``max_energy_range_uj``, recorded per channel in ``info["wrap"]``.
- ``thermal.temp_c{zone=TYPE}``: thermal zone temperature, °C.
- ``hwmon.temp_c``, ``hwmon.fan_rpm``, ``hwmon.power_w`` ``{chip=NAME,sensor=LABEL}``:
  sensor readings in °C, RPM and W.
"""

from __future__ import annotations

import os
import re
from typing import ClassVar

import numpy as np

from reveal.collect._procfs import (
    FileProbe,
    GroupSpec,
    OpenFile,
    PlanItem,
    Source,
    list_dir,
    read_str,
    single_value,
    sorted_numeric,
)
from reveal.collect.probe import register
from reveal.frame import format_channel

_PROCESSOR = re.compile(rb"^processor\s*:\s*(\d+)", re.MULTILINE)
_MHZ = re.compile(rb"cpu MHz\s*:\s*([0-9.]+)")  # no ^ anchor: the literal prefix scans fast
_FLAGS = re.compile(rb"^flags\s*:([^\n]*)", re.MULTILINE)
_HWMON = re.compile(r"^(temp|fan|power)(\d+)_(input|average)$")
_HWMON_METRIC = {"temp": ("hwmon.temp_c", 0.001), "fan": ("hwmon.fan_rpm", 1.0),
                 "power": ("hwmon.power_w", 1e-6)}


def tidy(text: str, limit: int = 48) -> str:
    """A sysfs-provided name as a label value: printable, no blanks, bounded."""
    return "".join(ch if ch.isprintable() and not ch.isspace() else "_" for ch in text)[:limit]


def cpuinfo_mhz_is_constant(data: bytes) -> bool:
    """True when /proc/cpuinfo's ``cpu MHz`` cannot move: x86 (a ``flags`` line) without
    the ``aperfmperf`` flag, read when no cpufreq driver is loaded. The kernel then prints
    its calibrated ``cpu_khz`` (a VM's usual case) instead of a measured frequency."""
    match = _FLAGS.search(data)
    return match is not None and b"aperfmperf" not in match.group(1).split()


class CpuinfoFrequency:
    """``cpu MHz`` per processor from /proc/cpuinfo: one regex scan and one parse a tick.

    Where the value cannot change (:func:`cpuinfo_mhz_is_constant`) the file is parsed at
    open and at every ``refresh()`` only (``constant`` is True) and each tick copies those
    values: /proc/cpuinfo costs ~25 µs of kernel time a read. A refresh that finds another
    value goes back to reading every tick.
    """

    def __init__(self, path: str) -> None:
        self._file = OpenFile(path, 1 << 16)
        data = self._file.read()
        cpus = [m.decode() for m in _PROCESSOR.findall(data)]
        if len(_MHZ.findall(data)) != len(cpus) or not cpus:
            self._file.close()
            raise ValueError(f"{path} has no 'cpu MHz' line per processor")
        self.channels = [format_channel("cpufreq.cur_mhz", {"cpu": c}) for c in cpus]
        self.changed = False
        self.missing: list[str] = []
        self.constant = cpuinfo_mhz_is_constant(data)
        self._values = self._parse(data)

    def _parse(self, data: bytes) -> np.ndarray:
        try:
            values = np.fromstring(b" ".join(_MHZ.findall(data)), sep=" ")
        except ValueError:
            values = np.empty(0)
        return values if values.size == len(self.channels) else np.full(len(self.channels),
                                                                       np.nan)

    def read(self, out: np.ndarray) -> None:
        if self.constant:
            out[:] = self._values
            return
        try:
            values = np.fromstring(b" ".join(_MHZ.findall(self._file.read())), sep=" ")
        except (OSError, ValueError):
            values = np.empty(0)
        if values.size == len(self.channels):
            out[:] = values
        else:
            out[:] = np.nan
            self.changed = True

    def native_reader(self) -> np.ndarray | None:
        """The values copied each tick while the frequency cannot change, else None."""
        return self._values if self.constant else None

    def refresh(self) -> bool:
        if self.constant:
            try:
                values = self._parse(self._file.read())
            except OSError:
                values = np.full(len(self.channels), np.nan)
            if not np.array_equal(values, self._values):
                self.constant = False  # it moved after all: read it every tick from now
            self._values = values
        return False

    def close(self) -> None:
        self._file.close()


@register
class PowerProbe(FileProbe):
    """Frequencies, C-state residency, RAPL energy, temperatures, fans, power sensors."""

    name = "power"
    options_help: ClassVar[dict[str, str]] = {
        "cpuinfo": "CPU frequency from /proc/cpuinfo where cpufreq is absent (default: true)",
    }
    description = "cpufreq, cpuidle, RAPL energy, thermal zones, hwmon sensors (sysfs)"

    def _cpus(self) -> list[str]:
        return sorted_numeric(list_dir(f"{self.sys_root}/devices/system/cpu"), "cpu")

    def _cpufreq_files(self) -> list[Source]:
        root = f"{self.sys_root}/devices/system/cpu"
        files = []
        for cpu in self._cpus():
            path = f"{root}/{cpu}/cpufreq/scaling_cur_freq"  # kHz
            if os.path.exists(path):
                channel = format_channel("cpufreq.cur_mhz", {"cpu": cpu[3:]})
                files.append(Source(path, single_value(channel, 0.001)))
        return files

    def _cpuidle_files(self) -> list[Source]:
        root = f"{self.sys_root}/devices/system/cpu"
        files = []
        for cpu in self._cpus():
            idle = f"{root}/{cpu}/cpuidle"
            seen: set[str] = set()
            for state in sorted_numeric(list_dir(idle), "state"):
                name = _unique(tidy(read_str(f"{idle}/{state}/name") or state), state, seen)
                labels = {"cpu": cpu[3:], "state": name}
                files.append(Source(f"{idle}/{state}/time",
                                    single_value(format_channel("cpuidle.time_us", labels))))
                files.append(Source(f"{idle}/{state}/usage",
                                    single_value(format_channel("cpuidle.usage", labels))))
        return files

    def _rapl_files(self) -> list[Source]:
        root = f"{self.sys_root}/class/powercap"
        files = []
        wrap: dict[str, float] = {}
        for zone in sorted(list_dir(root)):
            energy = f"{root}/{zone}/energy_uj"
            if not os.path.exists(energy):
                continue
            labels = {"zone": tidy(zone), "domain": tidy(read_str(f"{root}/{zone}/name") or "")}
            channel = format_channel("rapl.energy_uj", labels)
            files.append(Source(energy, single_value(channel)))
            limit = read_str(f"{root}/{zone}/max_energy_range_uj")
            if limit and limit.isdigit():
                wrap[channel] = float(limit)
        self.info["wrap"] = wrap
        return files

    def _thermal_files(self) -> list[Source]:
        root = f"{self.sys_root}/class/thermal"
        files = []
        seen: set[str] = set()
        for zone in sorted_numeric(list_dir(root), "thermal_zone"):
            name = _unique(tidy(read_str(f"{root}/{zone}/type") or zone),
                           zone[len("thermal_zone"):], seen)
            channel = format_channel("thermal.temp_c", {"zone": name})
            files.append(Source(f"{root}/{zone}/temp", single_value(channel, 0.001)))
        return files

    def _hwmon_files(self) -> list[Source]:
        root = f"{self.sys_root}/class/hwmon"
        files = []
        for hwmon in sorted_numeric(list_dir(root), "hwmon"):
            directory = f"{root}/{hwmon}"
            chip = tidy(read_str(f"{directory}/name") or hwmon)
            for entry in sorted(list_dir(directory)):
                match = _HWMON.match(entry)
                if match is None:
                    continue
                kind, number, what = match.groups()
                metric, scale = _HWMON_METRIC[kind]
                label = read_str(f"{directory}/{kind}{number}_label") or f"{kind}{number}"
                sensor = tidy(label) + ("" if what == "input" else f".{what}")
                labels = {"chip": f"{chip}.{hwmon[5:]}", "sensor": sensor}
                files.append(Source(f"{directory}/{entry}",
                                    single_value(format_channel(metric, labels), scale)))
        return files

    def plan(self) -> dict[str, PlanItem]:
        plan: dict[str, PlanItem] = {}
        freq = self._cpufreq_files()
        if not freq and self.options.get("cpuinfo", True) and os.path.exists(
                f"{self.proc_root}/cpuinfo"):
            plan["cpuinfo"] = lambda: CpuinfoFrequency(f"{self.proc_root}/cpuinfo")
        counters = freq + self._cpuidle_files() + self._rapl_files()
        if counters:
            plan["counters"] = GroupSpec(tuple(counters))
        sensors = self._thermal_files() + self._hwmon_files()  # may be below zero
        if sensors:
            plan["sensors"] = GroupSpec(tuple(sensors), "int")
        return plan

    def unavailable_reason(self) -> str:
        return (f"no cpufreq, cpuidle, powercap, thermal or hwmon data under {self.sys_root} "
                f"and no 'cpu MHz' in {self.proc_root}/cpuinfo")

    def open(self) -> None:
        super().open()
        present = {channel.split("{", 1)[0].split(".")[0] for channel in self.channels}
        self.info["cpufreq_source"] = (
            "/proc/cpuinfo" if "cpuinfo" in self._parts
            else "cpufreq scaling_cur_freq" if "cpufreq" in present else "none")
        unreadable = [path for part in self._parts.values() for path in part.missing]
        absent = []
        cpuinfo = self._parts.get("cpuinfo")
        if isinstance(cpuinfo, CpuinfoFrequency):
            absent.append("cpufreq (frequency from /proc/cpuinfo" + (
                ", constant here without cpufreq or aperfmperf: read at open and every "
                "refresh, not every tick)" if cpuinfo.constant else ")"))
        elif "cpufreq" not in present:
            absent.append("cpufreq and /proc/cpuinfo MHz")
        for family, text in (("cpuidle", "cpuidle"), ("rapl", "RAPL powercap energy"),
                             ("thermal", "thermal zones"), ("hwmon", "hwmon sensors")):
            if family not in present:
                absent.append(text)
        if absent or unreadable:
            self.status = "degraded"
            self.reason = "; ".join(
                ([f"not available here: {', '.join(absent)}"] if absent else [])
                + ([f"unreadable: {', '.join(unreadable[:5])}"] if unreadable else []))


def _unique(name: str, suffix: str, seen: set[str]) -> str:
    """``name``, or ``name.suffix`` where an earlier entry took it; remembered in ``seen``."""
    if name in seen:
        name = f"{name}.{suffix}"
    seen.add(name)
    return name
