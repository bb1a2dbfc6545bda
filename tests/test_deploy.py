"""Deployment files: deploy/k8s/ against the Kubernetes JSON schemas (kubernetes-validate, offline)
and against each other and the router (names, labels, ports, probes, the policy it mounts);
docker-compose.yml as Compose v1 reads it (`docker-compose config`, when installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from starlette.routing import Route

from router.api import admin
from router.policy.loader import parse_policy

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
VERSIONS = ("1.27.0", kubernetes_validate.latest_version())  # the oldest we claim, and the newest known
MANIFESTS = sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def every() -> list[dict[str, Any]]:
    return [d for p in MANIFESTS for d in docs(p)]


def one(kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in every() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_matches_the_kubernetes_schema(path: Path, version: str) -> None:
    found = docs(path)
    assert found, path
    for doc in found:
        kubernetes_validate.validate(doc, version, strict=True)  # strict: unknown fields are errors


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == [p.name for p in MANIFESTS]
    kinds = {d["kind"] for d in every()}
    assert {"Deployment", "Service", "ConfigMap", "StatefulSet", "HorizontalPodAutoscaler"} <= kinds
    assert "PodDisruptionBudget" in kinds


def test_router_deployment_fits_the_router() -> None:
    deployment = one("Deployment", "agent-router")
    spec, pod = deployment["spec"], deployment["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    assert selects(spec["selector"]["matchLabels"], pod_labels)
    [container] = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert args[0] == "serve" and ports["http"] == int(args[args.index("--port") + 1])
    assert args[args.index("--host") + 1] == "0.0.0.0"

    # probes: paths the router serves, on its port
    served = {r.path for r in admin.routes if isinstance(r, Route) and "GET" in (r.methods or ())}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] in served and get["port"] == "http", probe
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"

    # the policy: mounted as a directory (a subPath mount is never updated, so never reloaded)
    policy_path = Path(args[args.index("--policy") + 1])
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "policy"]
    assert "subPath" not in mount and Path(mount["mountPath"]) == policy_path.parent
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "policy"]
    configmap = one("ConfigMap", volume["configMap"]["name"])
    assert policy_path.name in configmap["data"]

    # resources (the autoscaler needs a CPU request) and a locked-down container
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    pod_security = pod["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    dockerfile = (ROOT / "docker" / "router.Dockerfile").read_text()
    assert re.search(rf"^USER {pod_security['runAsUser']}$", dockerfile, re.M)  # the image's own uid


def test_policy_in_the_configmap_routes_to_the_redis_service() -> None:
    deployment = one("Deployment", "agent-router")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    text = one("ConfigMap", "agent-router-policy")["data"]["policy.yaml"]
    policy = parse_policy(text, "configmap.yaml", env)  # the router's own loader: errors fail here
    assert policy.models["fast"].api_base == env["FAST_API_BASE"]
    store = urlsplit(policy.store)
    redis = one("Service", store.hostname or "")
    assert [p["port"] for p in redis["spec"]["ports"]] == [store.port]
    redis_set = one("StatefulSet", "agent-router-redis")
    assert selects(redis["spec"]["selector"], redis_set["spec"]["template"]["metadata"]["labels"])


def test_service_hpa_pdb_point_at_the_router() -> None:
    deployment = one("Deployment", "agent-router")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    redis_labels = one("StatefulSet", "agent-router-redis")["spec"]["template"]["metadata"]["labels"]
    service = one("Service", "agent-router")
    assert selects(service["spec"]["selector"], pod_labels)
    assert not selects(service["spec"]["selector"], redis_labels)
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["http"]
    pdb = one("PodDisruptionBudget", "agent-router")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert not selects(pdb["spec"]["selector"]["matchLabels"], redis_labels)
    hpa = one("HorizontalPodAutoscaler", "agent-router")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "agent-router")
    [metric] = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["minAvailable"]  # a drain can always evict one pod


def test_compose_file() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "name" not in compose  # Compose v1 refuses a top-level name
    services = compose["services"]
    router = services["router"]
    assert router["deploy"]["replicas"] >= 2 and "ports" not in router
    published = [s for s in services.values() if s.get("ports") and not s.get("profiles")]
    assert [services["lb"]] == published and len(services["lb"]["ports"]) == 1
    conf = (ROOT / "docker" / "nginx.conf").read_text()
    assert "http://router:8080" in conf and "proxy_buffering off" in conf
    assert "./docker/nginx.conf:/etc/nginx/nginx.conf:ro" in services["lb"]["volumes"]
    policy = (ROOT / "policies" / "compose.yaml").read_text()
    assert "store: redis://redis:6379/0" in policy  # replicas share state


def test_compose_v1_accepts_the_file(tmp_path: Path) -> None:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose (Compose v1) is not installed: scripts/install installs it")
    out = subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), "config"],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)
    assert resolved["services"]["router"]["deploy"]["replicas"] == 2
    gpu = {"vllm-fast", "vllm-full", "router-gpu"}
    assert set(resolved["services"]) == {"redis", "fast", "full", "router", "lb"} | gpu
    profiled = {name for name, service in resolved["services"].items() if service.get("profiles")}
    assert profiled == gpu  # `docker compose up` starts the CPU demo only


def test_the_gpu_profile_serves_what_its_policy_names() -> None:
    """Profile `gpu`: vLLM with prefix caching and its tool-call parser on an NVIDIA GPU, and a router
    whose policy (checked against the schema: tests/policy/test_loader.py) names what each serves."""
    from router.policy.loader import load_policy

    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    policy = load_policy(ROOT / "policies" / "gpu.yaml", {})
    for name, tier in (("vllm-fast", "fast"), ("vllm-full", "full")):
        service = services[name]
        args = service["command"]
        assert service["profiles"] == ["gpu"] and {"--enable-prefix-caching", "--enable-auto-tool-choice"} <= set(args)
        assert args[args.index("--tool-call-parser") + 1] == "hermes"  # Qwen2.5's <tool_call> blocks
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
        served, port = args[args.index("--served-model-name") + 1], args[args.index("--port") + 1]
        assert policy.models[tier].upstream_model == served
        assert policy.models[tier].api_base == f"http://{name}:{port}/v1"
        assert not policy.models[tier].sessions.slots  # vLLM has no slots to pin: it caches prefixes itself
    shares = [float(services[n]["command"][services[n]["command"].index("--gpu-memory-utilization") + 1])
              for n in ("vllm-fast", "vllm-full")]  # fmt: skip
    assert sum(shares) <= 0.95  # one card for both
    router = services["router-gpu"]
    assert "/app/policies/gpu.yaml" in router["command"] and router["ports"] == ["127.0.0.1:8090:8080"]
