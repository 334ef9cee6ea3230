"""Disk I/O burst: fio with direct I/O on a bounded file in the suite's scratch directory
(``dd oflag=direct`` when fio is absent)."""

from __future__ import annotations

import shutil
from typing import ClassVar

from reveal.inject.faults.base import Fault, register


@register
class DiskBurst(Fault):
    kind = "disk_burst"
    subsystem = "storage"
    description = "fio random read/write with O_DIRECT on a bounded file"
    INTENSITIES: ClassVar = {
        "low": {"file_bytes": 256 << 20, "block": "4k", "rate_iops": 400},
        "high": {"file_bytes": 256 << 20, "block": "64k", "rate_iops": 0},
    }

    def check_host(self) -> str | None:
        if shutil.which("fio") is None and shutil.which("dd") is None:
            return "neither fio nor dd is installed (apt-get install fio)"
        return None

    @property
    def path(self):  # type: ignore[no-untyped-def]
        return self.context.workdir / "disk_burst.dat"

    def begin(self) -> None:
        size_mib = self.params["file_bytes"] >> 20
        if shutil.which("fio"):
            argv = ["fio", "--name=rvinj-disk", f"--filename={self.path}",
                    f"--size={size_mib}M", "--direct=1", "--rw=randrw", "--rwmixread=50",
                    f"--bs={self.params['block']}", "--ioengine=psync", "--iodepth=1",
                    "--time_based", "--runtime=600", "--numjobs=1", "--group_reporting",
                    "--output-format=terse"]
            if self.params["rate_iops"]:
                argv.append(f"--rate_iops={self.params['rate_iops']}")
            self.params["tool"] = "fio"
        else:
            script = ('while :; do dd if=/dev/zero of="$1" bs=1M count="$2" oflag=direct '
                      'status=none; done')
            argv = ["sh", "-c", script, "disk", str(self.path), str(size_mib)]
            self.params["tool"] = "dd"
        self.start_process(argv)

    def end(self) -> None:
        super().end()
        self.remove_file(self.path)
