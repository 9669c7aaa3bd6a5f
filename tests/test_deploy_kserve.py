"""KServe InferenceService manifests: parsed back as Kubernetes YAML, required fields checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpux.config.load import load_config
from gpux.deploy import kserve

from .conftest import MLP_YML, make_mlp
from .conftest import gpux as cli


def project(root: Path, extra: str = "") -> Path:
    make_mlp(root / "model.onnx")
    (root / "gpux.yml").write_text(MLP_YML.format(name="Tiny_MLP.v2") + extra)
    return root


@pytest.mark.parametrize("provider,gpu", [("cpu", None), ("openvino", None), ("cuda", "nvidia.com/gpu"),
                                          ("tensorrt", "nvidia.com/gpu"), ("rocm", "amd.com/gpu")])
def test_manifest_runs_the_serve_image_with_the_providers_resources(tmp_path: Path, provider: str,
                                                                    gpu: str | None) -> None:
    p = load_config(project(tmp_path, "serve: {http_port: 9000}\ndeploy:\n  ray: {autoscaling: {max_replicas: 3}}\n"))
    doc = yaml.safe_load(kserve.write(p, provider, "registry.local/tiny:1-" + provider))
    assert kserve.check(doc) == []
    assert doc["metadata"]["name"] == "tiny-mlp-v2", "a DNS-1035 label"
    pred = doc["spec"]["predictor"]
    assert (pred["minReplicas"], pred["maxReplicas"]) == (1, 3)
    [c] = pred["containers"]
    assert c["image"] == "registry.local/tiny:1-" + provider and c["ports"][0]["containerPort"] == 9000
    assert c["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 9000}
    limits = c["resources"]["limits"]
    assert (limits.get(gpu) == "1") if gpu else not any("gpu" in k for k in limits)


@pytest.mark.parametrize("mistake,expected", [
    (lambda d: d.update(kind="Deployment"), "kind"),
    (lambda d: d["metadata"].update(name="Bad_Name"), "DNS-1035"),
    (lambda d: d["spec"]["predictor"].update(containers=[]), "at least one container"),
    (lambda d: d["spec"]["predictor"]["containers"][0]["ports"].append({"containerPort": 1}), "exactly one"),
    (lambda d: d["spec"]["predictor"].update(minReplicas=5), "minReplicas 5 > maxReplicas"),
])
def test_check_catches_invalid_manifests(tmp_path: Path, mistake, expected: str) -> None:
    doc = kserve.manifest(load_config(project(tmp_path)), "cpu", "img:1")
    mistake(doc)
    assert any(expected in p for p in kserve.check(doc))


def test_cli_writes_yaml_with_the_package_default_tag(tmp_path: Path) -> None:
    root = project(tmp_path)
    r = cli("export", "kserve", str(root), "-p", "cpu", "-o", str(tmp_path / "isvc.yaml"))
    assert r.returncode == 0, r.stderr
    doc = yaml.safe_load((tmp_path / "isvc.yaml").read_text())
    assert doc["spec"]["predictor"]["containers"][0]["image"] == "gpux/tiny_mlp.v2:1.0.0-cpu"
    assert cli("export", "kserve", str(root), "-p", "coreml").returncode == 2
