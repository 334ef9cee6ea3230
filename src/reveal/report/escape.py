"""Escaping of untrusted text (tenant-chosen cgroup, container, interface names)."""

from __future__ import annotations

import html
import re

# C0/C1 control characters (terminal escapes, newlines) and the invisible formatting ones
# that reorder or hide text on screen (bidirectional overrides and isolates, zero-width)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+!|~])")


def plain(text: str, limit: int = 200) -> str:
    """Printable text: control and invisible formatting characters (bidirectional
    overrides, zero-width) become ``?``, long text is cut with ``…``."""
    text = _CONTROL.sub("?", str(text))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def markdown(text: str, limit: int = 200) -> str:
    """Text safe inside a Markdown table cell: no control characters, specials escaped."""
    return _MD_SPECIAL.sub(r"\\\1", plain(text, limit))


def html_text(text: str, limit: int = 200) -> str:
    """Text safe inside HTML element content or a quoted attribute."""
    return html.escape(plain(text, limit), quote=True)
