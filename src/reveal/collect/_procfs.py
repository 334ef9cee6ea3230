"""Fast readers shared by the procfs, sysfs and cgroup probes.

The hot path of every file-based probe is the same: ``pread`` to end of file per file kept open,
then one vectorised parse of all its files at once. Layouts are worked out once (at
``open()``/``refresh()``): *which whitespace-separated tokens* hold the wanted values. Each
tick the joined text is reduced to digits (one ``bytes.translate``), parsed in one call
(``np.fromstring``) and the wanted positions are picked with one fancy index. When the
reduced text no longer has the expected number of values (a device appeared, a driver
renamed an IRQ), the layout is rebuilt from the new text and the probe reports changed
channels at its next ``refresh()``.

Building blocks:

- :class:`OpenFile`: a descriptor read from offset 0 to end of file with ``os.pread``
  each tick (a short read is not the end of a seq_file: reads go on until one returns 0).
- :class:`NumberParser`: pulls chosen tokens of one text out as float64.
- :class:`Source`: one file and its ``discover`` (text → ``{channel: (token, scale)}``).
- :class:`FileGroup`: several sources read and parsed together.
- :class:`FileProbe`: a probe made of groups; handles open/read/refresh/close.

Where the optional C extension ``reveal.collect._procread`` is built, a group whose parser
takes the fast path also gets a native plan: one C call per tick preads its files (without
the GIL) and parses the integers straight into the output row, with the same layout and
the same arithmetic. Whenever the plan does not fit (a file unreadable, a count changed)
the Python path above runs for that tick and re-discovers. ``USE_NATIVE = False`` (or the
environment variable ``REVEAL_NATIVE=0``) keeps new groups on the Python path.
"""

from __future__ import annotations

import contextlib
import errno
import operator
import os
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from reveal.collect.probe import NativePart, Probe, ProbeUnavailable
from reveal.frame import format_channel

try:
    from reveal.collect import _procread  # type: ignore[attr-defined]
except ImportError:  # not built here: the pure-Python readers are used
    _procread = None

#: Build native (C) plans for new file groups when the extension is present.
USE_NATIVE: bool = _procread is not None and os.environ.get("REVEAL_NATIVE", "1") != "0"

# prepare function → (C prepare code, byte read as a blank): what the C reader does
# instead of calling it (see :func:`native_prepare`)
_NATIVE_PREPARE: dict[Callable[[bytes], bytes], tuple[int, int]] = {}
_NATIVE_MODES = {"uint": 0, "int": 1, "fixed": 0}


def native_available() -> bool:
    """True when the C reader is built and enabled."""
    return _procread is not None and USE_NATIVE


def native_prepare(code: int = 0, split: bytes = b"") -> Callable[[Prepare], Prepare]:
    """Declare what the C reader does in place of a prepare function: ``code`` 1 cuts the
    ``intr`` line of /proc/stat to its total; ``split`` is a byte the function turns into
    a blank (or into ``byte + blank``), which the C reader then reads as a blank."""

    def mark(func: Prepare) -> Prepare:
        _NATIVE_PREPARE[func] = (code, split[0] if split else 0)
        return func

    return mark

Layout = dict[str, tuple[int, float]]
"""Channel name → (index of its token in ``text.split()``, scale applied to the value)."""

Discover = Callable[[bytes], Layout]
Prepare = Callable[[bytes], bytes]

_DIGITS = b"0123456789"
_SPACE = b" \t\n\r\x0b\x0c"


def _complement(keep: bytes) -> bytes:
    return bytes(c for c in range(256) if c not in keep)


# mode → (translate table or None, bytes to delete, dtype of the vectorised parse)
_MODES: dict[str, tuple[bytes | None, bytes, type]] = {
    # non-negative integers: every byte but digits and blanks is deleted
    "uint": (None, _complement(_DIGITS + _SPACE), np.uint64),
    # signed integers (``-1`` in /proc/net/snmp)
    "int": (None, _complement(_DIGITS + _SPACE + b"-"), np.int64),
    # decimals: every byte but digits, '.', '-' and blanks becomes a blank (numpy's float
    # text parser is slow: ~10x the integer one)
    "float": (bytes(c if c in _DIGITS + _SPACE + b".-" else 32 for c in range(256)), b"",
              np.float64),
    # non-negative decimals printed with a fixed number of places ("%lu.%02lu": loadavg,
    # PSI): parsed as integers with the point deleted, then scaled by 10^-places
    "fixed": (None, _complement(_DIGITS + _SPACE), np.uint64),
}


def roots(options: dict[str, Any]) -> tuple[str, str]:
    """``(proc_root, sys_root)`` from probe options ``root``, ``proc_root``, ``sys_root``."""
    base = str(options.get("root", "")).rstrip("/")
    proc_root = str(options.get("proc_root", f"{base}/proc")).rstrip("/")
    sys_root = str(options.get("sys_root", f"{base}/sys")).rstrip("/")
    return proc_root, sys_root


def read_bytes(path: str, limit: int = 1 << 22) -> bytes | None:
    """The content of ``path`` up to ``limit`` bytes (one-shot, for discovery), read to end
    of file, or None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return pread_all(fd, min(limit, 1 << 16), limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def pread_all(fd: int, size: int, limit: int | None = None) -> bytes:
    """Everything ``fd`` holds from offset 0 to end of file (at most ``limit`` bytes).

    procfs and sysfs files made with the kernel's seq_file hand out about one page per read
    whatever the buffer, so a short read is not the end: ``pread`` goes on at the running
    offset until it returns nothing. ``size`` is the bytes asked for per read.
    """
    data = os.pread(fd, size, 0)
    if not data or (limit is not None and len(data) >= limit):
        return data[:limit] if limit is not None else data
    chunks = [data]
    offset = len(data)
    while True:
        ask = size if limit is None else min(size, limit - offset)
        if ask <= 0:
            break
        more = os.pread(fd, ask, offset)
        if not more:
            break
        chunks.append(more)
        offset += len(more)
    return b"".join(chunks) if len(chunks) > 1 else data


def read_str(path: str) -> str | None:
    """``read_bytes`` decoded (ASCII with replacement) and stripped, or None."""
    data = read_bytes(path, 4096)
    return None if data is None else data.decode("ascii", "replace").strip()


def sorted_numeric(names: Iterable[str], prefix: str) -> list[str]:
    """Names ``prefix<N>`` sorted by N (``cpu2`` before ``cpu10``); others dropped."""
    picked = [n for n in names if n.startswith(prefix) and n[len(prefix):].isdigit()]
    return sorted(picked, key=lambda n: int(n[len(prefix):]))


def list_dir(path: str) -> list[str]:
    """Entries of a directory, or an empty list when it cannot be listed."""
    try:
        return os.listdir(path)
    except OSError:
        return []


class OpenFile:
    """A file descriptor kept open and re-read from offset 0 to end of file each tick."""

    __slots__ = ("fd", "path", "size")

    def __init__(self, path: str, size: int = 4096) -> None:
        self.path = path
        self.size = size
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> bytes:
        """The whole current content: ``pread`` from offset 0, then at the running offset
        until end of file (seq_file hands out one page per read); the per-read size grows
        to the file's size so that a regular file takes one read plus the end check."""
        data = pread_all(self.fd, self.size)
        while len(data) >= self.size:
            self.size *= 4
        return data

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse_numbers(text: bytes, dtype: type) -> np.ndarray:
    """All blank-separated numbers of ``text``; ValueError when one does not parse."""
    return np.fromstring(text, dtype=dtype, sep=" ")


class NumberParser:
    """Extracts chosen tokens of a text as float64 with one vectorised parse.

    ``positions[i]`` is the index in ``text.split()`` of the token holding output ``i``
    (None: always NaN). The fast path reduces the text to numbers with ``bytes.translate``
    and parses it with one ``np.fromstring``; where the text does not allow that (a label
    that leaves a stray ``-``), a slower path splits the text and converts the picked
    tokens, still without a per-value Python loop.
    """

    def __init__(self, data: bytes, positions: Sequence[int | None],
                 scale: Sequence[float] | None = None, mode: str = "uint") -> None:
        table, delete, dtype = _MODES[mode]
        self._table, self._delete, self._dtype = table, delete, dtype
        self.mode = mode
        tokens = data.split()
        self.n = len(positions)
        wanted: list[int] = []
        keep: list[int] = []
        for i, pos in enumerate(positions):
            if pos is not None and pos < len(tokens) and _is_number(tokens[pos]):
                wanted.append(pos)
                keep.append(i)
        self._dst: np.ndarray | None = None
        self._nan: np.ndarray | None = None
        if len(keep) != self.n:
            self._dst = np.asarray(keep, dtype=np.intp)
            self._nan = np.setdiff1d(np.arange(self.n), self._dst)
        factors = np.ones(len(keep)) if scale is None else np.asarray(scale, float)[keep]
        self._scale = None if np.all(factors == 1.0) else factors
        self._places: np.ndarray | None = None  # fast path only: 10^-decimals per value
        if mode == "fixed":
            places = np.array([10.0 ** -(len(tokens[p]) - tokens[p].index(b".") - 1)
                               if b"." in tokens[p] else 1.0 for p in wanted])
            self._places = None if np.all(places == 1.0) else places
        self._wanted = wanted
        self._ntok = len(tokens)
        self._getter = _getter(wanted)
        self._label_getter = _getter([i for i, t in enumerate(tokens) if not _is_number(t)])
        self._labels = self._label_getter(tokens)
        self.fast = self._build_fast(data, tokens, wanted)

    def native_plan(self, files: Sequence[tuple[int, int, int, int]],
                    sums: Sequence[Sequence[int]] | None = None, nout: int = 0) -> Any:
        """A C plan reading ``files`` (fd, buffer size, prepare code, split byte) with this
        layout, or None where the C reader cannot reproduce the fast path.

        With ``sums`` the plan fills ``nout`` sums instead: ``sums[i]`` lists the output
        slots that output ``i`` of this layout is added into (each slot 0 when nothing is)."""
        if not self.fast or self.mode not in _NATIVE_MODES or _procread is None:
            return None
        dst = list(range(self.n)) if self._dst is None else self._dst.tolist()
        index = self._index.tolist()
        places = None if self._places is None else self._places.tolist()
        scale = None if self._scale is None else self._scale.tolist()
        nan = [] if self._nan is None else self._nan.tolist()
        if sums is None:
            return _procread.Plan(files, _NATIVE_MODES[self.mode], self._total, self.n,
                                  index, dst, places, scale, nan)
        picks = [(k, slot) for k, source in enumerate(dst) for slot in sums[source]]
        pick = [k for k, _ in picks]
        return _procread.Plan(files, _NATIVE_MODES[self.mode], self._total, nout,
                              [index[k] for k in pick], [slot for _, slot in picks],
                              None if places is None else [places[k] for k in pick],
                              None if scale is None else [scale[k] for k in pick], [],
                              accumulate=True)

    def same_labels(self, data: bytes) -> bool:
        """True when ``data`` has the same tokens count and the same non-number tokens."""
        tokens = data.split()
        return len(tokens) == self._ntok and self._label_getter(tokens) == self._labels

    def _build_fast(self, data: bytes, tokens: list[bytes], wanted: list[int]) -> bool:
        table, delete = self._table, self._delete
        counts = np.fromiter((len(t.translate(table, delete).split()) for t in tokens),
                             dtype=np.intp, count=len(tokens))
        if any(counts[p] != 1 for p in wanted):
            return False
        starts = np.cumsum(counts) - counts
        self._index = starts[wanted].astype(np.intp)
        self._total = int(counts.sum())
        try:
            parsed = _parse_numbers(data.translate(table, delete), self._dtype)
        except ValueError:
            return False
        if parsed.size != self._total:
            return False
        expected = np.array([float(tokens[p]) for p in wanted], dtype=np.float64)
        got = parsed[self._index].astype(np.float64)
        if self._places is not None:
            got = got * self._places
        return bool(np.allclose(got, expected, rtol=1e-12, atol=0.0))

    def parse(self, data: bytes, out: np.ndarray) -> bool:
        """Fill ``out`` (length ``n``) from ``data``; False when the layout no longer fits."""
        if self.fast:
            try:
                parsed = _parse_numbers(data.translate(self._table, self._delete), self._dtype)
            except ValueError:
                return False
            if parsed.size != self._total:
                return False
            values = parsed[self._index]
            if self._places is not None:
                values = values * self._places
        else:
            tokens = data.split()
            if len(tokens) != self._ntok:
                return False
            try:
                values = np.array(self._getter(tokens), dtype=np.float64)
            except ValueError:
                return False
        if self._scale is not None:
            values = values * self._scale
        if self._dst is None:
            out[:] = values
        else:
            out[self._dst] = values
            out[self._nan] = np.nan
        return True


def _is_number(token: bytes) -> bool:
    """True for a decimal number token (``12``, ``-1``, ``0.25``); not ``nan``/``inf``."""
    if token.isdigit():
        return True
    head = token[1:2] if token[:1] == b"-" else token[:1]
    if not head.isdigit():
        return False
    try:
        float(token)
    except ValueError:
        return False
    return True


def _getter(positions: list[int]) -> Callable[[list[bytes]], tuple[bytes, ...]]:
    if not positions:
        return lambda tokens: ()
    if len(positions) == 1:
        only = positions[0]
        return lambda tokens: (tokens[only],)
    return operator.itemgetter(*positions)


class Part(Protocol):
    """A piece of a probe: a fixed list of channels filled by ``read``."""

    channels: list[str]

    def read(self, out: np.ndarray) -> None: ...

    def refresh(self) -> bool: ...

    def close(self) -> None: ...

    # optional: ``native_reader() -> Plan | float64 array | None`` (see NativePart)


@dataclass(frozen=True)
class Source:
    """One file of a :class:`FileGroup`.

    ``discover(text)`` maps the file's (prepared) text to ``{channel: (token index,
    scale)}``; ``prepare`` is cheap bytes surgery run on every read (e.g. cutting the long
    ``intr`` line of /proc/stat); ``dynamic`` marks a layout that depends on the values
    themselves (so ``refresh`` always re-discovers). ``tag`` distinguishes two sources on
    the same path whose channels differ (e.g. a cgroup label).
    """

    path: str
    discover: Discover = field(compare=False)
    prepare: Prepare | None = field(default=None, compare=False)
    dynamic: bool = field(default=False, compare=False)
    tag: str = ""


def single_value(channel: str, scale: float = 1.0, positive: bool = False) -> Discover:
    """Discover for a one-number file (a sysfs attribute): the number, if it is one
    (and, with ``positive``, only when it is above zero at discovery)."""

    def discover(data: bytes) -> Layout:
        toks = data.split()
        if len(toks) != 1 or not _is_number(toks[0]):
            return {}
        return {channel: (0, scale)} if not positive or float(toks[0]) > 0 else {}

    return discover


class FileGroup:
    """Files read with one ``pread`` each, joined, and parsed together in one pass.

    Only *live* files (those holding at least one channel at the last discovery) are read
    each tick; the others (a sensor answering EIO, a link without speed) are looked at
    again by ``refresh()``. The channel list is fixed between ``refresh()`` calls. When the
    joined text stops fitting the layout (a device appeared, a file vanished), ``read``
    re-discovers at once, fills what still exists (NaN for the rest) and sets ``changed``;
    ``refresh()`` then adopts the new channel list. Files that cannot be opened are listed
    in ``missing``.
    """

    def __init__(self, sources: Sequence[Source], mode: str = "uint") -> None:
        self.sources = tuple(sources)
        self.mode = mode
        self.missing: list[str] = []
        self.changed = False
        self._files: list[tuple[OpenFile, Source]] = []
        for source in sources:
            try:
                self._files.append((OpenFile(source.path), source))
            except OSError:
                self.missing.append(source.path)
        if not self._files:
            first = self.sources[0].path if self.sources else "?"
            raise OSError(errno.ENOENT, "no readable file", first)
        self._dynamic = any(src.dynamic for _, src in self._files)
        self.channels: list[str] = []
        self._adopt(self._texts(self._files))

    @staticmethod
    def _texts(files: list[tuple[OpenFile, Source]]) -> list[bytes]:
        texts = []
        for handle, source in files:
            try:
                text = handle.read()
            except OSError:
                text = b""  # vanished (a removed cgroup) or refused (a sensor): no values
            texts.append(source.prepare(text) if source.prepare is not None else text)
        return texts

    def _adopt(self, texts: list[bytes]) -> bool:
        """Discover every file from ``texts`` (one per file); True if channels changed."""
        layouts = [source.discover(text) for text, (_, source) in
                   zip(texts, self._files, strict=True)]
        self._live = [self._files[i] for i, lay in enumerate(layouts) if lay]
        self._dead = [self._files[i] for i, lay in enumerate(layouts) if not lay]
        # the hot path: bound read methods, and the few texts that need preparing
        self._readers = [handle.read for handle, _ in self._live]
        self._prepares = [(i, src.prepare) for i, (_, src) in enumerate(self._live)
                          if src.prepare is not None]
        live_texts = [texts[i] for i, lay in enumerate(layouts) if lay]
        layout = self._join([lay for lay in layouts if lay], live_texts)
        changed = list(layout) != self.channels
        self.channels = list(layout)
        self._parser = self._parser_for(b"\n".join(live_texts), layout)
        self._native = self._native_plan()
        return changed

    def _native_files(self) -> list[tuple[int, int, int, int]] | None:
        """``(fd, size, prepare code, split byte)`` of the live files for a C plan, or None
        (extension absent or off, a prepare function the C reader does not know)."""
        if not native_available():
            return None
        files = []
        for handle, source in self._live:
            prep = (0, 0) if source.prepare is None else _NATIVE_PREPARE.get(source.prepare)
            if prep is None:
                return None
            files.append((handle.fd, handle.size, prep[0], prep[1]))
        return files

    def _native_plan(self) -> Any:
        """The C plan of the live files, or None (see :meth:`_native_files`; also a layout
        off the fast path)."""
        files = self._native_files()
        return None if files is None else self._parser.native_plan(files)

    def native_sums(self, sums: Sequence[Sequence[int]], nout: int) -> Any:
        """A C plan filling ``nout`` sums of this group's channels (``sums[i]``: the slots
        channel ``i`` is added into), or None where the group is not read in C."""
        files = self._native_files() if self._native is not None else None
        return None if files is None else self._parser.native_plan(files, sums, nout)

    @property
    def native(self) -> bool:
        """True when this group is read by the C reader."""
        return self._native is not None

    def native_reader(self) -> Any:
        """The C plan reading this group each tick, or None."""
        return self._native

    @staticmethod
    def _join(layouts: list[Layout], texts: list[bytes]) -> Layout:
        """One layout over the joined texts (token indices shifted file by file)."""
        joined: Layout = {}
        base = 0
        for layout, text in zip(layouts, texts, strict=True):
            for channel, (pos, scale) in layout.items():
                joined.setdefault(channel, (base + pos, scale))
            base += len(text.split())
        return joined

    def _parser_for(self, data: bytes, layout: Layout) -> NumberParser:
        spots = [layout.get(name) for name in self.channels]
        return NumberParser(data, [s[0] if s else None for s in spots],
                            [s[1] if s else 1.0 for s in spots], self.mode)

    def read(self, out: np.ndarray) -> None:
        native = self._native
        if native is not None and native.read(out):
            return
        try:
            texts = [read() for read in self._readers]
        except OSError:  # one file vanished or refused: read them one by one
            texts = [b"" for _ in self._readers]
            for i, read in enumerate(self._readers):
                with contextlib.suppress(OSError):
                    texts[i] = read()
        for i, prepare in self._prepares:
            texts[i] = prepare(texts[i])
        data = b"\n".join(texts)
        if self._parser.parse(data, out):
            return
        layout = self._join([source.discover(text) for text, (_, source) in
                             zip(texts, self._live, strict=True)], texts)
        if list(layout) != self.channels:
            self.changed = True
        self._parser = self._parser_for(data, layout)
        self._native = self._native_plan()
        if not self._parser.parse(data, out):
            out[:] = np.nan

    def refresh(self) -> bool:
        """Re-discover (skipped when nothing moved); True when the channel list changed."""
        if not self._dynamic and not self.changed:
            dead_texts = self._texts(self._dead)
            still_dead = not any(source.discover(text) for text, (_, source) in
                                 zip(dead_texts, self._dead, strict=True))
            if still_dead and self._parser.same_labels(b"\n".join(self._texts(self._live))):
                return False
        self.changed = False
        return self._adopt(self._texts(self._files))

    def close(self) -> None:
        self._native = None
        for handle, _ in self._files:
            handle.close()
        self._files, self._live, self._dead, self._readers, self._prepares = [], [], [], [], []


@dataclass(frozen=True)
class GroupSpec:
    """What a :class:`FileGroup` reads: its sources and parse mode (compared on refresh),
    and ``period_s``: read every ``period_s`` seconds, its last values repeated on the
    ticks between (0: every tick)."""

    sources: tuple[Source, ...]
    mode: str = "uint"
    period_s: float = 0.0


PartFactory = Callable[[], Part]
PlanItem = GroupSpec | PartFactory


class FileProbe(Probe):
    """A probe made of parts (file groups) whose channels are concatenated in plan order.

    Subclasses implement :meth:`plan`, returning ``{key: GroupSpec or factory}`` for what is
    present now; ``open`` builds the parts, ``refresh`` re-plans (new disks, cgroups,
    ports), keeps parts whose spec is unchanged (refreshing them) and rebuilds the others.
    A part that cannot be opened is skipped and named in :attr:`skipped`.
    """

    #: True for probes whose sources come and go (cgroups): an empty start is not an error.
    empty_ok: bool = False
    options_help: ClassVar[dict[str, str]] = {
        "root": "read /proc and /sys under this directory instead of / (default: /)",
        "proc_root": "read procfs here, e.g. /proc/PID to see the network namespace of PID "
                     "(default: ROOT/proc)",
        "sys_root": "read sysfs here (default: ROOT/sys)",
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.proc_root, self.sys_root = roots(options)
        self._parts: dict[str, Part] = {}
        self._specs: dict[str, PlanItem] = {}
        self._slices: list[tuple[Part, slice]] = []
        #: parts read less often than every tick: their period (s), next read (monotonic
        #: s) and last values, for the Python path (the C thread keeps its own)
        self._slow: dict[int, tuple[float, float, np.ndarray]] = {}
        self.skipped: dict[str, str] = {}

    @abstractmethod
    def plan(self) -> dict[str, PlanItem]:
        """Keys and specs of the parts present now (cheap: listing, no parsing)."""

    def unavailable_reason(self) -> str:
        """Why the probe has no channel at all (shown when ``open`` fails)."""
        return f"{self.name}: no readable source under {self.proc_root} or {self.sys_root}"

    def open(self) -> None:
        self._parts, self._specs = {}, {}
        for key, item in self.plan().items():
            part = self._make(key, item)
            if part is not None:
                self._parts[key], self._specs[key] = part, item
        self._relayout()
        if not self.channels and not self.empty_ok:
            self.close()
            detail = "; ".join(f"{k}: {v}" for k, v in list(self.skipped.items())[:3])
            reason = self.unavailable_reason() + (f" ({detail})" if detail else "")
            self.status, self.reason = "unavailable", reason
            raise ProbeUnavailable(reason)

    def _make(self, key: str, item: PlanItem) -> Part | None:
        try:
            part = FileGroup(item.sources, item.mode) if isinstance(item, GroupSpec) else item()
        except (OSError, ValueError) as exc:
            self.skipped[key] = _short_error(exc)
            return None
        self.skipped.pop(key, None)
        return part

    def _period(self, key: str) -> float:
        """Seconds between reads of part ``key`` (0: every tick): its spec's ``period_s``,
        or the part's own ``period_s`` attribute."""
        spec = self._specs.get(key)
        if isinstance(spec, GroupSpec):
            return spec.period_s
        return float(getattr(self._parts.get(key), "period_s", 0.0))

    def _relayout(self) -> None:
        channels: list[str] = []
        self._slices = []
        self._slow = {}
        for key, part in self._parts.items():
            start = len(channels)
            channels.extend(part.channels)
            self._slices.append((part, slice(start, len(channels))))
            if self._period(key) > 0:
                self._slow[id(part)] = (self._period(key), 0.0,
                                        np.full(len(part.channels), np.nan))
        self.channels = channels

    def read(self, out: np.ndarray) -> None:
        for part, where in self._slices:
            slow = self._slow.get(id(part))
            if slow is None:
                part.read(out[where])
                continue
            period, due, held = slow
            now = time.monotonic()
            if now >= due:
                part.read(held)
                self._slow[id(part)] = (period, now + period, held)
            out[where] = held

    def native_parts(self) -> list[NativePart] | None:
        parts = []
        for part, where in self._slices:
            reader = getattr(part, "native_reader", None)
            reader = reader() if reader is not None else None
            if reader is None:
                return None
            slow = self._slow.get(id(part))
            parts.append(NativePart(reader, where.start, where.stop, part.read,
                                    slow[0] if slow else 0.0))
        return parts

    def refresh(self) -> bool:
        before = self.channels
        plan = self.plan()
        parts: dict[str, Part] = {}
        specs: dict[str, PlanItem] = {}
        for key, part in self._parts.items():
            if key not in plan or (isinstance(plan[key], GroupSpec)
                                   and plan[key] != self._specs.get(key)):
                part.close()
        for key, item in plan.items():
            part = self._parts.get(key)
            kept = part is not None and (not isinstance(item, GroupSpec)
                                         or item == self._specs.get(key))
            if kept and part is not None:
                part.refresh()
            else:
                part = self._make(key, item)
            if part is not None:
                parts[key], specs[key] = part, item
        self._parts, self._specs = parts, specs
        self._relayout()
        return self.channels != before

    def close(self) -> None:
        for part in self._parts.values():
            part.close()
        self._parts = {}
        self._slices = []


def _short_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)[:200]


def token_lines(data: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """Each line's tokens, with the index of its first one in ``data.split()`` (the token
    indices a :data:`Layout` holds)."""
    base = 0
    for line in data.split(b"\n"):
        toks = line.split()
        yield base, toks
        base += len(toks)


def key_value_layout(data: bytes, metric_prefix: str, labels: dict[str, str] | None = None,
                     kb_scale: bool = False) -> Layout:
    """Layout of ``name value [kB]`` lines (meminfo, vmstat, cpu.stat, memory.stat).

    ``name:`` colons are dropped and ``Active(anon)`` becomes ``Active_anon``; with
    ``kb_scale`` a value followed by ``kB`` is scaled to bytes.
    """
    layout: Layout = {}
    for base, toks in token_lines(data):
        if len(toks) >= 2 and _is_number(toks[1]):
            name = metric_name(toks[0])
            scale = 1024.0 if kb_scale and len(toks) > 2 and toks[2] == b"kB" else 1.0
            layout[format_channel(f"{metric_prefix}{name}", labels)] = (base + 1, scale)
    return layout


def metric_name(token: bytes) -> str:
    """A kernel field name made safe for a metric name (``Active(anon):`` → ``Active_anon``)."""
    text = token.decode("ascii", "replace").rstrip(":")
    text = text.replace("(", "_").replace(")", "")
    return "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in text)
