"""What ``reveal watch`` ships for running as a service: a systemd unit and a Grafana
dashboard (``grafana-dashboard.json`` beside this module)."""

from __future__ import annotations

import shlex
import shutil
import sys
from importlib import resources
from pathlib import Path

UNIT = """\
[Unit]
Description=Reveal: live anomaly detection on this host (reveal watch)
{docs}After=network-online.target
Wants=network-online.target

[Service]
Type=simple
ExecStart={exec_start}
# SIGTERM stops collection cleanly: the last segment is flushed, the state kept
KillSignal=SIGTERM
TimeoutStopSec=60
Restart=on-failure
RestartSec=5
{state_directory}# the tick thread asks for SCHED_FIFO priority 1; perf counters and eBPF need these
AmbientCapabilities=CAP_SYS_NICE CAP_PERFMON CAP_BPF CAP_SYS_ADMIN
LimitMEMLOCK=infinity
Nice=-5

[Install]
WantedBy=multi-user.target
"""


def systemd_unit(args: list[str], state: Path) -> str:
    """A unit running ``reveal watch`` with ``args`` (``--systemd-unit`` left out)."""
    reveal = shutil.which("reveal") or f"{sys.executable} -m reveal.cli"
    kept = [a for a in args if a != "--systemd-unit"]
    if "--state" not in kept and not any(a.startswith("--state=") for a in kept):
        kept = ["--state", str(state), *kept]
    command = " ".join([reveal, "watch", *(shlex.quote(a) for a in kept)])
    absolute = str(Path(state).absolute())
    # systemd creates /var/lib/NAME (owned by the service); another place must exist
    state_directory = (f"StateDirectory={absolute.removeprefix('/var/lib/')}\n"
                       if absolute.startswith("/var/lib/") else "")
    docs = Path(__file__).resolve().parents[3] / "docs" / "watch.md"  # a source checkout
    documentation = f"Documentation=file://{docs}\n" if docs.is_file() else ""
    return UNIT.format(exec_start=command, state_directory=state_directory,
                       docs=documentation)


def dashboard_json() -> str:
    """The Grafana dashboard (JSON text)."""
    return resources.files("reveal.live").joinpath("grafana-dashboard.json").read_text(
        encoding="utf-8")
