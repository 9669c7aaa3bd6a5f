"""KServe: an InferenceService manifest that runs a `gpux package --serve` image (the Open Inference Protocol,
KServe's v2) with ports, probes, replicas and resources taken from gpux.yml and the provider."""

from __future__ import annotations

import re
from typing import Any

from gpux.config.load import Project
from gpux.errors import UsageError
from gpux.providers import registry

API_VERSION = "serving.kserve.io/v1beta1"
# the device plugin resource each GPU provider asks Kubernetes for
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def service_name(name: str) -> str:
    """The model name as a DNS-1035 label (what Kubernetes accepts as an InferenceService name)."""
    label = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    label = label if label[:1].isalpha() else f"m-{label}"
    return label[:63].rstrip("-")


def replicas(project: Project) -> tuple[int, int]:
    ray = project.config.deploy.ray
    if ray.autoscaling is not None:
        return ray.autoscaling.min_replicas, ray.autoscaling.max_replicas
    return ray.num_replicas, ray.num_replicas


def resources(provider: str, cpu: str, memory: str) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": cpu, "memory": memory}
    row = registry().get(provider)
    if row is not None and row.gpu_resource:
        limits[row.gpu_resource] = "1"
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}


def manifest(project: Project, provider: str, image: str, cpu: str = "1", memory: str = "2Gi") -> dict[str, Any]:
    """The InferenceService for `project` on `provider`, running `image` (built by `gpux package --serve`)."""
    port = project.config.serve.http_port or 8000
    low, high = replicas(project)
    probe = {"httpGet": {"path": "/v2/health/ready", "port": port}, "periodSeconds": 5}
    container = {
        "name": "kserve-container",
        "image": image,
        "ports": [{"containerPort": port, "name": "http1", "protocol": "TCP"}],  # KServe routes one port
        "readinessProbe": {**probe, "initialDelaySeconds": 5},
        "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": port}, "periodSeconds": 10},
        "resources": resources(provider, cpu, memory),
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceService",
        "metadata": {"name": service_name(project.name),
                     "labels": {"app.kubernetes.io/name": service_name(project.name),
                                "app.kubernetes.io/version": re.sub(r"[^A-Za-z0-9_.-]", "-",
                                                                    str(project.config.version))[:63],
                                "app.kubernetes.io/managed-by": "gpux"},
                     "annotations": {"gpux/provider": provider, "gpux/protocol": "v2"}},
        "spec": {"predictor": {"minReplicas": low, "maxReplicas": high, "containers": [container]}},
    }


def check(doc: Any) -> list[str]:
    """The fields an InferenceService with a custom predictor container must have, and their shapes."""
    found: list[str] = []

    def get(path: str) -> Any:
        value = doc
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    for path, want in (("apiVersion", API_VERSION), ("kind", "InferenceService")):
        if get(path) != want:
            found.append(f"{path}: expected {want!r}, got {get(path)!r}")
    name = get("metadata.name")
    if not isinstance(name, str) or not DNS_1035.match(name) or len(name) > 63:
        found.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    containers = get("spec.predictor.containers")
    if not isinstance(containers, list) or not containers:
        return [*found, "spec.predictor.containers: at least one container is required"]
    c = containers[0]
    if not c.get("image"):
        found.append("spec.predictor.containers[0].image is required")
    ports = c.get("ports") or []
    if len(ports) != 1 or not isinstance(ports[0].get("containerPort"), int):
        found.append("spec.predictor.containers[0].ports: KServe exposes exactly one containerPort")
    low, high = get("spec.predictor.minReplicas"), get("spec.predictor.maxReplicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        found.append(f"spec.predictor: minReplicas {low} > maxReplicas {high}")
    return found


def write(project: Project, provider: str, image: str, **resources_: str) -> str:
    """The manifest as YAML, checked first."""
    import yaml

    doc = manifest(project, provider, image, **resources_)
    problems = check(doc)
    if problems:
        raise UsageError(f"{project.name}: the InferenceService would be invalid: " + "; ".join(problems))
    return yaml.safe_dump(doc, sort_keys=False)
