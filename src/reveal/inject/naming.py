"""Names of everything the injection suite creates, so leftovers can be found and removed.

Every namespace, interface, temporary directory, state file and process the suite makes
carries the prefix :data:`PREFIX` and the id of the process that owns it. ``reveal validate
--cleanup`` removes those whose owner is no longer alive.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

PREFIX = "rvinj"
#: Environment variable set on every process the suite starts (value: owner pid).
TAG_ENV = "REVEAL_INJECT_OWNER"
_OWNED = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-")
#: the prefix of the suite's interfaces in the host's namespace (``rvi<pid>a``,
#: ``rvi<pid>b``: :class:`reveal.inject.veth_pair.NetnsPair`)
IFNAME_PREFIX = "rvi"
_OWNED_IFNAME = re.compile(rf"^{IFNAME_PREFIX}(?P<pid>\d+)[ab]$")


def owner_pid() -> int:
    return os.getpid()


def owned_name(kind: str, pid: int | None = None) -> str:
    """``rvinj-<pid>-<kind>``: a name for a namespace, directory or state file."""
    return f"{PREFIX}-{pid if pid is not None else owner_pid()}-{kind}"


def owner_of(name: str) -> int | None:
    """The owner pid encoded in a suite name, else None (not ours)."""
    match = _OWNED.match(name)
    return int(match.group("pid")) if match else None


def ifname_owner(name: str) -> int | None:
    """The owner pid encoded in a suite interface's name (``rvi<pid>a``), else None."""
    match = _OWNED_IFNAME.match(name)
    return int(match.group("pid")) if match else None


def temp_root() -> Path:
    """Where the suite puts temporary files (the system temp dir)."""
    return Path(tempfile.gettempdir())


def tagged_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus the owner tag (and ``extra``)."""
    env = dict(os.environ)
    env[TAG_ENV] = str(owner_pid())
    if extra:
        env.update(extra)
    return env


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
