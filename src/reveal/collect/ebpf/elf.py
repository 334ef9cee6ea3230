"""Just enough ELF64 reading for tracing: exported functions and USDT probe names.

Only the section headers and the sections needed are read (``.dynsym``/``.dynstr``,
optionally ``.symtab``/``.strtab``, ``.note.stapsdt``), so a 200 MB ``libnccl`` costs a few
small reads. A file that is not a little-endian ELF64 (or is truncated) yields
:class:`ElfError`; callers treat that as "exports nothing".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_NOTE = struct.Struct("<III")

_SHT_SYMTAB, _SHT_NOTE, _SHT_DYNSYM = 2, 7, 11
_STT_FUNC, _STT_GNU_IFUNC = 2, 10
_NT_STAPSDT = 3
_MAX_SECTION = 1 << 28  # refuse absurd section sizes from a corrupt file


class ElfError(Exception):
    """The file is not an ELF64 little-endian object we can read."""


@dataclass
class ElfInfo:
    """What tracing needs from one ELF file.

    ``functions``: defined function symbols (name → address); ``usdt``: USDT probes as
    ``(provider, name)``.
    """

    functions: dict[str, int] = field(default_factory=dict)
    usdt: set[tuple[str, str]] = field(default_factory=set)


@dataclass(frozen=True)
class _Section:
    name_off: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def _read_at(handle: BinaryIO, offset: int, size: int) -> bytes:
    if size < 0 or size > _MAX_SECTION:
        raise ElfError(f"section of {size} bytes")
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ElfError("truncated file")
    return data


def _sections(handle: BinaryIO) -> tuple[list[_Section], bytes]:
    header = handle.read(_EHDR.size)
    if len(header) < _EHDR.size or header[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if header[4] != 2 or header[5] != 1:
        raise ElfError("not ELF64 little-endian")
    fields = _EHDR.unpack(header)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    if shoff == 0 or shnum == 0 or shentsize < _SHDR.size:
        raise ElfError("no section headers")
    table = _read_at(handle, shoff, shentsize * shnum)
    sections = []
    for i in range(shnum):
        f = _SHDR.unpack_from(table, i * shentsize)
        sections.append(_Section(f[0], f[1], f[4], f[5], f[6], f[9]))
    if shstrndx >= shnum:
        raise ElfError("bad section-name index")
    names = sections[shstrndx]
    return sections, _read_at(handle, names.offset, names.size)


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def _symbols(handle: BinaryIO, sections: list[_Section], section: _Section,
             out: dict[str, int]) -> None:
    if section.link >= len(sections) or section.entsize < _SYM.size:
        return
    strtab = sections[section.link]
    names = _read_at(handle, strtab.offset, strtab.size)
    data = _read_at(handle, section.offset, section.size)
    for off in range(0, len(data) - _SYM.size + 1, section.entsize):
        name_off, info, _other, shndx, value, _size = _SYM.unpack_from(data, off)
        if shndx == 0 or (info & 0xF) not in (_STT_FUNC, _STT_GNU_IFUNC) or value == 0:
            continue
        name = _cstr(names, name_off)
        if name:
            out.setdefault(name, value)


def _stapsdt(data: bytes, out: set[tuple[str, str]]) -> None:
    pos = 0
    while pos + _NOTE.size <= len(data):
        namesz, descsz, ntype = _NOTE.unpack_from(data, pos)
        pos += _NOTE.size
        name_end = pos + ((namesz + 3) & ~3)
        desc = data[name_end:name_end + descsz]
        pos = name_end + ((descsz + 3) & ~3)
        if ntype != _NT_STAPSDT or len(desc) < 24:
            continue
        parts = desc[24:].split(b"\0")
        if len(parts) >= 2:
            out.add((parts[0].decode("utf-8", "replace"), parts[1].decode("utf-8", "replace")))


def read_elf(path: str, full_symtab: bool = False) -> ElfInfo:
    """Exported functions (``.dynsym``; plus ``.symtab`` when ``full_symtab``) and USDT
    probes of the ELF file at ``path``. Raises :class:`ElfError` or ``OSError``."""
    info = ElfInfo()
    with open(path, "rb") as handle:
        sections, shstr = _sections(handle)
        for section in sections:
            if section.type == _SHT_DYNSYM or (full_symtab and section.type == _SHT_SYMTAB):
                _symbols(handle, sections, section, info.functions)
            elif section.type == _SHT_NOTE and _cstr(shstr, section.name_off) == ".note.stapsdt":
                _stapsdt(_read_at(handle, section.offset, section.size), info.usdt)
    return info
