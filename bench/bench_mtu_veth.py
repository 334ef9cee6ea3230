"""What a lowered MTU costs on the suite's veth pair: TCP throughput (bytes per second) and
packets received per second between the two namespaces at MTU 1500 and 576, alternated
twice. Root; writes ``--result`` (JSON)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from provenance import arguments, write_result
from reveal.inject import processes
from reveal.inject.veth_pair import SUBNET_ADDRS, NetnsPair

PORT = 5201
#: MTUs measured, in turn (bytes)
MTUS = (1500, 576, 1500, 576)
RECEIVE = ("import socket\ns=socket.socket()\n"
           "s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
           f"s.bind(('0.0.0.0',{PORT}));s.listen(1);c,_=s.accept();n=0\n"
           "while True:\n b=c.recv(1<<20)\n if not b: break\n n+=len(b)\nprint(n)\n")


def _send(addr: str, seconds: float) -> str:
    return (f"import socket,time\ns=socket.create_connection(('{addr}',{PORT}))\n"
            f"buf=b'x'*(1<<16);t=time.time()\n"
            f"while time.time()-t<{seconds}: s.sendall(buf)\ns.close()\n")


def _rx_packets(pair: NetnsPair) -> int:
    text = processes.run([*pair.exec_prefix(1), "cat", "/proc/net/dev"]).stdout
    line = next(r for r in text.splitlines() if pair.ifnames[1] in r)
    return int(line.split(":")[1].split()[1])


def measure(pair: NetnsPair, mtu: int, seconds: float) -> dict[str, float]:
    """Bytes and packets per second of one TCP stream from side 0 to side 1 at ``mtu``."""
    for side in (0, 1):
        processes.run([*pair.exec_prefix(side), "ip", "link", "set", "dev",
                       pair.ifnames[side], "mtu", str(mtu)])
    receiver = subprocess.Popen([*pair.exec_prefix(1), sys.executable, "-c", RECEIVE],
                                stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    packets, start = _rx_packets(pair), time.monotonic()
    subprocess.run([*pair.exec_prefix(0), sys.executable, "-c",
                    _send(SUBNET_ADDRS[1], seconds)], check=True)
    received = int(receiver.communicate(timeout=60)[0].split()[-1])
    elapsed = time.monotonic() - start
    return {"mtu_bytes": mtu, "bytes_per_s": round(received / elapsed),
            "rx_packets_per_s": round((_rx_packets(pair) - packets) / elapsed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--result", type=Path, default=Path("bench/results/mtu_veth.json"))
    args = parser.parse_args()
    with NetnsPair(tag="mtu") as pair:
        rows = [measure(pair, mtu, args.seconds) for mtu in MTUS]
    for row in rows:
        print(row)
    write_result(args.result, {"benchmark": "mtu_veth", "rows": rows},
                 {**arguments(args), "mtus_bytes": list(MTUS)})


if __name__ == "__main__":
    main()
