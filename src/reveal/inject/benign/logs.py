"""Housekeeping a host does on a schedule: a log rotated, a cron minute's short jobs."""

from __future__ import annotations

from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, register


@register
class LogRotation(BenignActivity):
    kind = "log_rotation"
    subsystem = "storage"
    description = "append ~20 MB of log lines, then rotate: rename, gzip, new empty file"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"bytes": 20 << 20}}
    tools = (("gzip", "gzip"),)

    def begin(self) -> None:
        log = self.make_scratch() / "app.log"
        self.start_work("logrotate", str(log), str(self.params["bytes"]))


@register
class CronBurst(BenignActivity):
    kind = "cron_burst"
    subsystem = "software"
    description = "a burst of ~100 short processes (true, date, sh -c) within ~2 s"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"processes": 100, "span_s": 2.0}}

    def begin(self) -> None:
        self.start_work("burst", str(self.params["processes"]), str(self.params["span_s"]))
