"""Interrupt/softirq storm: a small-packet UDP flood across the suite's veth pair.

A sender in namespace A sends fixed-size datagrams at a bounded rate (packets per second)
to a receiver in namespace B that drains them. Run as a module, this file is that sender /
receiver (``python -m reveal.inject.faults.udp_flood send|recv ...``).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
import time
from typing import ClassVar

from reveal.inject.faults.base import _python_argv, register
from reveal.inject.faults.network import _VethFault

PORT = 29613


@register
class UdpFlood(_VethFault):
    kind = "udp_flood"
    subsystem = "network"
    description = "small-packet UDP flood over the veth pair at a bounded rate"
    INTENSITIES: ClassVar = {
        "low": {"pps": 20000, "payload_bytes": 64},
        "high": {"pps": 80000, "payload_bytes": 64},
    }

    def begin(self) -> None:
        pair = self.pair
        self.start_process([*pair.exec_prefix(1), *_python_argv(__name__), "recv",
                            "--bind", pair.addrs[1], "--port", str(PORT)])
        time.sleep(0.2)
        self.start_process([*pair.exec_prefix(0), *_python_argv(__name__), "send",
                            "--to", pair.addrs[1], "--port", str(PORT),
                            "--pps", str(self.params["pps"]),
                            "--size", str(self.params["payload_bytes"]), "--max-s", "600"])


def _send(addr: str, port: int, pps: int, size: int, max_s: float) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = b"\0" * size
    slot_s = 0.005
    per_slot = max(1, round(pps * slot_s))
    start = time.monotonic()
    next_slot = start
    target = (addr, port)
    while time.monotonic() - start < max_s:
        for _ in range(per_slot):
            with contextlib.suppress(OSError):
                sock.sendto(payload, target)
        next_slot += slot_s
        delay = next_slot - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -0.5:
            next_slot = time.monotonic()  # cannot keep up: do not burst to catch up


def _recv(addr: str, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind((addr, port))
    while True:
        sock.recv(2048)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="role", required=True)
    send = sub.add_parser("send")
    send.add_argument("--to", required=True)
    send.add_argument("--port", type=int, default=PORT)
    send.add_argument("--pps", type=int, required=True, help="packets per second")
    send.add_argument("--size", type=int, default=64, help="payload bytes")
    send.add_argument("--max-s", type=float, default=60.0, help="stop after this many seconds")
    recv = sub.add_parser("recv")
    recv.add_argument("--bind", required=True)
    recv.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args(argv)
    if args.role == "send":
        _send(args.to, args.port, args.pps, args.size, args.max_s)
    else:
        _recv(args.bind, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
