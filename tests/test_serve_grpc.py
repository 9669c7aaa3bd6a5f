"""`gpux serve` over gRPC (inference.GRPCInferenceService), driven by the real tritonclient gRPC client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux
from tests.serving import ServerThread, projects

grpcclient = pytest.importorskip("tritonclient.grpc")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, dict[str, Path], str]]:
    paths = projects(tmp_path_factory.mktemp("grpc"))
    with ServerThread(paths) as server:
        yield grpcclient.InferenceServerClient(server.grpc), {p.name: p for p in paths}, server.grpc


def item(name: str, array: np.ndarray, datatype: str) -> Any:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def reference(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with gpux.load(str(path)) as session:
        return session.run(feeds)


def test_health_and_metadata(served: Any) -> None:
    c, _, _ = served
    assert c.is_server_live() and c.is_server_ready()
    assert c.is_model_ready("mlp") and c.is_model_ready("mlp", "1.0.0")
    meta = c.get_server_metadata(as_json=True)
    assert meta["name"] == "gpux" and "binary_tensor_data" in meta["extensions"]
    model = c.get_model_metadata("mlp", as_json=True)
    assert model["versions"] == ["1.0.0", "2.0.0"] and model["platform"] == "gpux_cpu"
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "8"]}]  # int64 as JSON strings


def test_fp32_versions_match_session_run(served: Any) -> None:
    c, paths, _ = served
    x = np.random.default_rng(3).standard_normal((5, 8)).astype(np.float32)
    for version, folder in (("1.0.0", "mlp1"), ("2.0.0", "mlp2"), ("", "mlp2")):
        result = c.infer("mlp", [item("x", x, "FP32")], model_version=version, request_id="g1")
        np.testing.assert_allclose(result.as_numpy("probs"), reference(paths[folder], {"x": x})["probs"],
                                   rtol=1e-6, atol=1e-7)
        response = result.get_response()
        assert response.model_version == (version or "2.0.0") and response.id == "g1"


def test_int64_with_requested_output(served: Any) -> None:
    c, paths, _ = served
    ids = np.array([[0, 9], [3, 3], [7, 1]], dtype=np.int64)
    scale = np.array([[1.0], [2.0], [-1.0]], dtype=np.float32)
    result = c.infer("two", [item("ids", ids, "INT64"), item("scale", scale, "FP32")],
                     outputs=[grpcclient.InferRequestedOutput("out")])
    np.testing.assert_allclose(result.as_numpy("out"), reference(paths["two"], {"ids": ids, "scale": scale})["out"],
                               rtol=1e-6)


def test_fp16_and_bool(served: Any) -> None:
    c, _, _ = served
    h = np.array([[1.5, 2.0, -3.0, 0.25]], dtype=np.float16)
    got = c.infer("half", [item("h", h, "FP16")]).as_numpy("y")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, h * np.float16(2) + np.float16(1))
    flags = np.array([True, False, False])
    np.testing.assert_array_equal(c.infer("flip", [item("flags", flags, "BOOL")]).as_numpy("inverted"), ~flags)


def test_typed_contents_as_kserve_clients_send_them(served: Any) -> None:
    """Clients other than tritonclient may send InferTensorContents instead of raw bytes."""
    import grpc

    from gpux.serve.proto import inference_pb2 as pb
    from gpux.serve.proto import inference_pb2_grpc as pb_grpc

    _, paths, address = served
    ids = np.array([[1, 2], [3, 4]], dtype=np.int64)
    scale = np.array([[1.5], [-2.0]], dtype=np.float32)
    request = pb.ModelInferRequest(model_name="two", id="typed")
    tensor = request.inputs.add(name="ids", datatype="INT64", shape=[2, 2])
    tensor.contents.int64_contents.extend(ids.ravel().tolist())
    tensor = request.inputs.add(name="scale", datatype="FP32", shape=[2, 1])
    tensor.contents.fp32_contents.extend(scale.ravel().tolist())
    with grpc.insecure_channel(address) as channel:
        response = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request)
    assert response.id == "typed" and [o.name for o in response.outputs] == ["out"]
    got = np.frombuffer(response.raw_output_contents[0], dtype="<f4").reshape(list(response.outputs[0].shape))
    np.testing.assert_allclose(got, reference(paths["two"], {"ids": ids, "scale": scale})["out"], rtol=1e-6)


def test_classification_over_grpc(served: Any) -> None:
    c, _, _ = served
    x = np.zeros((1, 8), dtype=np.float32)
    got = c.infer("mlp", [item("x", x, "FP32")],
                  outputs=[grpcclient.InferRequestedOutput("probs", class_count=4)]).as_numpy("probs")
    assert got.shape == (1, 4)
    assert sorted(e.decode().split(":")[2] for e in got[0]) == ["cat", "dog", "fox", "owl"]
