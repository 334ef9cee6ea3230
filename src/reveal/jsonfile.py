"""Reading a JSON file of Reveal's that names its own format (``{"format": ...}``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reveal.errors import InputError


def read_format_json(path: Path, format_name: str, what: str, kind: str) -> dict[str, Any]:
    """The JSON object in ``path`` whose ``format`` is ``format_name``; ``InputError`` naming
    the file when it is unreadable (``unreadable WHAT``) or of another format (``not a
    FORMAT_NAME KIND``)."""
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"unreadable {what} ({exc})", str(path)) from None
    if not isinstance(payload, dict) or payload.get("format") != format_name:
        raise InputError(f"not a {format_name} {kind}", str(path))
    return payload
