"""CPU quota throttling of the job: a CPU limit set on the job's own cgroup (cgroup v2
``cpu.max``, v1 ``cpu.cfs_quota_us``), then the original limit restored.

The job's cgroup is the one :class:`reveal.inject.jobcgroup.JobCgroup` made for this
process (``rvinj-<pid>-job``). The
quota is a share of one CPU per 100 ms period. The cgroup goes away with the suite, so a
quota left by a killed process dies with it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import ClassVar

from reveal.inject.faults.base import Fault, FaultContext, register
from reveal.inject.jobcgroup import cpu_hierarchies
from reveal.inject.naming import owned_name

PERIOD_US = 100_000


def job_cgroups(context: FaultContext) -> list[Path]:
    """The job's cgroup directories that carry a CPU quota file (v2 or v1)."""
    del context  # the job cgroup is named after this process, not the context
    candidates = [h / owned_name("job") for h in cpu_hierarchies()]
    return [p for p in candidates if (p / "cpu.max").is_file()
            or (p / "cpu.cfs_quota_us").is_file()]


@register
class CgroupThrottle(Fault):
    kind = "cgroup_throttle"
    subsystem = "cpu"
    description = "CPU quota on the job's cgroup (cpu.max / cpu.cfs_quota_us)"
    INTENSITIES: ClassVar = {
        "low": {"cpus": 0.5},
        "high": {"cpus": 0.2},
    }

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.saved: list[tuple[Path, str]] = []

    def check_host(self) -> str | None:
        if not job_cgroups(self.context):
            return "the job has no cgroup with a CPU quota file (needs root and a job cgroup)"
        return None

    def begin(self) -> None:
        quota = max(1000, int(float(self.params["cpus"]) * PERIOD_US))
        self.params["quota_us"] = quota
        self.params["period_us"] = PERIOD_US
        self.params["where"] = [owned_name("job")]  # what a claim should name
        for path in job_cgroups(self.context):
            v2 = path / "cpu.max"
            if v2.is_file():
                self.saved.append((v2, v2.read_text().strip()))
                v2.write_text(f"{quota} {PERIOD_US}\n")
                continue
            period = path / "cpu.cfs_period_us"
            self.saved.append((period, period.read_text().strip()))
            self.saved.append((path / "cpu.cfs_quota_us",
                               (path / "cpu.cfs_quota_us").read_text().strip()))
            period.write_text(f"{PERIOD_US}\n")
            (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")

    def end(self) -> None:
        # Quota before period (v1 refuses a period shorter than the quota in force).
        for path, value in sorted(self.saved, key=lambda s: s[0].name != "cpu.cfs_quota_us"):
            with contextlib.suppress(OSError):
                path.write_text(f"{value}\n")
        self.saved.clear()

    def finished(self) -> bool:
        return False
