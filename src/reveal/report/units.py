"""Numbers in a channel's unit, scaled for people: ``412 MB/s``, ``78 %``, ``1.2 ms``.

Each catalog unit (``MetricInfo.unit``) maps to a :class:`Quantity`: the base unit its
values read in once multiplied by ``scale``, and for counts the noun. Values seen by the
report are the analysis's: counters and events are already per-second rates (see
:mod:`reveal.analysis.derive`), so a counter in bytes reads in bytes per second, one in
USER_HZ ticks in CPUs (CPU-seconds per second), one in microseconds as a share of the time.

Bases and how they print:

======== ================================================ =========================
base     meaning                                          example
======== ================================================ =========================
``B``    bytes (SI prefixes: kB = 1000 B)                 ``2.1 GB``
``B/s``  bytes per second                                 ``412 MB/s``
``%``    percent (``noun`` may add "of link speed")       ``78 %``
``s``    seconds                                          ``1.2 ms``
``s/s``  seconds per second: a share of the time          ``35 % of the time``
``cpu``  CPU-seconds per second                           ``78 % of a CPU``, ``2.5 CPUs``
``W``    watts                                            ``250 W``
``J``    joules                                           ``1.5 kJ``
``Hz``   hertz                                            ``2.4 GHz``
``°C``   degrees Celsius                                  ``71 °C``
``n``    a count of ``noun``                              ``12 tasks``
``n/s``  a count of ``noun`` per second                   ``1.2k packets/s``
``""``   no known unit (SMD/ASD's scaled columns): plain  ``0.5343``
======== ================================================ =========================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from reveal.catalog import MetricInfo

RATED_KINDS = ("counter", "event")

# stored unit -> (base of a level, base of a per-second rate, scale to the base)
_BYTES = {"bytes": 1.0, "bytes (kernel kB × 1024)": 1.0, "KiB": 1024.0,
          "512-byte sectors": 512.0, "4-byte words": 4.0}
_BYTE_RATES = {"bytes/s": 1.0, "KB/s": 1000.0}
_TIMES = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9,
          "USER_HZ ticks (1/100 s)": 0.01}
_POWER = {"W": 1.0, "mW": 1e-3}
_ENERGY = {"mJ": 1e-3, "µJ (wraps at max_energy_range_uj)": 1e-6, "J": 1.0}
_PERCENT = {"%": "", "percent": "", "% of link speed": " of link speed"}
#: units that are no unit to a reader: plain numbers (min-max scaled datasets, codes,
#: generations, flags)
PLAIN_UNITS = ("", "scaled", "flag", "P-state", "XID code", "generation")
#: metric-name fragments of CPU time (a rate of it reads in CPUs, not as a share of time)
_CPU_TIME = ("cpu.user", "cpu.nice", "cpu.system", "cpu.idle", "cpu.iowait", "cpu.irq",
             "cpu.softirq", "cpu.steal", "cpu.guest", "usage_usec", "user_usec",
             "system_usec", "cpuacct.", "task_clock")


@dataclass(frozen=True)
class Quantity:
    """How values of one metric read: ``value × scale`` in ``base`` (see the module doc)."""

    base: str
    scale: float = 1.0
    noun: str = ""

    @property
    def known(self) -> bool:
        """Whether the values carry a unit (else they print as plain numbers)."""
        return bool(self.base)

    def amount(self) -> Quantity:
        """The quantity of a per-second rate summed over time (a window's total): bytes
        for bytes per second, a count for a count per second, seconds for a share of time."""
        base = {"B/s": "B", "n/s": "n", "s/s": "s", "cpu": "s", "W": "J"}.get(self.base)
        return replace(self, base=base) if base else self

    def format(self, value: float, signed: bool = False) -> str:
        """``value`` (as stored by the analysis) in this unit, scaled for reading."""
        if value is None or not math.isfinite(value):
            return "n/a"
        x = value * self.scale
        sign = ("+" if x > 0 else "-" if x < 0 else "") if signed else ("-" if x < 0 else "")
        return sign + _FORMATS.get(self.base, _plain_unit)(abs(x), self.noun)

    def axis_label(self) -> str:
        """A unit for a plot's axis (values multiplied by :meth:`plot_scale`)."""
        return {"B": "bytes", "B/s": "bytes/s", "%": "%" + self.noun, "s": "seconds",
                "s/s": "% of the time", "cpu": "% of one CPU", "W": "watts", "J": "joules",
                "Hz": "hertz", "°C": "°C", "n": self.noun or "count",
                "n/s": f"{self.noun or 'count'} per second"}.get(self.base, "")

    def plot_scale(self) -> float:
        """Factor from stored values to the unit of :meth:`axis_label`."""
        return self.scale * (100.0 if self.base in ("s/s", "cpu") else 1.0)


PLAIN = Quantity("")


def quantity(info: MetricInfo) -> Quantity:
    """The :class:`Quantity` of a metric's values as the analysis sees them (rated)."""
    unit, rated = info.unit.strip(), info.kind in RATED_KINDS
    if unit in PLAIN_UNITS:
        return PLAIN
    if unit in _PERCENT:
        return Quantity("%", 1.0, _PERCENT[unit])
    if unit == "ratio":
        return Quantity("%", 100.0)
    if unit in _BYTES:
        return Quantity("B/s" if rated else "B", _BYTES[unit])
    if unit in _BYTE_RATES:
        return Quantity("B/s", _BYTE_RATES[unit])
    if unit in _TIMES:
        if not rated:
            return Quantity("s", _TIMES[unit])
        cpu_time = any(part in info.name for part in _CPU_TIME)
        return Quantity("cpu" if cpu_time else "s/s", _TIMES[unit])
    if unit in _POWER:
        return Quantity("W", _POWER[unit])
    if unit in _ENERGY:
        return Quantity("W" if rated else "J", _ENERGY[unit])
    if unit == "MHz":
        return Quantity("Hz", 1e6)
    if unit == "°C":
        return Quantity("°C")
    noun = "" if unit == "count" else unit
    if unit.startswith("blocks of"):
        noun = "blocks"
    return Quantity("n/s" if rated else "n", 1.0, noun)


def number(x: float) -> str:
    """A plain number, 3 significant digits below 1000, grouped digits above."""
    if not math.isfinite(x):
        return "n/a"
    if x == 0:
        return "0"
    ax = abs(x)
    if ax >= 1000:
        return f"{x:,.0f}"
    if ax < 1e-3:
        return f"{x:.2g}"
    text = f"{x:.3g}"
    return text if "e" not in text else f"{x:.0f}"


def plain_number(x: float) -> str:
    """A number with no unit (scaled datasets): 4 significant digits, no grouping."""
    if not math.isfinite(x):
        return "n/a"
    ax = abs(x)
    if ax >= 1e6 or (0 < ax < 1e-3):
        return f"{x:.3g}"
    return f"{x:.4g}"


_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"),
             (1e-6, "µ"))


def si(x: float, unit: str, small: bool = False) -> str:
    """``x`` (≥ 0) with an SI prefix: ``si(4.12e8, "B/s")`` → ``412 MB/s``. ``small``:
    allow milli and micro (watts, joules), else values below 1 print as they are."""
    if x == 0:
        return f"0 {unit}"
    for factor, prefix in _PREFIXES:
        if factor < 1.0 and not small:
            break
        if x >= factor * 0.9995:
            scaled = x / factor
            text = f"{scaled:.3g}"
            if "e" in text:  # ≥ 1000 of the largest prefix
                text = f"{scaled:,.0f}"
            return f"{text} {prefix}{unit}"
    return f"{number(x)} {unit}"


def duration(seconds: float) -> str:
    """A duration (≥ 0) in ns, µs, ms, s, min, h or d."""
    if seconds == 0:
        return "0 s"
    if seconds < 1.0:
        return si(seconds, "s", small=True) if seconds >= 1e-6 else f"{number(seconds * 1e9)} ns"
    if seconds < 120:
        return f"{number(seconds)} s"
    if seconds < 7200:
        return f"{number(seconds / 60)} min"
    if seconds < 172800:
        return f"{number(seconds / 3600)} h"
    return f"{number(seconds / 86400)} d"


def _count(x: float) -> str:
    if x >= 1e4:
        return si(x, "").replace(" ", "")
    if x >= 100 or abs(x - round(x)) < 1e-9:
        return f"{x:,.0f}"
    return number(x)


def _with_noun(text: str, noun: str, per: str = "") -> str:
    if not noun:
        return f"{text}{per}"
    return f"{text} {noun}{per}"


def _share(x: float, _noun: str) -> str:
    return f"{number(x * 100)} % of the time" if x <= 1.0005 else f"{number(x)} s per second"


def _cpus(x: float, _noun: str) -> str:
    if x < 0.9995:
        return f"{number(x * 100)} % of a CPU"
    return f"{number(x)} CPU" + ("" if round(x, 2) == 1 else "s")


def _plain_unit(x: float, _noun: str) -> str:
    return plain_number(x)


_FORMATS = {
    "B": lambda x, _n: si(x, "B"),
    "B/s": lambda x, _n: si(x, "B/s"),
    "%": lambda x, n: f"{number(x)} %{n}",
    "s": lambda x, _n: duration(x),
    "s/s": _share,
    "cpu": _cpus,
    "W": lambda x, _n: si(x, "W", small=True),
    "J": lambda x, _n: si(x, "J", small=True),
    "Hz": lambda x, _n: si(x, "Hz"),
    "°C": lambda x, _n: f"{number(x)} °C",
    "n": lambda x, n: _with_noun(_count(x), n),
    "n/s": lambda x, n: _with_noun(_count(x), n, "/s"),
}
