"""Container identity from cgroup paths: table-driven over the shapes runtimes really make
(cgroup v1 and v2, cgroupfs and systemd drivers), then a real cgroup this test creates,
named as Docker names its scopes, with a process of the test inside."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from reveal.collect.cgroup import CgroupProbe, cgroup_mounts
from reveal.collect.containers import (
    Identity,
    identify,
    label_value,
    parse_proc_cgroup,
    process_identity,
)
from reveal.frame import format_channel, parse_channel

ID = "3f4e5a6b7c8d" + "0123456789abcdef" * 3 + "0123"  # 64 hex digits
SHORT = ID[:12]
UID = "0c6b4c5e-9d1f-4a3b-8f2e-123456789abc"
UID_ = UID.replace("-", "_")

CASES = [
    # Docker
    (f"/system.slice/docker-{ID}.scope", {"container": f"docker:{SHORT}"}),
    (f"/docker/{ID}", {"container": f"docker:{SHORT}"}),
    (f"docker/{ID}", {"container": f"docker:{SHORT}"}),  # a probe's relative path
    (f"/docker/{'a' * 64}/docker/{ID}", {"container": f"docker:{SHORT}"}),  # innermost
    (f"/moby/{ID}", {"container": f"docker:{SHORT}"}),
    # Kubernetes, cgroupfs driver (v1 paths), pod and container levels
    (f"/kubepods/burstable/pod{UID}", {"pod": UID}),
    (f"/kubepods/burstable/pod{UID}/{ID}", {"pod": UID, "container": SHORT}),
    (f"/kubepods/pod{UID}/{ID}", {"pod": UID, "container": SHORT}),
    (f"/kubepods/besteffort/pod{UID}/{ID}", {"pod": UID, "container": SHORT}),
    # Kubernetes, systemd driver (v2 paths)
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
     {"pod": UID}),
    (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
     f"cri-containerd-{ID}.scope", {"pod": UID, "container": f"containerd:{SHORT}"}),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope",
     {"pod": UID, "container": f"cri-o:{SHORT}"}),
    (f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/"
     f"docker-{ID}.scope", {"pod": UID, "container": f"docker:{SHORT}"}),
    (f"/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{ID}.scope", {"pod": UID}),
    # containerd without Kubernetes, nerdctl
    (f"/system.slice/containerd-{ID}.scope", {"container": f"containerd:{SHORT}"}),
    (f"/nerdctl.slice/nerdctl-{ID}.scope", {"container": f"containerd:{SHORT}"}),
    (f"/k8s.io/{ID}", {"container": f"containerd:{SHORT}"}),
    (f"/default/{ID}", {"container": f"containerd:{SHORT}"}),
    # podman / libpod (systemd and cgroupfs), its monitor is no container
    (f"/machine.slice/libpod-{ID}.scope", {"container": f"podman:{SHORT}"}),
    (f"/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope",
     {"container": f"podman:{SHORT}"}),
    (f"/libpod_parent/libpod-{ID}", {"container": f"podman:{SHORT}"}),
    (f"/machine.slice/libpod-conmon-{ID}.scope", {}),
    # LXC and systemd-machined
    ("/lxc/web01", {"container": "lxc:web01"}),
    ("/lxc.payload.web01", {"container": "lxc:web01"}),
    ("/machine.slice/machine-qemu\\x2d1\\x2dubuntu.scope", {"container": "machine:qemu-1-ubuntu"}),
    # systemd services and plain cgroups
    ("/system.slice/nginx.service", {"service": "nginx.service"}),
    ("/system.slice/system-getty.slice/getty@tty1.service", {"service": "getty@tty1.service"}),
    ("/user.slice/user-1000.slice/user@1000.service", {"service": "user@1000.service"}),
    ("/system.slice/foo\\x2dbar.service", {"service": "foo-bar.service"}),
    ("/user.slice/user-1000.slice/session-3.scope", {}),
    ("/", {}),
    ("", {}),
    ("/my jobs/train", {}),
    (f"/{ID}", {}),  # an id with no runtime around it is just a name
    ("/docker", {}),
]


@pytest.mark.parametrize(("path", "labels"), CASES, ids=[c[0][-60:] or "empty" for c in CASES])
def test_identity_of_real_path_shapes(path: str, labels: dict[str, str]) -> None:
    assert identify(path).labels() == labels


def test_identity_fields() -> None:
    ident = identify(f"/kubepods/burstable/pod{UID}/{ID}")
    assert ident == Identity("kubernetes", ID, UID, "")
    assert ident.short_id == SHORT
    assert not identify("/user.slice")
    assert identify("/system.slice/nginx.service")


def test_proc_cgroup_v1_and_v2_lines() -> None:
    hybrid = (f"12:pids:/system.slice/docker-{ID}.scope\n"
              f"4:cpu,cpuacct:/system.slice/docker-{ID}.scope\n"
              f"1:name=systemd:/system.slice/docker-{ID}.scope\n"
              "0::/system.slice/docker.service\n")
    assert parse_proc_cgroup(hybrid)["cpu,cpuacct"] == f"/system.slice/docker-{ID}.scope"
    ident, path = process_identity(hybrid)
    assert ident.labels() == {"container": f"docker:{SHORT}"}
    assert path == f"/system.slice/docker-{ID}.scope"
    v2 = f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope\n"
    assert process_identity(v2)[0].labels() == {"pod": UID, "container": f"containerd:{SHORT}"}
    service = "0::/system.slice/sshd.service\n"
    assert process_identity(service) == (Identity(service="sshd.service"),
                                         "/system.slice/sshd.service")
    plain = "4:memory:/process_api/abc\n2:cpuacct:/\n0::/\n"
    assert process_identity(plain) == (Identity(), "/process_api/abc")


@pytest.mark.parametrize("name", ['my job "α" <b>', "ünïcode netns", "a b", "x" * 64])
def test_tenant_names_stay_as_recorded(name: str) -> None:
    assert label_value(name) == name
    channel = format_channel("net.rx_bytes", {"netns": label_value(name)})
    assert parse_channel(channel)[1]["netns"] == name


def test_names_a_channel_cannot_hold_are_replaced_and_kept_apart() -> None:
    a, b = label_value("a,b={c}"), label_value("a_b__c_")
    assert not set(a) & set(",={}") and a != b and a.startswith("a_b__c_~")
    ctrl = label_value("evil\x1b[31mred\nline")
    assert "\x1b" not in ctrl and "\n" not in ctrl
    long_a, long_b = label_value("y" * 100 + "a"), label_value("y" * 100 + "b")
    assert len(long_a) == 64 and long_a != long_b
    machine = identify("/machine.slice/machine-" + "v" * 90 + ".scope").labels()["container"]
    assert len(machine) <= 64


def _cpu_hierarchy() -> tuple[Path, dict[str, str]]:
    """A hierarchy to make a cgroup in, and the cgroup probe's options to read it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create cgroups")
    mounts = dict(cgroup_mounts(Path("/proc/self/mountinfo").read_bytes()))
    if "cpu" in mounts and Path(mounts["cpu"]).is_dir():
        return Path(mounts["cpu"]), {}
    if "v2" in mounts and Path(mounts["v2"]).is_dir():
        return Path(mounts["v2"]), {"cgroup_root": mounts["v2"]}
    pytest.skip("no cpu cgroup hierarchy here")


def test_a_real_docker_shaped_cgroup_is_labelled_by_the_cgroup_probe() -> None:
    root, options = _cpu_hierarchy()
    parent = root / f"reveal-ident-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    scope = parent / f"docker-{ID}.scope"
    child = None
    parent.mkdir()
    try:
        scope.mkdir()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        (scope / "cgroup.procs").write_text(str(child.pid))
        # the process's own /proc/PID/cgroup names the container
        text = Path(f"/proc/{child.pid}/cgroup").read_text()
        ident, path = process_identity(text)
        assert ident.labels() == {"container": f"docker:{SHORT}"}
        assert path.endswith(f"/docker-{ID}.scope")
        probe = CgroupProbe(**options, patterns=(f"{parent.name}/*",))
        probe.open()
        try:
            labelled = [parse_channel(c)[1] for c in probe.channels]
            assert labelled, probe.reason
            assert all(lab["container"] == f"docker:{SHORT}" for lab in labelled)
            # the cgroup label (the path, bounded) is still there beside it
            assert {probe.info["cgroups"][lab["cgroup"]] for lab in labelled} == {
                f"{parent.name}/docker-{ID}.scope"}
            out = np.full(len(probe.channels), np.nan)
            probe.read(out)
            assert np.isfinite(out).any()
        finally:
            probe.close()
    finally:
        if child is not None:
            child.kill()
            child.wait()
        for path in (scope, parent):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
