"""The Kubernetes deployment of ``reveal watch``: deploy/kubernetes (plain manifests) and
deploy/helm/reveal (the chart), rendered by Helm itself.

Every object validates against the Kubernetes API's OpenAPI schemas (kubernetes-validate,
strict: an unknown field fails); the ServiceMonitor, a custom resource, against the fields
of the Prometheus Operator's monitoring.coreos.com/v1 schema that the chart uses. The
rendered DaemonSet is checked for what the watch needs on a node, its arguments are parsed
by ``reveal watch``'s own parser, and the plain manifests must equal the chart's default
render. Helm comes from scripts/install_helm.sh (REVEAL_HELM names another binary).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from reveal._version import __version__
from reveal.cli import build_parser
from reveal.collect.runner import select_probes
from reveal.live.exporter import parse_listen

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy/helm/reveal"
GPU_VALUES = CHART / "values-gpu.yaml"
PLAIN = ROOT / "deploy/kubernetes/reveal.yaml"
PLAIN_MONITOR = ROOT / "deploy/kubernetes/servicemonitor.yaml"
DASHBOARD = ROOT / "src/reveal/live/grafana-dashboard.json"
DOCS = ROOT / "docs/deploy.md"

#: the Kubernetes version whose API schemas the objects are validated against
KUBERNETES = "1.33.0"
#: labels the chart adds that the plain manifests leave out
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
CAPABILITIES = {"SYS_ADMIN", "SYS_PTRACE", "PERFMON", "BPF", "SYS_RESOURCE",
                "DAC_READ_SEARCH", "SYS_NICE"}

_DURATION = (r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
             r"(([0-9]+)s)?(([0-9]+)ms)?)$")
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            "required": list(required)}


#: ServiceMonitor (monitoring.coreos.com/v1): the fields the chart writes, with the types,
#: patterns and required fields of the Prometheus Operator's CRD schema; any other field
#: fails, as the API server's strict field validation would for a field the CRD lacks
SERVICE_MONITOR = _closed({
    "apiVersion": {"const": "monitoring.coreos.com/v1"},
    "kind": {"const": "ServiceMonitor"},
    "metadata": _closed({"name": {"type": "string", "minLength": 1},
                         "namespace": {"type": "string"}, "labels": _STRINGS}, ("name",)),
    "spec": _closed({
        "selector": _closed({"matchLabels": _STRINGS}),
        "namespaceSelector": _closed({"any": {"type": "boolean"},
                                      "matchNames": {"type": "array",
                                                     "items": {"type": "string"}}}),
        "endpoints": {"type": "array", "items": _closed({
            "port": {"type": "string"},
            "path": {"type": "string"},
            "interval": {"type": "string", "pattern": _DURATION},
            "scrapeTimeout": {"type": "string", "pattern": _DURATION},
            "relabelings": {"type": "array", "items": _closed({
                "sourceLabels": {"type": "array",
                                 "items": {"type": "string",
                                           "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
                "targetLabel": {"type": "string"}})}})},
    }, ("endpoints", "selector")),
}, ("apiVersion", "kind", "metadata", "spec"))


def validate(obj: dict[str, Any]) -> None:
    """Raise when ``obj`` is not a valid object of its kind."""
    if obj["kind"] == "ServiceMonitor":
        jsonschema.validate(obj, SERVICE_MONITOR)
    else:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def load_all(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find_helm() -> str | None:
    named = os.environ.get("REVEAL_HELM")
    if named:
        return named
    beside = Path(sys.executable).parent / "helm"  # scripts/install_helm.sh puts it here
    return str(beside) if beside.is_file() else shutil.which("helm")


@pytest.fixture(scope="module")
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.fail("helm is not installed: bash scripts/install_helm.sh puts it beside "
                    f"{sys.executable}", pytrace=False)
    return path


@functools.cache
def _render(helm: str, *args: str) -> tuple[dict[str, Any], ...]:
    done = subprocess.run([helm, "template", "reveal", str(CHART), "--namespace", "reveal",
                           *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return tuple(load_all(done.stdout))


def render(helm: str, *args: str) -> list[dict[str, Any]]:
    """The objects ``helm template`` makes with these arguments (copies)."""
    return copy.deepcopy(list(_render(helm, *args)))


def only(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, [o["kind"] for o in objects]
    return found[0]


def pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return only(objects, "DaemonSet")["spec"]["template"]["spec"]


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (watch,) = pod(objects)["containers"]
    return watch


def option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def mounts(objects: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """mount path -> (volume mount, volume)."""
    volumes = {v["name"]: v for v in pod(objects)["volumes"]}
    return {m["mountPath"]: (m, volumes[m["name"]]) for m in container(objects)["volumeMounts"]}


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items()
                    if not (k in HELM_LABELS and isinstance(v, str))}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node
    return strip(obj)


ALL_ON = ("--set", "ebpf.enabled=true", "--set", "gpu.enabled=true",
          "--set", "gpu.runtimeClassName=nvidia", "--set", "serviceMonitor.enabled=true",
          "--set", "serviceMonitor.labels.release=kube-prometheus-stack",
          "--set", "alertmanager.url=http://alertmanager.monitoring:9093",
          "--set", "alertWebhook=https://hooks.example/reveal",
          "--set", "priorityClassName=system-node-critical", "--set", "tolerateAllTaints=true",
          "--set", "dashboard.namespace=monitoring", "--set", "listenHost=$(HOST_IP)",
          "--set-json", 'extraArgs=["--refit-every","24h"]',
          "--set-json", 'extraCapabilities=["NET_ADMIN"]',
          "--set-json", 'imagePullSecrets=[{"name":"registry"}]')
RENDERS = {"defaults": (), "values-gpu": ("-f", str(GPU_VALUES)), "all-on": ALL_ON}


# -- validation ----------------------------------------------------------------------------

def test_plain_manifests_validate() -> None:
    objects = load_all(PLAIN.read_text()) + load_all(PLAIN_MONITOR.read_text())
    assert sorted(o["kind"] for o in objects) == [
        "ConfigMap", "DaemonSet", "Namespace", "Service", "ServiceAccount", "ServiceMonitor"]
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_chart_renders_validate(helm: str, name: str) -> None:
    objects = render(helm, *RENDERS[name])
    assert {"DaemonSet", "Service", "ServiceAccount", "ConfigMap"} <= {o["kind"] for o in objects}
    for obj in objects:
        validate(obj)


def test_an_unknown_or_missing_field_fails_validation(helm: str) -> None:
    objects = render(helm)
    daemonset = only(objects, "DaemonSet")
    container(objects)["hostPID"] = True  # a pod's field, not a container's
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(daemonset)
    monitor = only(render(helm, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")
    for broken in ({"jobLabels": "node"}, {"endpoints": None}):
        spec = {**monitor["spec"], **broken}
        spec = {k: v for k, v in spec.items() if v is not None}
        with pytest.raises(jsonschema.ValidationError):
            validate({**monitor, "spec": spec})


@pytest.mark.parametrize("values", [(), ("-f", str(GPU_VALUES))], ids=["defaults", "gpu"])
def test_helm_lint_passes(helm: str, values: tuple[str, ...]) -> None:
    done = subprocess.run([helm, "lint", "--strict", str(CHART), *values],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_values_schema_refuses_unknown_and_malformed_values(helm: str) -> None:
    for wrong in ("gpu.enable=true", "learn=ten minutes", "listenPort=70000"):
        done = subprocess.run([helm, "template", "reveal", str(CHART), "--set", wrong],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode != 0 and "values don't meet the specifications" in done.stderr


# -- the plain manifests and the chart agree -----------------------------------------------

def test_plain_manifest_is_the_charts_default_render(helm: str) -> None:
    plain = {(o["kind"], o["metadata"]["name"]): o for o in load_all(PLAIN.read_text())}
    namespace = plain.pop(("Namespace", "reveal"))
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    chart = {(o["kind"], o["metadata"]["name"]): without_helm_labels(o) for o in render(helm)}
    assert plain.keys() == chart.keys()
    assert container(list(plain.values())) == container(list(chart.values()))
    for key, obj in chart.items():
        assert plain[key] == obj, key
    (monitor,) = load_all(PLAIN_MONITOR.read_text())
    rendered = only(render(helm, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")
    assert monitor == without_helm_labels(rendered)


def test_versions_follow_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == __version__
    assert container(load_all(PLAIN.read_text()))["image"] == f"localhost/reveal:{__version__}"


def test_the_charts_dashboard_is_the_packaged_one(helm: str) -> None:
    assert (CHART / "dashboards/reveal-watch.json").read_bytes() == DASHBOARD.read_bytes()
    expected = json.loads(DASHBOARD.read_text())
    for objects in (load_all(PLAIN.read_text()),
                    render(helm, "--set", "dashboard.namespace=monitoring")):
        configmap = only(objects, "ConfigMap")
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(configmap["data"]["reveal-watch.json"]) == expected
    assert only(render(helm, "--set", "dashboard.namespace=monitoring"),
                "ConfigMap")["metadata"]["namespace"] == "monitoring"
    objects = render(helm, "--set", "dashboard.enabled=false")
    assert "ConfigMap" not in {o["kind"] for o in objects}


# -- what the watch needs on a node ---------------------------------------------------------

def test_daemonset_reads_the_host_and_keeps_its_state(helm: str) -> None:
    objects = render(helm)
    spec, watch = pod(objects), container(objects)
    assert spec["hostPID"] is True and spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    context = watch["securityContext"]
    assert context["privileged"] is False and context["readOnlyRootFilesystem"] is True
    assert context["runAsUser"] == 0
    assert context["capabilities"]["drop"] == ["ALL"]
    assert set(context["capabilities"]["add"]) == CAPABILITIES
    args = watch["args"]
    assert args[0] == "watch" and option(args, "--state") == "/var/lib/reveal"
    found = mounts(objects)
    state_mount, state = found["/var/lib/reveal"]
    assert state["hostPath"] == {"path": "/var/lib/reveal", "type": "DirectoryOrCreate"}
    assert not state_mount.get("readOnly")
    for path in ("/sys", "/sys/fs/cgroup", "/run/netns"):
        mount, volume = found[path]
        assert mount["readOnly"] is True and volume["hostPath"]["path"] == path
    assert found["/run/netns"][0]["mountPropagation"] == "HostToContainer"
    assert "emptyDir" in found["/tmp"][1]  # the only other writable path
    assert not {"/sys/kernel/debug", "/sys/kernel/tracing", "/lib/modules"} & found.keys()
    resources = watch["resources"]
    assert resources["requests"] == {"cpu": "100m", "memory": "512Mi"}
    assert resources["limits"] == {"cpu": "1", "memory": "2Gi"}


def test_state_dir_value_moves_the_mount_and_the_argument(helm: str) -> None:
    objects = render(helm, "--set", "stateDir=/data/reveal")
    assert option(container(objects)["args"], "--state") == "/data/reveal"
    assert mounts(objects)["/data/reveal"][1]["hostPath"]["path"] == "/data/reveal"


def test_probes_and_service_use_the_exporter_port(helm: str) -> None:
    objects = render(helm, "--set", "listenPort=9500", "--set", "serviceMonitor.enabled=true")
    watch = container(objects)
    assert parse_listen(option(watch["args"], "--listen")) == ("0.0.0.0", 9500)
    (port,) = watch["ports"]
    assert port == {"name": "metrics", "containerPort": 9500, "protocol": "TCP"}
    for probe in ("readinessProbe", "livenessProbe"):  # the exporter serves /metrics only
        assert watch[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    service = only(objects, "Service")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9500,
                                         "targetPort": "metrics", "protocol": "TCP"}]
    monitor = only(objects, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert selector == service["spec"]["selector"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["reveal"]}


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_reveal_watch_accepts_the_rendered_arguments(helm: str, name: str) -> None:
    args = container(render(helm, *RENDERS[name]))["args"]
    parsed = build_parser().parse_args(args)
    assert parsed.learn == 600.0 and parsed.resolve_after == 30.0
    if parsed.probes:
        select_probes(parsed.probes)  # every name known


def test_alert_sinks_appear_only_when_given(helm: str) -> None:
    args = container(render(helm))["args"]
    assert "--alertmanager" not in args and "--alert-webhook" not in args
    assert option(args, "--alerts-file") == "-"
    args = container(render(helm, "--set", "alertmanager.url=http://am.monitoring:9093",
                            "--set", "alertWebhook=https://hooks.example/r",
                            "--set", "alertsFile=/var/lib/reveal/alerts.jsonl"))["args"]
    assert option(args, "--alertmanager") == "http://am.monitoring:9093"
    assert option(args, "--alert-webhook") == "https://hooks.example/r"
    assert option(args, "--alerts-file") == "/var/lib/reveal/alerts.jsonl"
    assert "--alerts-file" not in container(render(helm, "--set", "alertsFile="))["args"]


def test_gpu_values_add_nvml_runtime_and_node_pool(helm: str) -> None:
    default = render(helm)
    assert "runtimeClassName" not in pod(default)
    assert not {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"} & {
        e["name"] for e in container(default)["env"]}
    objects = render(helm, "-f", str(GPU_VALUES))
    spec, env = pod(objects), {e["name"]: e.get("value") for e in container(objects)["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists",
            "effect": "NoSchedule"} in spec["tolerations"]
    # the GPU node selector applies with gpu.enabled only
    assert "nodeSelector" not in pod(render(helm, "--set-json", 'gpu.nodeSelector={"a":"b"}'))


def test_every_node_runs_a_watch_with_the_opt_in(helm: str) -> None:
    default = pod(render(helm))["tolerations"]
    assert default == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert {"operator": "Exists"} not in default
    tolerations = pod(render(helm, "--set", "tolerateAllTaints=true"))["tolerations"]
    assert {"operator": "Exists"} in tolerations
    assert pod(render(helm, "--set", "priorityClassName=system-node-critical"))[
        "priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in pod(render(helm))


def test_ebpf_adds_the_probe_and_the_tracing_mounts(helm: str) -> None:
    default_probes = [cls.name for cls in select_probes()[0]]
    objects = render(helm, "--set", "ebpf.enabled=true")
    probes = option(container(objects)["args"], "--probes").split(",")
    assert probes == [*default_probes, "ebpf"]  # the default set, with ebpf added
    found = mounts(objects)
    for path in ("/sys/kernel/debug", "/sys/kernel/tracing"):
        assert found[path][1]["hostPath"]["path"] == path and not found[path][0].get("readOnly")
    assert found["/lib/modules"][0]["readOnly"] is True
    assert "--probes" not in container(render(helm))["args"]
    chosen = render(helm, "--set", "ebpf.enabled=true", "--set-json", 'probes=["cpu","ebpf"]')
    assert option(container(chosen)["args"], "--probes") == "cpu,ebpf"
    # the low-cost tracing setting, as options the probe itself accepts
    from reveal.collect.ebpf.probe import EbpfProbe

    def probe_options(args: list[str]) -> dict[str, str]:
        pairs = [args[i + 1] for i, a in enumerate(args) if a == "--probe-option"]
        return dict(p.split("=", 1) for p in pairs)

    options = probe_options(container(objects)["args"])
    assert options == {"ebpf.skip": "cudaLaunchKernel*,cudaMemcpy*",
                       "ebpf.launch_latency": "false"}
    probe = EbpfProbe(**{k.split(".", 1)[1]: v for k, v in options.items()})
    assert probe.skip == ("cudaLaunchKernel*", "cudaMemcpy*") and not probe.launch_latency
    full = render(helm, "--set", "ebpf.enabled=true", "--set", "ebpf.skip=",
                  "--set", "ebpf.launchLatency=true")
    assert probe_options(container(full)["args"]) == {"ebpf.launch_latency": "true"}
    assert not probe_options(container(render(helm))["args"])  # no ebpf, no options


def test_service_monitor_only_when_enabled(helm: str) -> None:
    assert "ServiceMonitor" not in {o["kind"] for o in render(helm)}
    monitor = only(render(helm, "--set", "serviceMonitor.enabled=true",
                          "--set", "serviceMonitor.labels.release=prom",
                          "--set", "serviceMonitor.interval=30s"), "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["interval"] == "30s"


# -- the docs ------------------------------------------------------------------------------

def _value_names(values: dict[str, Any], prefix: str = "") -> list[str]:
    names = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in ("resources", "labels"):
            names += _value_names(value, f"{name}.")
        else:
            names.append(name)
    return names


def test_docs_explain_every_value_and_capability() -> None:
    text = DOCS.read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [n for n in _value_names(values) if f"`{n}`" not in text]
    assert not missing, f"docs/deploy.md does not name these values: {missing}"
    assert not [c for c in CAPABILITIES if f"`{c}`" not in text]
