"""Escaping of untrusted text (tenant-chosen cgroup, container, interface names)."""

from __future__ import annotations

import html
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def plain(text: str, limit: int = 200) -> str:
    """Printable text: control characters become ``?``, long text is cut with ``…``."""
    text = _CONTROL.sub("?", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown(text: str, limit: int = 200) -> str:
    """Text safe inside a Markdown table cell: no control characters, specials escaped."""
    return _MD_SPECIAL.sub(r"\\\1", plain(text, limit))


def html_text(text: str, limit: int = 200) -> str:
    """Text safe inside HTML element content or a quoted attribute."""
    return html.escape(plain(text, limit), quote=True)
