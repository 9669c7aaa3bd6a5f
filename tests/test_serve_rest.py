"""`gpux serve` over REST, driven by the real tritonclient HTTP client and by raw requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux
from tests.serving import ServerThread, error_of, post, projects

tritonhttp = pytest.importorskip("tritonclient.http")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, dict[str, Path]]]:
    base = tmp_path_factory.mktemp("served")
    paths = projects(base)
    with ServerThread(paths) as server:
        yield server, {p.name: p for p in paths}


@pytest.fixture(scope="module")
def client(served: tuple[ServerThread, dict[str, Path]]) -> Any:
    return tritonhttp.InferenceServerClient(served[0].http)


def reference(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with gpux.load(str(path)) as session:
        return session.run(feeds)


def infer_input(name: str, array: np.ndarray, datatype: str, binary: bool) -> Any:
    item = tritonhttp.InferInput(name, list(array.shape), datatype)
    item.set_data_from_numpy(array, binary_data=binary)
    return item


def test_health_and_server_metadata(client: Any) -> None:
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "gpux" and "binary_tensor_data" in meta["extensions"]


def test_model_metadata_lists_versions_and_variable_dims(client: Any) -> None:
    meta = client.get_model_metadata("mlp")
    assert meta["versions"] == ["1.0.0", "2.0.0"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}]
    assert meta["outputs"] == [{"name": "probs", "datatype": "FP32", "shape": [-1, 4]}]
    assert client.get_model_metadata("mlp", "1.0.0")["versions"] == ["1.0.0"]
    assert client.get_model_metadata("flip")["inputs"][0] == {"name": "flags", "datatype": "BOOL", "shape": [3]}
    assert client.is_model_ready("mlp", "2.0.0") and client.is_model_ready("half")
    assert not client.is_model_ready("nope")


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_mlp_versions_match_session_run(served: Any, client: Any, binary: bool) -> None:
    _, paths = served
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    seen = {}
    for version, folder in (("1.0.0", "mlp1"), ("2.0.0", "mlp2"), ("", "mlp2")):
        out = tritonhttp.InferRequestedOutput("probs", binary_data=binary)
        result = client.infer("mlp", [infer_input("x", x, "FP32", binary)], model_version=version, outputs=[out])
        got = result.as_numpy("probs")
        np.testing.assert_allclose(got, reference(paths[folder], {"x": x})["probs"], rtol=1e-6, atol=1e-7)
        assert result.get_response()["model_version"] == (version or "2.0.0")
        seen[version] = got
    assert not np.allclose(seen["1.0.0"], seen["2.0.0"])  # two versions really are two models


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_int64_inputs_and_requested_outputs(served: Any, client: Any, binary: bool) -> None:
    _, paths = served
    ids = np.array([[1, 2, 3], [4, 5, 9]], dtype=np.int64)
    scale = np.array([[2.0], [0.5]], dtype=np.float32)
    inputs = [infer_input("ids", ids, "INT64", binary), infer_input("scale", scale, "FP32", binary)]
    result = client.infer("two", inputs, outputs=[tritonhttp.InferRequestedOutput("out", binary_data=binary)],
                          request_id="req-7")
    np.testing.assert_allclose(result.as_numpy("out"), reference(paths["two"], {"ids": ids, "scale": scale})["out"],
                               rtol=1e-6)
    assert result.get_response()["id"] == "req-7"


def test_fp16_travels_binary(served: Any, client: Any) -> None:
    h = np.array([[0.5, -1.25, 3.0, 1000.0]], dtype=np.float16)
    result = client.infer("half", [infer_input("h", h, "FP16", True)])
    got = result.as_numpy("y")
    assert got.dtype == np.float16 and result.get_output("y")["datatype"] == "FP16"
    np.testing.assert_array_equal(got, h * np.float16(2) + np.float16(1))


def test_bool_json_and_nested_or_flat_data(served: Any) -> None:
    server, _ = served
    for data in ([True, False, True], [[True, False, True]]):
        body = {"id": "b", "parameters": {"tag": 1},
                "inputs": [{"name": "flags", "shape": [3], "datatype": "BOOL", "data": data}]}
        status, headers, raw = post(server.http, "/v2/models/flip/infer", json.dumps(body))
        assert status == 200, raw
        doc = json.loads(raw)
        assert headers["content-type"] == "application/json"
        assert doc["outputs"] == [{"name": "inverted", "datatype": "BOOL", "shape": [3], "data": [False, True, False]}]
        assert doc["id"] == "b" and doc["model_name"] == "flip"
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 10
    nested = {"inputs": [{"name": "h", "shape": [2, 4], "datatype": "FP16", "data": x.tolist()}]}
    flat = {"inputs": [{"name": "h", "shape": [2, 4], "datatype": "FP16", "data": x.reshape(-1).tolist()}]}
    answers = [json.loads(post(server.http, "/v2/models/half/infer", json.dumps(b))[2]) for b in (nested, flat)]
    assert answers[0] == answers[1] and answers[0]["outputs"][0]["shape"] == [2, 4]


def test_binary_output_by_request_parameter(served: Any) -> None:
    server, _ = served
    x = np.ones((1, 8), dtype=np.float32)
    head = json.dumps({"parameters": {"binary_data_output": True},
                       "inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 32}}]}).encode()
    status, headers, raw = post(server.http, "/v2/models/mlp/versions/1.0.0/infer", head + x.tobytes(),
                                {"Inference-Header-Content-Length": str(len(head))})
    assert status == 200, raw
    split = int(headers["inference-header-content-length"])
    doc = json.loads(raw[:split])
    assert doc["outputs"][0]["parameters"] == {"binary_data_size": 16}
    probs = np.frombuffer(raw[split:], dtype=np.float32)
    assert probs.shape == (4,) and abs(probs.sum() - 1) < 1e-5


def test_metrics_count_requests_and_name_the_provider(served: Any, client: Any) -> None:
    server, _ = served
    client.infer("flip", [infer_input("flags", np.array([True, True, False]), "BOOL", True)])
    status, headers, raw = post(server.http, "/metrics", b"", method="GET")
    text = raw.decode()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert 'gpux_requests_total{model="flip",protocol="http",status="200",version="1"}' in text
    assert 'gpux_model_info{instances="1",model="mlp",provider="cpu"' in text
    assert "gpux_queue_duration_seconds_bucket" in text and "gpux_batch_size_bucket" in text


def test_api_key(tmp_path: Path) -> None:
    [path, *_] = projects(tmp_path)
    with ServerThread([path], api_key="s3cret") as server:
        assert post(server.http, "/v2/health/ready", b"", method="GET")[0] == 200  # probes stay open
        status, _, raw = post(server.http, "/v2/models/mlp", b"", method="GET")
        assert status == 401 and "API key" in error_of(raw)
        assert post(server.http, "/v2/models/mlp", b"", {"Authorization": "Bearer nope"}, method="GET")[0] == 401
        assert post(server.http, "/v2/models/mlp", b"", {"Authorization": "Bearer s3cret"}, method="GET")[0] == 200
        c = tritonhttp.InferenceServerClient(server.http)
        x = np.zeros((1, 8), dtype=np.float32)
        result = c.infer("mlp", [infer_input("x", x, "FP32", True)], headers={"Authorization": "Bearer s3cret"})
        assert result.as_numpy("probs").shape == (1, 4)
        from tritonclient.grpc import InferenceServerClient as GrpcClient
        from tritonclient.grpc import InferInput as GrpcInput
        from tritonclient.utils import InferenceServerException

        g, item = GrpcClient(server.grpc), GrpcInput("x", [1, 8], "FP32")
        item.set_data_from_numpy(x)
        with pytest.raises(InferenceServerException, match="API key"):
            g.infer("mlp", [item])
        assert g.infer("mlp", [item], headers={"authorization": "Bearer s3cret"}).as_numpy("probs").shape == (1, 4)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_bytes_tensors(client: Any, binary: bool) -> None:
    words = np.array([b"hello", "wörld".encode(), b""], dtype=np.object_)
    out = tritonhttp.InferRequestedOutput("same", binary_data=binary)
    result = client.infer("echo", [infer_input("words", words, "BYTES", binary)], outputs=[out])
    assert result.get_output("same")["datatype"] == "BYTES"
    got = [w if isinstance(w, bytes) else w.encode() for w in result.as_numpy("same")]  # JSON carries text
    assert got == list(words)


def test_not_ready_until_loaded(mlp_project: Path) -> None:
    """A model still opening: live yes, ready no (503), and its requests 503 with the reason."""
    import asyncio

    from gpux.config.locate import open_project
    from gpux.serve.metrics import Metrics
    from gpux.serve.models import Repository
    from gpux.serve.rest import Limits, RestApp
    repo = Repository([open_project(str(mlp_project / "gpux.yml"))], Metrics())
    app = RestApp(repo, repo.metrics, Limits(max_body_bytes=1 << 20, max_tensor_elements=1 << 20))

    async def call(method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
        return sent[0]["status"], sent[1]["body"]

    async def main() -> list[tuple[int, bytes]]:
        return [await call("GET", "/v2/health/live"), await call("GET", "/v2/health/ready"),
                await call("GET", "/v2/models/tiny-mlp/ready"),
                await call("POST", "/v2/models/tiny-mlp/infer", b"{}")]

    live, ready, model_ready, infer = asyncio.run(main())
    assert live[0] == 200 and ready[0] == 503 and model_ready[0] == 503
    assert infer[0] == 503 and "not ready yet" in json.loads(infer[1])["error"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests(served: Any, client: Any, algorithm: str) -> None:
    _, paths = served
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    result = client.infer("mlp", [infer_input("x", x, "FP32", True)], request_compression_algorithm=algorithm)
    np.testing.assert_allclose(result.as_numpy("probs"), reference(paths["mlp2"], {"x": x})["probs"], rtol=1e-6)


def test_compression_errors(served: Any) -> None:
    import gzip

    server, _ = served
    status, _, raw = post(server.http, "/v2/models/mlp/infer", b"{}", {"Content-Encoding": "br"})
    assert status == 400 and "unsupported Content-Encoding 'br'" in error_of(raw)
    status, _, raw = post(server.http, "/v2/models/mlp/infer", b"not gzip", {"Content-Encoding": "gzip"})
    assert status == 400 and "not valid gzip data" in error_of(raw)
    bomb = gzip.compress(b" " * (65 * 2**20))  # 65 MiB of spaces: above the 64 MiB default limit
    status, _, raw = post(server.http, "/v2/models/mlp/infer", bomb, {"Content-Encoding": "gzip"})
    assert status == 413 and "decompressed" in error_of(raw)


def test_same_numbers_as_gpux_run(served: Any, client: Any) -> None:
    from tests.conftest import gpux as cli

    _, paths = served
    x = [[0.1 * i - 0.4 for i in range(8)], [0.25] * 8]
    r = cli("run", str(paths["mlp1"]), "--input", json.dumps({"x": x}), "--json")
    assert r.returncode == 0, r.stderr
    expected = np.array(json.loads(r.stdout)["outputs"]["probs"]["data"], dtype=np.float32)
    result = client.infer("mlp", [infer_input("x", np.array(x, dtype=np.float32), "FP32", True)],
                          model_version="1.0.0")
    np.testing.assert_allclose(result.as_numpy("probs"), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_classification_names_the_labels(served: Any, client: Any, binary: bool) -> None:
    _, paths = served
    x = np.random.default_rng(9).standard_normal((3, 8)).astype(np.float32)
    out = tritonhttp.InferRequestedOutput("probs", binary_data=binary, class_count=2)
    got = client.infer("mlp", [infer_input("x", x, "FP32", binary)], outputs=[out]).as_numpy("probs")
    probs = reference(paths["mlp2"], {"x": x})["probs"]
    labels = ["cat", "dog", "fox", "owl"]
    assert got.shape == (3, 2)
    for row, entries in zip(probs, got, strict=True):
        best = np.argsort(-row)[:2]
        texts = [e.decode() if isinstance(e, bytes) else e for e in entries]
        assert [t.split(":", 2)[1:] for t in texts] == [[str(i), labels[i]] for i in best]
        np.testing.assert_allclose([float(t.split(":")[0]) for t in texts], row[best], rtol=1e-5)
