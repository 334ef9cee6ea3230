"""Reserved-but-unused HugePages: ``vm.nr_hugepages`` raised, nothing maps them, then
restored. Static configuration-like change, visible across hosts (cross-host analysis).

The original value is written to ``/tmp/rvinj-<pid>-hugepages.json`` before the change so
``reveal validate --cleanup`` can restore it after a SIGKILL.
"""

from __future__ import annotations

import json
import os
from typing import ClassVar

from reveal.inject.cleanup import HUGEPAGES_FILE, read_hugepages
from reveal.inject.faults.base import Fault, register
from reveal.inject.naming import owned_name, temp_root


@register
class ReservedHugePages(Fault):
    kind = "hugepages_reserved"
    subsystem = "memory"
    description = "vm.nr_hugepages raised and left unused"
    INTENSITIES: ClassVar = {
        "low": {"pages": 128},
        "high": {"pages": 512},
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.original: int | None = None
        self.state = temp_root() / f"{owned_name('hugepages')}.json"

    def check_host(self) -> str | None:
        if read_hugepages() is None:
            return f"{HUGEPAGES_FILE} is not readable"
        if not os.access(HUGEPAGES_FILE, os.W_OK):
            return f"{HUGEPAGES_FILE} is not writable (needs root)"
        return None

    def begin(self) -> None:
        self.original = read_hugepages()
        self.state.write_text(json.dumps({"original": self.original}))
        target = int(self.original or 0) + int(self.params["pages"])
        HUGEPAGES_FILE.write_text(f"{target}\n")
        self.params["reserved_pages"] = (read_hugepages() or 0) - int(self.original or 0)

    def end(self) -> None:
        if self.original is not None:
            HUGEPAGES_FILE.write_text(f"{self.original}\n")
            self.original = None
        self.state.unlink(missing_ok=True)

    def finished(self) -> bool:
        return False
