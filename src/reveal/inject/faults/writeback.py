"""Dirty-page / writeback storm: a bounded buffered write that sits dirty in the page
cache, then ``sync`` forces it out. The file is deleted at the end (page cache freed)."""

from __future__ import annotations

from typing import ClassVar

from reveal.inject.faults.base import Fault, register


@register
class WritebackStorm(Fault):
    kind = "writeback_storm"
    subsystem = "memory"
    description = "buffered dd of a bounded size, held dirty, then sync"
    self_ending = True
    INTENSITIES: ClassVar = {
        "low": {"bytes": 512 << 20, "hold_s": 4.0},
        "high": {"bytes": 2 << 30, "hold_s": 4.0},
    }
    tools = (("dd", "coreutils"),)

    def check_host(self) -> str | None:
        return self.check_disk_room(self.params["bytes"])

    @property
    def path(self):  # type: ignore[no-untyped-def]
        return self.context.workdir / "writeback.dat"

    def begin(self) -> None:
        mib = self.params["bytes"] >> 20
        script = ('dd if=/dev/zero of="$1" bs=1M count="$2" status=none && '
                  'sleep "$3" && sync "$1"')
        self.start_process(["sh", "-c", script, "writeback", str(self.path), str(mib),
                            str(self.params["hold_s"])])

    def end(self) -> None:
        super().end()
        self.remove_file(self.path)
