"""What the job itself does now and then: a checkpoint, an epoch boundary, a little more
load on the host.

The epoch boundary writes its shard files and then reads them back inside the episode:
the Fault contract has no step before the episode starts (``check()`` runs in the middle
of the recording, right before ``begin()``), so staging the data there would put
unlabelled disk writes into the run. The files are evicted from the page cache between
the two (``POSIX_FADV_DONTNEED``), so the read is the cold read a new epoch does.
"""

from __future__ import annotations

from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, register


@register
class Checkpoint(BenignActivity):
    kind = "checkpoint"
    subsystem = "storage"
    description = "the job's checkpoint: ~150 MB written in 4 MiB chunks, fsynced"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"bytes": 150 << 20, "chunk": 4 << 20}}

    def check_host(self) -> str | None:
        return self.check_disk_room(int(self.params["bytes"]))

    def begin(self) -> None:
        path = self.make_scratch() / "checkpoint.pt"
        self.start_work("checkpoint", str(path), str(self.params["bytes"]),
                        str(self.params["chunk"]))


@register
class EpochBoundary(BenignActivity):
    kind = "epoch_boundary"
    subsystem = "storage"
    description = "a data loader's epoch: ~200 MB of shards staged, evicted, read through"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"bytes": 200 << 20, "files": 50}}

    def check_host(self) -> str | None:
        return self.check_disk_room(int(self.params["bytes"]))

    def begin(self) -> None:
        self.start_work("epoch", str(self.make_scratch() / "shards"),
                        str(self.params["files"]), str(self.params["bytes"]))


@register
class LoadChange(BenignActivity):
    kind = "load_change"
    subsystem = "cpu"
    description = "host load a few percent higher: one process busy 5 ms of every 100 ms"
    INTENSITIES: ClassVar = {"default": {"busy_s": 0.005, "period_s": 0.1}}

    def begin(self) -> None:
        self.start_work("duty", str(self.params["busy_s"]), str(self.params["period_s"]))

    def finished(self) -> bool:
        return False
