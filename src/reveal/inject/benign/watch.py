"""The watch restarting: ``reveal watch`` stopped and started again on its state directory.

An operator restarts the watch (a package upgrade, a configuration change, a host agent
restarted by systemd): the new process loads the saved model and scores at once, and its
first windows hold its own start (imports, the collector opening its probes). That is no
fault. The kind needs the running watch of ``reveal validate --benign --live``, which
hands it a ``restart_watch`` callable in the fault context; the batch suite has no watch
and leaves it out (:data:`reveal.inject.benign.LIVE_ONLY`).
"""

from __future__ import annotations

from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, register


@register
class WatchRestart(BenignActivity):
    kind: ClassVar[str] = "watch_restart"
    subsystem: ClassVar[str] = "software"
    description: ClassVar[str] = ("reveal watch stopped (SIGTERM) and started again on its "
                                  "state directory, scoring with the saved model")

    def check(self) -> str | None:
        if self.context.restart_watch is None:
            return "needs a running watch (reveal validate --benign --live)"
        return super().check()

    def begin(self) -> None:
        """Restart the watch; returns once the new process scores again."""
        assert self.context.restart_watch is not None
        self.context.restart_watch()
