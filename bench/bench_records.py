"""Share of the records of every source that the probes record, C and Python readers.

1. The simulated big host (tests/fixtures/bighost: 256 CPUs, 64 NICs, 64 disks, 409
   interrupt rows): every file probe opened on the tree, its channels and values compared
   with an independent reading of the generated text (the readers of tests/test_bighost.py).
2. A network namespace this benchmark creates with 120 links (60 veth pairs): the network
   probe on ``/proc/PID/net`` of a process inside it, a real seq_file several pages long,
   against the namespace's own list of links; and what one ``pread`` of a large buffer would
   have given (the reader before whole-file reads), for comparison.

    python bench/bench_records.py              # → bench/results/records.json (needs root)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from provenance import arguments, script_argv, write_result
from reveal.collect import _procfs
from reveal.collect.cpu import CpuProbe
from reveal.collect.interrupts import InterruptsProbe
from reveal.collect.memory import MemoryProbe
from reveal.collect.network import NetworkProbe
from reveal.collect.power import PowerProbe
from reveal.collect.pressure import PressureProbe
from reveal.collect.storage import StorageProbe
from reveal.frame import parse_channel

ROOT = Path(__file__).resolve().parent.parent
N_PAIRS = 60


def _load(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _share(probe: Any, expected: dict[str, float]) -> dict[str, Any]:
    """Open, read once, close: expected channels present with their value, as a share."""
    probe.open()
    try:
        out = np.full(len(probe.channels), np.nan)
        probe.read(out)
        got = dict(zip(probe.channels, out.tolist(), strict=True))
        in_c = any(getattr(p, "native", False) for p in probe._parts.values())
    finally:
        probe.close()
    same = sum(1 for k, v in expected.items() if k in got and np.isclose(got[k], v,
                                                                         rtol=1e-12, atol=0))
    return {"expected": len(expected), "recorded": same,
            "share_pct": round(100.0 * same / len(expected), 3) if expected else None,
            "read_in_c": in_c}


def big_host() -> dict[str, Any]:
    tests = _load("reveal_bench_bighost_readers", ROOT / "tests/test_bighost.py")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="reveal-records-") as tmp:
        host = tests.bighost.make_tree(tmp, seed=11)
        roots = tests.roots(host)
        cases = {
            "cpu": (lambda: CpuProbe(**roots), tests.expect_cpu),
            "interrupts (totals)": (lambda: InterruptsProbe(**roots, detail="totals"),
                                    tests.expect_irq_totals),
            "interrupts (full)": (lambda: InterruptsProbe(**roots, detail="full"),
                                  tests.expect_irq_full),
            "memory": (lambda: MemoryProbe(**roots), tests.expect_memory),
            "storage": (lambda: StorageProbe(**roots), tests.expect_storage),
            "network": (lambda: NetworkProbe(**roots), tests.expect_network),
            "pressure": (lambda: PressureProbe(**roots), tests.expect_pressure),
            "power": (lambda: PowerProbe(**roots), tests.expect_power),
        }
        before = _procfs.USE_NATIVE
        try:
            for reader in ("python", "c"):
                _procfs.USE_NATIVE = reader == "c" and _procfs._procread is not None
                for name, (make, expect) in cases.items():
                    results[f"{name} [{reader}]"] = _share(make(), expect(host))
        finally:
            _procfs.USE_NATIVE = before
    return results


def _links_in(text: bytes) -> set[str]:
    return {line.split(b":")[0].strip().decode() for line in text.splitlines() if b":" in line}


def crowded_namespace() -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return {"skipped": "needs root and iproute2"}
    name = f"rvinj-{os.getpid()}-records"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    sleeper = None
    try:
        batch = "".join(f"link add rvrca{i} type veth peer name rvrcb{i}\n"
                        for i in range(N_PAIRS))
        subprocess.run(["ip", "-n", name, "-batch", "-"], input=batch.encode(), check=True,
                       capture_output=True)
        listed = subprocess.run(["ip", "-n", name, "-o", "link", "show"], check=True,
                                capture_output=True, text=True).stdout
        links = {line.split(":")[1].strip().split("@")[0] for line in listed.splitlines()}
        sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "60"])
        for _ in range(100):
            try:
                if os.readlink(f"/proc/{sleeper.pid}/ns/net") != os.readlink(
                        "/proc/self/ns/net"):
                    break
            except OSError:
                pass
            time.sleep(0.02)
        path = f"/proc/{sleeper.pid}/net/dev"
        fd = os.open(path, os.O_RDONLY)
        try:
            one_read = os.pread(fd, 1 << 20, 0)
            whole = _procfs.pread_all(fd, 4096)
        finally:
            os.close(fd)
        result: dict[str, Any] = {
            "links": len(links), "net_dev_bytes": len(whole),
            "one_pread_bytes": len(one_read),
            "one_pread_links_share_pct": round(100.0 * len(_links_in(one_read) & links)
                                               / len(links), 2),
        }
        before = _procfs.USE_NATIVE
        try:
            for reader in ("python", "c"):
                _procfs.USE_NATIVE = reader == "c" and _procfs._procread is not None
                probe = NetworkProbe(proc_root=f"/proc/{sleeper.pid}", infiniband=False,
                                     softnet=False)
                probe.open()
                try:
                    out = np.full(len(probe.channels), np.nan)
                    probe.read(out)
                    seen = {parse_channel(c)[1]["iface"] for c, v in zip(
                        probe.channels, out, strict=True)
                        if c.startswith("net.rx_bytes") and np.isfinite(v)}
                    in_c = probe.native_parts() is not None
                finally:
                    probe.close()
                result[f"probe_links_share_pct [{reader}]"] = round(
                    100.0 * len(seen & links) / len(links), 2)
                result[f"read_in_c [{reader}]"] = in_c
        finally:
            _procfs.USE_NATIVE = before
        return result
    finally:
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/records.json")
    args = parser.parse_args(argv)
    result = {"bench": "records", "started_unix": time.time(),
              "command": "python bench/bench_records.py",
              "big_host": big_host(), "namespace_120_links": crowded_namespace()}
    shares = [v["share_pct"] for v in result["big_host"].values()]
    ns = result["namespace_120_links"]
    shares += [v for k, v in ns.items() if k.startswith("probe_links_share_pct")]
    result["min_share_pct"] = min(shares)
    write_result(args.out, result, arguments(args), script_argv(__file__, argv), indent=2)
    print(json.dumps({"min_share_pct": result["min_share_pct"], "namespace": ns}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
