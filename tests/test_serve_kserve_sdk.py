"""The KServe SDK's own clients (kserve's InferenceRESTClient over the Open Inference Protocol v2 and
InferenceGRPCClient) against one `gpux serve`: live, ready, model ready, model metadata, FP32 and BYTES inference,
tensors sent as raw bytes and as typed values. The SDK runs in its own virtualenv (tests/kserve_env.py, made
once): tests/kserve_client.py makes the calls there and prints what it got; the answers are checked here against
ONNX Runtime running the same model files."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto

from tests.kserve_env import Unavailable, kserve_python
from tests.serving import post
from tests.test_serve_cli import Process
from tests.triton_models import GPUX_YML, add_sub, triton_projects

pytestmark = pytest.mark.slow
CLIENT = Path(__file__).with_name("kserve_client.py")
CALLS = ["fp32_binary", "fp32_typed", "bytes_binary", "bytes_typed"]


@pytest.fixture(scope="module")
def python() -> Path:
    try:
        return kserve_python()
    except Unavailable as exc:  # an offline machine: the SDK cannot be installed, nothing here can run
        pytest.skip(str(exc))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"could not create the kserve virtualenv: {exc}")


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("kserve")
    (base / "simple_fp32").mkdir()
    add_sub(base / "simple_fp32" / "model.onnx", TensorProto.FLOAT, "simple_fp32")
    (base / "simple_fp32" / "gpux.yml").write_text(GPUX_YML.format(name="simple_fp32", batch=8))
    return {"fp32": base / "simple_fp32", "bytes": triton_projects(base, ["simple_string"])[0]}


@pytest.fixture(scope="module")
def answers(python: Path, projects: dict[str, Path]) -> Iterator[dict[str, Any]]:
    proc = Process(*map(str, projects.values()), "--no-access-log")
    try:
        proc.start()
        deadline = time.monotonic() + 120
        while post(proc.http, "/v2/health/ready", b"", method="GET")[0] != 200:
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.drain_log()
            time.sleep(0.1)
        r = subprocess.run([str(python), str(CLIENT), proc.http, proc.grpc], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr + proc.drain_log()
        yield json.loads(r.stdout)
    finally:
        proc.stop()


def expected(projects: dict[str, Path], sent: dict[str, Any], kind: str) -> dict[str, np.ndarray]:
    """What the model file computes on the inputs the client sent, by ONNX Runtime directly."""
    session = ort.InferenceSession(str(projects[kind] / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {n: np.array(v, dtype=np.float32 if kind == "fp32" else object) for n, v in sent[kind].items()}
    return dict(zip(["OUTPUT0", "OUTPUT1"], session.run(["OUTPUT0", "OUTPUT1"], feeds), strict=True))


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_health_and_model_readiness(answers: dict[str, Any], protocol: str) -> None:
    doc = answers[protocol]
    assert doc["live"] is True and doc["ready"] is True and doc["model_ready"] is True
    if protocol == "rest":
        assert doc["unknown_ready"] is False  # a model not served answers not ready (404), not an error


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_model_metadata(answers: dict[str, Any], protocol: str) -> None:
    meta = answers[protocol]["metadata"]  # REST's parsed by the SDK's own ModelMetadataResponse model
    assert meta["name"] == "simple_fp32" and meta["versions"] == ["1"] and meta["platform"]
    assert meta["inputs"] == [{"name": n, "datatype": "FP32", "shape": [-1, 16]} for n in ("INPUT0", "INPUT1")]


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_inference_answers_what_the_model_computes(answers: dict[str, Any], projects: dict[str, Path],
                                                   protocol: str, call: str) -> None:
    kind = call.split("_")[0]
    got, want = answers[protocol][call], expected(projects, answers["sent"], kind)
    assert set(got) == set(want)
    for name, ref in want.items():
        assert got[name]["datatype"] == ("FP32" if kind == "fp32" else "BYTES")
        assert got[name]["shape"] == list(ref.shape)
        if kind == "fp32":
            np.testing.assert_allclose(got[name]["data"], ref.flatten(), rtol=1e-6)
        else:
            assert got[name]["data"] == [str(v) for v in ref.flatten()], name



@pytest.mark.parametrize(("protocol", "status"), [("rest", 404), ("grpc", "NOT_FOUND")])
def test_an_unknown_model_reaches_the_caller_as_the_servers_one_line(answers: dict[str, Any], protocol: str,
                                                                    status: Any) -> None:
    """The SDK raises with gpux's message: REST's HTTPStatusError reads the JSON body's `error`."""
    failed = answers[protocol]["unknown_infer"]
    assert failed["status"] == status
    assert "unknown model: 'no_such_model'" in failed["message"] and "simple_fp32" in failed["message"]
