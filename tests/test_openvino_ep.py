"""ONNX Runtime's OpenVINO execution provider (`providers.openvino.runtime: onnxruntime`), for real, in a
virtualenv holding onnxruntime-openvino (it cannot share an environment with onnxruntime)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from .ort_gpu_env import distribution_python, env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return distribution_python("onnxruntime-openvino")
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not create the onnxruntime-openvino virtualenv: {exc}")


def test_openvino_ep_runs_the_onnx_artifact(python: Path, mlp_project: Path) -> None:
    p = mlp_project / "gpux.yml"
    p.write_text(p.read_text().replace("backend: cpu", "backend: openvino\nproviders:\n"
                                       "  openvino: {runtime: onnxruntime, inference_precision: f32}"))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    r = subprocess.run([str(python), "-m", "gpux", "run", str(mlp_project), "--strict", "--json", "--input",
                        json.dumps({"x": x.tolist()})], capture_output=True, text=True, timeout=300, env=env())
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "openvino" and doc["runs_on"] == "OpenVINOExecutionProvider"
    ref = ort.InferenceSession(str(mlp_project / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(doc["outputs"]["probs"]["data"], ref[0], rtol=1e-4, atol=1e-6)


def test_all_providers_benchmark_has_an_onnx_runtime_openvino_row(python: Path, mlp_project: Path) -> None:
    r = subprocess.run([str(python), "-m", "gpux", "run", str(mlp_project), "--benchmark", "--provider", "all",
                        "--runs", "5", "--warmup", "1", "--duration", "0", "--json"],
                       capture_output=True, text=True, timeout=600, env=env())
    assert r.returncode == 0, r.stderr
    rows = {(x["provider"], x["precision"]): x for x in json.loads(r.stdout)["results"]}
    ep = rows[("openvino", "fp32 (onnxruntime EP)")]
    assert ep["status"] == "ok" and ep["runs_on"] == "OpenVINOExecutionProvider"
    assert rows[("cpu", "fp32")]["status"] == "ok"
