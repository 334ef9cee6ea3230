"""An ssh-like login without sshd: ``su -l`` starts a login shell for an unprivileged user
(PAM session, profile files read), which runs a few commands and exits."""

from __future__ import annotations

import os
import pwd
from typing import ClassVar

from reveal.inject.benign.base import BenignActivity, register

_COMMANDS = "id; ls / >/dev/null; cat /etc/motd 2>/dev/null; true"


@register
class SshLogin(BenignActivity):
    kind = "ssh_login"
    subsystem = "software"
    description = "a login shell (su -l nobody -s /bin/bash) reads its profile, runs id/ls, exits"
    self_ending = True
    INTENSITIES: ClassVar = {"default": {"user": "nobody", "shell": "/bin/bash"}}
    tools = (("su", "util-linux"),)

    def check_host(self) -> str | None:
        if os.geteuid() != 0:
            return "su to another user without a password needs root"
        try:
            pwd.getpwnam(str(self.params["user"]))
        except KeyError:
            return f"no user {self.params['user']!r} on this host"
        if not os.access(str(self.params["shell"]), os.X_OK):
            return f"{self.params['shell']} is not installed"
        return None

    def begin(self) -> None:
        self.start_process(["su", "-l", str(self.params["user"]), "-s",
                            str(self.params["shell"]), "-c", _COMMANDS])
