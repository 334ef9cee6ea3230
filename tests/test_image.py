"""Reveal's OCI image (``scripts/build_image.sh``), built and run here by podman as an
operator runs it (docs/deploy.md): its labels, user and entrypoint; a collection inside it,
with the host's PID, network and cgroup namespaces and the documented mounts and
capabilities, records the channels a native collection beside it records (a network
namespace this test makes included); ``reveal watch`` inside it is scraped by a real
Prometheus outside and alerts a real Alertmanager; and a newer image on the same state
directory loads the model the older one learned."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reveal.store.run_reader import open_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from bench_image import host_view
from test_watch_service import (
    get_json,
    hog,
    promql,
    start_alertmanager,
    start_prometheus,
    stop,
    wait_for,
)

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "scripts" / "build_image.sh"
PROMETHEUS = shutil.which("prometheus")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
OWN = f"rvimg{os.getpid()}"  # this test's names: image tags, containers, namespace


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (debootstrap, podman with the host's namespaces)"
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install podman runc debootstrap)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.alone,
              pytest.mark.skipif(_why_not() is not None, reason=_why_not() or
                                 "needs root, podman, runc and debootstrap")]


def _limits() -> list[str]:
    """``--runtime runc`` and ulimits within this shell's hard limits (podman's defaults
    exceed them here): the first options of host_view()."""
    return host_view()[:6]


def podman(*args: str, timeout: float = 120, check: bool = True
           ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])}…: {done.stderr[-2000:]}")
    return done


def run_in(image: str, *args: str, mounts: tuple[str, ...] = (), detach: str | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``podman run`` of the image with the host's view; ``detach``: a named container."""
    how = ["-d", "--name", detach] if detach else ["--rm"]
    vols = [x for m in mounts for x in ("-v", m)]
    return podman("run", *how, *host_view(), *vols, image,
                  *args, timeout=timeout)


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    tag = f"localhost/reveal-test:{OWN}"
    done = subprocess.run(["bash", str(BUILD), "--tag", tag], capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    built = json.loads(done.stdout.strip().splitlines()[-1])
    yield {"tag": tag, "built": built}
    podman("rmi", "-f", tag, f"localhost/reveal-test:{OWN}-next", check=False)


def test_the_image_is_labelled_runs_reveal_and_is_not_root_by_default(image):
    info = json.loads(podman("image", "inspect", image["tag"]).stdout)[0]
    config, labels = info["Config"], info["Config"]["Labels"]
    from reveal._version import __version__

    assert labels["org.opencontainers.image.version"] == __version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert labels["org.opencontainers.image.revision"].split("-")[0] == head
    assert config["Entrypoint"] == ["/opt/reveal/bin/reveal"] and config["User"] == "65532"
    assert image["built"]["size_bytes"] == info["Size"] < 500e6  # bench: build/image.json
    version = podman("run", "--rm", *_limits(), image["tag"], "--version")
    assert version.stdout.strip() == f"reveal {__version__}"
    who = podman("run", "--rm", *_limits(), "--entrypoint", "id",
                 image["tag"], "-u")
    assert who.stdout.strip() == "65532"
    # the node agent: a report page needs the report extra, which the image does not ship
    page = podman("run", "--rm", *_limits(), image["tag"], "report", "/nothing.json",
                  "--html", "/tmp/r.html", check=False)
    assert page.returncode == 2 and "pip install 'reveal[report]'" in page.stderr


def test_an_analysis_in_the_image_as_its_own_user_equals_the_native_one(image, tmp_path):
    """A kept recording (CPU contention on a distributed job, bench/recordings) analysed in
    the image by its unprivileged default user, the data mounted read-only, gives the
    verdicts the native analysis gives."""
    import tarfile

    with tarfile.open(ROOT / "bench/recordings/distributed_cpu_contention.tar.xz") as tar:
        tar.extractall(tmp_path / "rec")  # the project's own file
    runs = tmp_path / "rec" / "runs" / "distributed"
    native = subprocess.run([sys.executable, "-m", "reveal.cli", "analyze", str(runs / "run1"),
                             "--baseline", str(runs / "baseline1"), "--format", "none",
                             "--json", "-"], capture_output=True, text=True, timeout=300)
    assert native.returncode == 0, native.stderr[-2000:]
    inside = podman("run", "--rm", *_limits(), "-v",
                    f"{runs}:/data:ro", image["tag"], "analyze", "/data/run1", "--baseline",
                    "/data/baseline1", "--format", "none", "--json", "-", timeout=300)
    ours, theirs = json.loads(native.stdout), json.loads(inside.stdout)
    assert theirs["summary"] == ours["summary"] and ours["summary"]["anomalous_windows"] > 0
    assert theirs["windows"]["flagged"] == ours["windows"]["flagged"]
    assert theirs["windows"]["start_ns"] == ours["windows"]["start_ns"]
    assert [e["claim"] for e in theirs["episodes"]] == [e["claim"] for e in ours["episodes"]]


@pytest.fixture
def netns():
    name = f"{OWN}ns"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "delete", name], check=False)


def test_a_collection_in_the_container_records_the_hosts_channels(image, netns, tmp_path):
    """Side by side for 6 s: the container's run holds every channel of the native one but
    those of the container's own cgroup, which exists only while it runs."""
    native = subprocess.Popen([sys.executable, "-m", "reveal.cli", "collect", "--duration",
                               "6", "--quiet", "--out", str(tmp_path / "native")],
                              stderr=subprocess.PIPE, text=True)
    inside = run_in(image["tag"], "collect", "--duration", "6", "--quiet", "--out",
                    "/out/container", mounts=(f"{tmp_path}:/out",))
    _, err = native.communicate(timeout=120)
    assert native.returncode == 0, err
    ours = set(open_run(tmp_path / "native").channels)
    theirs = set(open_run(tmp_path / "container").channels)
    missing = sorted(c for c in ours - theirs if not re.search(r"libpod|conmon", c))
    assert len(ours & theirs) >= 0.98 * len(ours) and not missing, (missing, inside.stderr)
    # the namespace and the host's processes and cgroups are seen from inside
    for channels in (ours, theirs):
        assert any(f"netns={netns}" in c for c in channels)
    assert {c.split("{")[0] for c in theirs} >= {"cpu.user", "mem.MemFree"}
    meta = json.loads((tmp_path / "container" / "meta.json").read_text())
    assert meta["probes"]["cgroup"]["status"] == "ok"


@pytest.fixture
def servers(tmp_path):
    if PROMETHEUS is None or ALERTMANAGER is None:
        pytest.skip("needs the Debian packages prometheus and prometheus-alertmanager")
    from test_watch_service import free_port

    ports = {k: free_port() for k in ("metrics", "prom", "am")}
    (tmp_path / "am.yml").write_text("route:\n  receiver: none\n  group_wait: 1s\n"
                                     "receivers:\n- name: none\n")
    am = start_alertmanager(tmp_path, ports["am"])
    try:
        prom = start_prometheus(tmp_path, ports["prom"], ports["metrics"])
    except BaseException:
        stop(am)
        raise
    yield {**ports, "prom_url": f"http://127.0.0.1:{ports['prom']}",
           "am_url": f"http://127.0.0.1:{ports['am']}"}
    stop(prom)
    stop(am)


def _logs(name: str) -> str:
    done = podman("logs", name, check=False)
    return done.stdout + done.stderr


def test_watch_in_the_container_is_scraped_alerts_and_a_newer_image_keeps_its_model(
        image, servers, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    watch_args = ["watch", "--learn", "20s", "--allow-short-learn", "--resolve-after", "3s",
                  "--listen", f"127.0.0.1:{servers['metrics']}",
                  "--alertmanager", servers["am_url"]]
    name, busy = f"{OWN}-watch", None
    try:
        run_in(image["tag"], *watch_args, mounts=(f"{state}:/var/lib/reveal",), detach=name)
        wait_for("the watch in the container to learn", lambda: "scoring" in _logs(name), 180)
        scores = wait_for("Prometheus outside to hold its scores", lambda: promql(
            servers["prom_url"], 'reveal_score{detector="combined"}'), 60)
        assert float(scores[0]["value"][1]) >= 0
        busy = hog()
        alert = wait_for("the alert at Alertmanager", lambda: [
            a for a in get_json(f"{servers['am_url']}/api/v2/alerts")
            if a["labels"].get("alertname") == "RevealAnomaly"], 120, every=0.5)[0]
        assert {"host", "subsystem", "episode"} <= set(alert["labels"])
        assert alert["annotations"]["claim"]
        busy.kill()
        busy.wait()
        busy = None
        assert podman("stop", "-t", "60", name, timeout=90).returncode == 0
        assert podman("wait", name).stdout.strip() == "0", _logs(name)[-3000:]
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
        podman("rm", "-f", name, check=False)
    model = state / "model.reveal"
    learned = model.stat().st_mtime_ns

    # the next release (the same image, its version raised) on the same state directory
    step, nxt = f"{OWN}-bump", f"localhost/reveal-test:{OWN}-next"
    version = "/opt/reveal/lib/python3.11/site-packages/reveal/_version.py"
    podman("run", "--name", step, *_limits(), "--user", "0",
           "--entrypoint", "sed", image["tag"], "-i",
           's/^__version__ = .*/__version__ = "99.0.0"/', version)
    podman("commit", "-q", "--change", "LABEL org.opencontainers.image.version=99.0.0",
           "--change", 'ENTRYPOINT ["/opt/reveal/bin/reveal"]', "--change", 'CMD ["--help"]',
           "--change", "USER 65532", step, nxt)  # not the step's own sed, as root
    podman("rm", "-f", step, check=False)
    name = f"{OWN}-next"
    try:
        run_in(nxt, *watch_args, mounts=(f"{state}:/var/lib/reveal",), detach=name)
        wait_for("the newer watch to score", lambda: "scoring" in _logs(name), 120)
        log = _logs(name)
        assert "model loaded" in log and "learning a model" not in log, log[-3000:]
        assert model.stat().st_mtime_ns == learned
        assert podman("run", "--rm", *_limits(), nxt,
                      "--version").stdout.strip() == "reveal 99.0.0"
    finally:
        podman("stop", "-t", "30", name, check=False, timeout=60)
        podman("rm", "-f", name, check=False)
