"""Who owns a cgroup: container, pod or service, from the cgroup path alone.

Container runtimes and systemd name cgroups after what runs in them. This module turns a
path into an :class:`Identity` and short, readable labels, with no runtime API and no
process started. The shapes recognised (cgroup v1 and v2 alike, with or without a leading
``/``, nested runtimes: the innermost container wins):

============================  ===========================================================
Docker, cgroupfs driver       ``/docker/<64 hex>`` (also ``/moby/<id>``)
Docker, systemd driver        ``/system.slice/docker-<id>.scope``
containerd (CRI), systemd     ``…/cri-containerd-<id>.scope``; nerdctl ``nerdctl-<id>.scope``
CRI-O                         ``…/crio-<id>.scope`` (``crio-conmon-<id>.scope`` is its monitor)
podman / libpod               ``…/libpod-<id>.scope``, ``/libpod_parent/libpod-<id>``
Kubernetes, cgroupfs          ``/kubepods/<qos>/pod<uid>/<container id>``, ``/kubepods/pod<uid>/…``
Kubernetes, systemd           ``/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid
                              with _>.slice/<runtime>-<id>.scope``
LXC                           ``/lxc/<name>``, ``/lxc.payload.<name>``
systemd-machined (VMs, nspawn) ``/machine.slice/machine-<escaped name>.scope``
systemd services              ``…/<name>.service`` (``\\x2d`` escapes undone)
============================  ===========================================================

Labels (:meth:`Identity.labels`): ``container`` is ``<runtime>:<first 12 characters of the
id>`` (as ``docker ps`` shows it) or ``<runtime>:<name>``; ``pod`` is the pod's UID with
dashes; ``service`` is the systemd unit of a cgroup that is no container. A plain cgroup has
none. Names are chosen by tenants: :func:`label_value` keeps them as recorded (blanks,
quotes, ``<``, ``>``, non-ASCII letters) and only replaces what a channel name cannot hold.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

#: Characters of an id shown in a label (Docker's short id).
SHORT_ID = 12

_HEX_ID = r"[0-9a-f]{32,64}"
_FULL_HEX = re.compile(rf"^{_HEX_ID}$")
# (pattern on one path segment, runtime); the id or name is group 1
_SCOPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^docker-({_HEX_ID})\.scope$"), "docker"),
    (re.compile(rf"^cri-containerd-({_HEX_ID})\.scope$"), "containerd"),
    (re.compile(rf"^containerd-({_HEX_ID})\.scope$"), "containerd"),
    (re.compile(rf"^nerdctl-({_HEX_ID})\.scope$"), "containerd"),
    (re.compile(rf"^crio-({_HEX_ID})\.scope$"), "cri-o"),
    (re.compile(rf"^libpod-({_HEX_ID})(?:\.scope)?$"), "podman"),
    (re.compile(r"^lxc\.payload\.(.+)$"), "lxc"),
    (re.compile(r"^machine-(.+)\.scope$"), "machine"),
)
# a bare id segment under one of these parents: the runtime it belongs to
_BARE_PARENTS = {"docker": "docker", "moby": "docker", "k8s.io": "containerd",
                 "default": "containerd", "libpod_parent": "podman"}
_MONITORS = re.compile(rf"^(?:crio-conmon|libpod-conmon)-({_HEX_ID})\.scope$")
_POD_V1 = re.compile(r"^pod([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")
_POD_SYSTEMD = re.compile(
    r"^kubepods(?:-[a-z]+)?-pod([0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12})"
    r"\.slice$")
_SYSTEMD_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")
_LABEL_BAD = re.compile(r"[,={}\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class Identity:
    """What a cgroup path says about its owner (empty strings where it says nothing)."""

    runtime: str = ""  # docker, containerd, cri-o, podman, lxc, machine, kubernetes
    container: str = ""  # the full id, or the name (LXC, machined)
    pod: str = ""  # Kubernetes pod UID, with dashes
    service: str = ""  # systemd unit of a cgroup that is no container

    def __bool__(self) -> bool:
        return bool(self.container or self.pod or self.service)

    @property
    def short_id(self) -> str:
        """The container id cut to :data:`SHORT_ID` characters (names are kept whole)."""
        if _FULL_HEX.match(self.container):
            return self.container[:SHORT_ID]
        return self.container

    def labels(self, limit: int = 64) -> dict[str, str]:
        """``container``, ``pod`` and ``service`` labels, only those known."""
        out: dict[str, str] = {}
        if self.container:
            out["container"] = label_value(f"{self.runtime}:{self.short_id}"
                                           if self.runtime and self.runtime != "kubernetes"
                                           else self.short_id, limit)
        if self.pod:
            out["pod"] = self.pod
        if self.service and not self.container and not self.pod:
            out["service"] = label_value(self.service, limit)
        return out


def identify(path: str) -> Identity:
    """The owner of the cgroup at ``path`` (a path inside a hierarchy, e.g. from
    ``/proc/PID/cgroup``); an empty :class:`Identity` for a plain cgroup.

    >>> identify("/system.slice/docker-" + "ab" * 32 + ".scope").labels()
    {'container': 'docker:abababababab'}
    """
    segments = [s for s in path.split("/") if s]
    runtime = container = pod = service = ""
    kube = False
    for i, seg in enumerate(segments):
        parent = segments[i - 1] if i else ""
        if seg in ("kubepods", "kubepods.slice"):
            kube = True
            continue
        match = _POD_V1.match(seg) if kube else None
        if match is None and seg.startswith("kubepods"):
            match = _POD_SYSTEMD.match(seg)
            kube = kube or match is not None
        if match is not None:
            pod = match.group(1).replace("_", "-")
            runtime, container = "", ""
            continue
        if _MONITORS.match(seg):  # a runtime's monitor process, not the container
            runtime, container, service = "", "", ""
            continue
        for pattern, name in _SCOPES:
            hit = pattern.match(seg)
            if hit is not None:
                runtime, container = name, _unescape(hit.group(1))
                break
        else:
            if _FULL_HEX.match(seg) and (pod or parent in _BARE_PARENTS):
                runtime = _BARE_PARENTS.get(parent, "kubernetes")
                container = seg
            elif parent == "lxc" and i == 1:
                runtime, container = "lxc", seg
            elif seg.endswith(".service"):
                service = _unescape(seg)
    if pod and not runtime and container:
        runtime = "kubernetes"
    return Identity(runtime, container, pod, service if not (container or pod) else "")


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/PID/cgroup`` as ``{hierarchy: path}``: ``""`` for the v2 line (``0::/x``),
    the controller list (``cpu,cpuacct``) or ``name=systemd`` for v1 lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def process_identity(text: str) -> tuple[Identity, str]:
    """The owner of a process from its ``/proc/PID/cgroup`` text, and the path it came
    from: the first hierarchy naming a container or pod (v2 first, then systemd's v1
    hierarchy, then the controllers), else the first naming a service, else none."""
    paths = parse_proc_cgroup(text)
    order = sorted(paths, key=lambda k: (k != "", k != "name=systemd", "cpu" not in k, k))
    found = [(identify(paths[k]), paths[k]) for k in order]
    for ident, path in found:
        if ident.container or ident.pod:
            return ident, path
    for ident, path in found:
        if ident.service:
            return ident, path
    plain = next((p for _, p in found if p not in ("", "/")), "/")
    return Identity(), plain


def label_value(text: str, limit: int = 64) -> str:
    """``text`` as a label value, kept as recorded where it can be: characters a channel
    name cannot hold (``, = { }``) and control characters become ``_``; a value changed
    or cut to ``limit`` characters gets ``~`` and 8 hex digits of its hash, so two names
    never share a label."""
    clean = _LABEL_BAD.sub("_", text)
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{clean[: max(1, limit - 9)]}~{digest}"


def _unescape(name: str) -> str:
    """Undo systemd's unit-name escapes (``\\x2d`` is ``-``)."""
    if "\\x" not in name:
        return name
    return _SYSTEMD_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name)
