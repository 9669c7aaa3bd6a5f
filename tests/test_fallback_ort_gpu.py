"""Real fallback with onnxruntime-gpu on a machine without a GPU (own virtualenv, made by the tooling)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .ort_gpu_env import env as gpu_env
from .ort_gpu_env import ort_gpu_python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return ort_gpu_python()
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not create the onnxruntime-gpu virtualenv: {exc}")


def gpux_gpu(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "gpux", *args], capture_output=True, text=True, timeout=300,
                          env={**gpu_env(), **(env or {})})


def test_the_venv_really_has_the_gpu_eps(python: Path) -> None:
    r = subprocess.run([str(python), "-c", "import onnxruntime as o; print(o.get_available_providers())"],
                       capture_output=True, text=True, check=True)
    assert "TensorrtExecutionProvider" in r.stdout and "CUDAExecutionProvider" in r.stdout


@pytest.mark.parametrize("requested", ["tensorrt", "cuda"])
def test_requesting_a_gpu_provider_runs_on_cpu_and_says_why(python: Path, mlp_project: Path, requested: str) -> None:
    x = json.dumps({"x": [[0.5] * 8]})
    r = gpux_gpu(python, "run", str(mlp_project), "--provider", requested, "--input", x, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["runs_on"] == "CPUExecutionProvider" and doc["fell_back"]
    skipped = {a["provider"]: a for a in doc["attempts"] if not a["ok"]}
    expected = {"tensorrt", "cuda"} if requested == "tensorrt" else {"cuda"}
    assert set(skipped) == expected
    for a in skipped.values():
        assert a["stage"] == "probe" and "NVIDIA" in a["reason"] and a["fix"]
    text = gpux_gpu(python, "run", str(mlp_project), "--provider", requested, "--input", x)
    assert f"skipped {requested} (probe): no NVIDIA driver" in text.stderr
    assert f"provider: requested {requested} (--provider) → ran cpu [CPUExecutionProvider]" in text.stderr


def test_onnx_runtime_silent_drop_is_caught_after_session_creation(python: Path, mlp_project: Path) -> None:
    """With the device probe off, ONNX Runtime itself is asked: it 'succeeds' on CPU, and gpux notices."""
    x = json.dumps({"x": [[0.5] * 8]})
    r = gpux_gpu(python, "run", str(mlp_project), "--provider", "cuda", "--input", x, "--json",
                 env={"GPUX_PROBE_DEVICES": "0"})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    [cuda] = [a for a in doc["attempts"] if a["provider"] == "cuda"]
    assert cuda["stage"] == "session" and "did not take CUDAExecutionProvider" in cuda["reason"]
    assert doc["provider"] == "cpu"


def test_strict_exits_4(python: Path, mlp_project: Path) -> None:
    x = json.dumps({"x": [[0.5] * 8]})
    for provider in ("tensorrt", "cuda"):
        r = gpux_gpu(python, "run", str(mlp_project), "--provider", provider, "--strict", "--input", x)
        assert r.returncode == 4, r.stderr
        assert f"{provider} unavailable (probe)" in r.stderr and "Traceback" not in r.stderr
    r = gpux_gpu(python, "build", str(mlp_project), "--provider", "tensorrt", "--strict")
    assert r.returncode == 4
