"""power probe: cpufreq/cpuidle on this machine; RAPL, thermal and hwmon layouts.

This VM exposes cpuidle and /proc/cpuinfo MHz but no cpufreq, powercap (RAPL), thermal
zone or hwmon device. Those families are exercised on a small directory tree laid out as
sysfs lays them out (real files read through the probe's real code path), since the
devices themselves cannot exist here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from reveal.catalog import default_catalog
from reveal.collect.power import CpuinfoFrequency, PowerProbe, cpuinfo_mhz_is_constant
from reveal.collect.probe import ProbeUnavailable
from reveal.frame import channel_metric, format_channel

CPU_SYS = Path("/sys/devices/system/cpu")


def _read(probe: PowerProbe) -> dict[str, float]:
    out = np.full(len(probe.channels), -7.0)
    probe.read(out)
    return dict(zip(probe.channels, out, strict=True))


def _cpuidle_plain() -> dict[str, float]:
    values = {}
    for state in sorted(CPU_SYS.glob("cpu[0-9]*/cpuidle/state[0-9]*")):
        cpu = state.parent.parent.name[3:]
        name = (state / "name").read_text().strip().replace(" ", "_")
        labels = {"cpu": cpu, "state": name}
        values[format_channel("cpuidle.time_us", labels)] = float((state / "time").read_text())
        values[format_channel("cpuidle.usage", labels)] = float((state / "usage").read_text())
    return values


def test_power_probe_on_this_machine() -> None:
    probe = PowerProbe()
    try:
        probe.open()
    except ProbeUnavailable as exc:
        pytest.skip(f"no power source here: {exc}")
    catalog = default_catalog()
    for channel in probe.channels:
        assert channel_metric(channel) in catalog, channel
    has_cpuidle = bool(list(CPU_SYS.glob("cpu[0-9]*/cpuidle/state0")))
    if has_cpuidle:
        before = _cpuidle_plain()
        values = _read(probe)
        after = _cpuidle_plain()
        for channel, low in before.items():
            assert low <= values[channel] <= after[channel], channel
    values = _read(probe)
    freq = [v for c, v in values.items() if c.startswith("cpufreq.cur_mhz")]
    assert freq and all(v > 0 for v in freq)
    if probe.info["cpufreq_source"] == "/proc/cpuinfo":
        plain = [float(m) for m in re.findall(r"cpu MHz\s*:\s*([0-9.]+)",
                                              Path("/proc/cpuinfo").read_text())]
        assert len(plain) == len(freq)
        assert np.allclose(sorted(freq), sorted(plain), rtol=0.5)
    if not Path("/sys/class/powercap").exists():
        assert probe.status == "degraded" and "RAPL" in probe.reason
    second = _read(probe)
    for channel, value in values.items():
        if catalog.lookup(channel).kind == "counter":
            assert second[channel] >= value, channel


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture()
def sysfs_tree(tmp_path: Path) -> Path:
    """RAPL, thermal and hwmon files as the kernel lays them out (values in kernel units)."""
    sys = tmp_path / "sys"
    rapl = sys / "class/powercap/intel-rapl:0"
    _write(rapl / "name", "package-0\n")
    _write(rapl / "energy_uj", "123456789\n")
    _write(rapl / "max_energy_range_uj", "262143328850\n")
    _write(sys / "class/powercap/intel-rapl:0:0/name", "core\n")
    _write(sys / "class/powercap/intel-rapl:0:0/energy_uj", "55555\n")
    _write(sys / "class/powercap/intel-rapl/enabled", "1\n")  # the control type: no energy
    _write(sys / "class/thermal/thermal_zone0/type", "x86_pkg_temp\n")
    _write(sys / "class/thermal/thermal_zone0/temp", "47000\n")
    _write(sys / "class/thermal/thermal_zone1/type", "acpitz\n")
    _write(sys / "class/thermal/thermal_zone1/temp", "-5000\n")  # below zero
    _write(sys / "class/thermal/thermal_zone2/type", "acpitz\n")  # same type again
    _write(sys / "class/thermal/thermal_zone2/temp", "27800\n")
    hwmon = sys / "class/hwmon/hwmon3"
    _write(hwmon / "name", "coretemp\n")
    _write(hwmon / "temp1_input", "52000\n")
    _write(hwmon / "temp1_label", "Package id 0\n")
    _write(hwmon / "temp2_input", "49000\n")
    _write(hwmon / "fan1_input", "1830\n")
    _write(hwmon / "power1_average", "12500000\n")  # µW
    _write(hwmon / "in0_input", "1200\n")  # voltages are not followed
    (sys / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "proc").mkdir()
    return tmp_path


def test_rapl_thermal_hwmon_layout(sysfs_tree: Path) -> None:
    probe = PowerProbe(root=str(sysfs_tree))
    probe.open()
    values = _read(probe)
    package = format_channel("rapl.energy_uj", {"zone": "intel-rapl:0", "domain": "package-0"})
    assert values[package] == 123456789.0
    assert values[format_channel("rapl.energy_uj", {"zone": "intel-rapl:0:0",
                                                    "domain": "core"})] == 55555.0
    assert probe.info["wrap"] == {package: 262143328850.0}
    assert values[format_channel("thermal.temp_c", {"zone": "x86_pkg_temp"})] == 47.0
    assert values[format_channel("thermal.temp_c", {"zone": "acpitz"})] == -5.0
    assert values[format_channel("thermal.temp_c", {"zone": "acpitz.2"})] == 27.8
    chip = {"chip": "coretemp.3"}
    assert values[format_channel("hwmon.temp_c", {**chip, "sensor": "Package_id_0"})] == 52.0
    assert values[format_channel("hwmon.temp_c", {**chip, "sensor": "temp2"})] == 49.0
    assert values[format_channel("hwmon.fan_rpm", {**chip, "sensor": "fan1"})] == 1830.0
    assert values[format_channel("hwmon.power_w", {**chip,
                                                   "sensor": "power1.average"})] == 12.5
    assert not any("in0" in c for c in probe.channels)
    assert probe.status == "degraded" and "cpufreq" in probe.reason
    # the files are re-read from offset 0 every tick
    (sysfs_tree / "sys/class/powercap/intel-rapl:0/energy_uj").write_text("123999999\n")
    assert _read(probe)[package] == 123999999.0
    for channel in probe.channels:
        assert channel_metric(channel) in default_catalog(), channel
    probe.close()


def test_unreadable_sensor_reads_nothing_and_new_zone_appears(sysfs_tree: Path) -> None:
    probe = PowerProbe(root=str(sysfs_tree))
    probe.open()
    count = len(probe.channels)
    zone = sysfs_tree / "sys/class/thermal/thermal_zone3"
    _write(zone / "type", "nvme\n")
    _write(zone / "temp", "not a number\n")
    assert not probe.refresh()  # the new file holds no number: no channel
    (zone / "temp").write_text("33000\n")
    assert probe.refresh()
    assert len(probe.channels) == count + 1
    assert _read(probe)[format_channel("thermal.temp_c", {"zone": "nvme"})] == 33.0
    probe.close()


def test_unavailable_under_missing_root() -> None:
    probe = PowerProbe(root="/nonexistent")
    with pytest.raises(ProbeUnavailable, match="/nonexistent"):
        probe.open()
    assert probe.status == "unavailable"


def _cpuinfo(mhz: tuple[str, str], flags: str) -> bytes:
    return "".join(f"processor\t: {i}\ncpu MHz\t\t: {m}\nflags\t\t: {flags}\n\n"
                   for i, m in enumerate(mhz)).encode()


def test_cpuinfo_frequency_constant_only_without_aperfmperf(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_bytes(_cpuinfo(("2445.434", "2445.434"), "fpu tsc hypervisor"))
    freq = CpuinfoFrequency(str(path))
    assert freq.constant and cpuinfo_mhz_is_constant(path.read_bytes())
    out = np.empty(2)
    freq.read(out)
    assert out.tolist() == [2445.434, 2445.434]
    path.write_bytes(_cpuinfo(("1200.000", "2445.434"), "fpu tsc hypervisor"))
    freq.read(out)  # not read between refreshes
    assert out.tolist() == [2445.434, 2445.434]
    assert freq.refresh() is False  # same channels; the value moved: read every tick now
    assert not freq.constant
    path.write_bytes(_cpuinfo(("1300.000", "2445.434"), "fpu tsc hypervisor"))
    freq.read(out)
    assert out.tolist() == [1300.0, 2445.434]
    path.write_bytes(_cpuinfo(("1000.000", "900.5"), "fpu tsc aperfmperf"))
    measured = CpuinfoFrequency(str(path))
    assert not measured.constant
    path.write_bytes(_cpuinfo(("1100.000", "900.5"), "fpu tsc aperfmperf"))
    measured.read(out)
    assert out.tolist() == [1100.0, 900.5]
    measured.close()
    freq.close()


def test_cpuinfo_constant_on_this_host_matches_reads() -> None:
    data = Path("/proc/cpuinfo").read_bytes()
    if b"cpu MHz" not in data:
        pytest.skip("no 'cpu MHz' in /proc/cpuinfo on this architecture")
    freq = CpuinfoFrequency("/proc/cpuinfo")
    out = np.empty(len(freq.channels))
    freq.read(out)
    expected = [float(m) for m in re.findall(rb"cpu MHz\s*:\s*([0-9.]+)", data)]
    if freq.constant:  # the kernel prints cpu_khz: every read gives the same text
        assert out.tolist() == expected
    else:
        assert out.tolist() == pytest.approx(expected, rel=0.5)
    freq.close()
