"""Bad requests: each gets a clear 4xx {"error": ...} and the server answers the next good request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import make_mlp, make_two_inputs
from tests.serving import ServerThread, error_of, mlp_project, plain_project, post

LIMITS = ", max_body_bytes: 65536, max_tensor_elements: 1000, max_batch_size: 4"
X = {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}
GOOD = json.dumps({"inputs": [X]})


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("errors")
    slow = base / "slow"
    slow.mkdir()
    make_mlp(slow / "model.onnx")
    (slow / "gpux.yml").write_text("name: slow\nmodel: {source: model.onnx}\nruntime: {backend: cpu}\n"
                                   "serve: {request_timeout_s: 0.000001}\n")
    paths = [mlp_project(base / "mlp", "1.0.0", 0, LIMITS), plain_project(base / "two", "two", make_two_inputs), slow]
    with ServerThread(paths) as running:
        yield running


def binary(head: dict[str, Any], tail: bytes, length: int | None = None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(head).encode()
    return raw + tail, {"Inference-Header-Content-Length": str(len(raw) if length is None else length)}


def bin_x(size: int) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "parameters": {"binary_data_size": size}}]}


def infer_body(**x: Any) -> str:
    return json.dumps({"inputs": [{**X, **x}]})


HEAD_OK = json.dumps(bin_x(32)).encode()
CORPUS: list[tuple[str, str, Any, dict[str, str], int, str]] = [
    ("malformed-json", "/v2/models/mlp/infer", '{"inputs": [', {}, 400, "not valid JSON"),
    ("not-an-object", "/v2/models/mlp/infer", "[1, 2]", {}, 400, "'inputs' list"),
    ("wrong-datatype", "/v2/models/mlp/infer", infer_body(datatype="INT64", data=[1] * 8), {}, 400,
     "datatype INT64 but model 'mlp' expects FP32"),
    ("unknown-datatype", "/v2/models/mlp/infer", infer_body(datatype="FLOAT32"), {}, 400, "unknown datatype"),
    ("wrong-shape", "/v2/models/mlp/infer", infer_body(shape=[1, 7], data=[0.0] * 7), {}, 400, "expects [-1, 8]"),
    ("data-count", "/v2/models/mlp/infer", infer_body(data=[1.0, 2.0]), {}, 400, "needs 8 values but data has 2"),
    ("data-not-numbers", "/v2/models/mlp/infer", infer_body(data=["a"] * 8), {}, 400, "FP32 data must be numbers"),
    ("negative-dim", "/v2/models/mlp/infer", infer_body(shape=[-1, 8]), {}, 400, "negative dim"),
    ("missing-input", "/v2/models/two/infer",
     json.dumps({"inputs": [{"name": "ids", "shape": [1, 2], "datatype": "INT64", "data": [1, 2]}]}), {}, 400,
     "missing input 'scale'"),
    ("unknown-input", "/v2/models/mlp/infer", infer_body(name="y"), {}, 400, "has no input 'y'"),
    ("duplicate-input", "/v2/models/mlp/infer", json.dumps({"inputs": [X, X]}), {}, 400, "given twice"),
    ("unknown-output", "/v2/models/mlp/infer", json.dumps({"inputs": [X], "outputs": [{"name": "logits"}]}), {},
     400, "has no output 'logits'"),
    ("unknown-model", "/v2/models/nope/infer", GOOD, {}, 404, "Request for unknown model: 'nope' is not found"),
    ("unknown-version", "/v2/models/mlp/versions/9/infer", GOOD, {}, 404,
     "Request for unknown model: 'mlp' version 9 is not found"),
    ("unknown-version-metadata", "/v2/models/mlp/versions/9", "", {}, 404, "version 9 is not found"),
    ("oversized-body", "/v2/models/mlp/infer", " " * 70000 + GOOD, {}, 413, "serve.max_body_bytes"),
    ("too-many-elements", "/v2/models/mlp/infer", infer_body(shape=[200, 8], data=[0.0] * 1600), {}, 400,
     "serve.max_tensor_elements"),
    ("batch-over-limit", "/v2/models/mlp/infer", infer_body(shape=[5, 8], data=[0.0] * 40), {}, 400,
     "above serve.max_batch_size 4"),
    ("header-length-too-long", "/v2/models/mlp/infer", *binary(bin_x(32), bytes(32), length=5000), 400,
     "Inference-Header-Content-Length"),
    ("header-length-too-short", "/v2/models/mlp/infer", *binary(bin_x(32), bytes(32), length=20), 400,
     "not valid JSON"),
    ("header-length-not-a-number", "/v2/models/mlp/infer", HEAD_OK + bytes(32),
     {"Inference-Header-Content-Length": "abc"}, 400, "Inference-Header-Content-Length 'abc'"),
    ("truncated-binary", "/v2/models/mlp/infer", *binary(bin_x(32), bytes(16)), 400,
     "binary_data_size 32 but only 16 bytes"),
    ("binary-size-vs-shape", "/v2/models/mlp/infer", *binary(bin_x(16), bytes(16)), 400, "needs 32 bytes but 16"),
    ("trailing-bytes", "/v2/models/mlp/infer", *binary(bin_x(32), bytes(40)), 400, "8 bytes of binary data"),
    ("no-data", "/v2/models/mlp/infer", json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32"}]}),
     {}, 400, "neither 'data' nor"),
    ("timeout", "/v2/models/slow/infer", GOOD, {}, 408, "serve.request_timeout_s"),
    ("classification-not-a-count", "/v2/models/mlp/infer",
     json.dumps({"inputs": [X], "outputs": [{"name": "probs", "parameters": {"classification": "two"}}]}), {}, 400,
     "classification must be a positive integer"),
    ("unknown-path", "/v3/whatever", "", {}, 404, "under /v2"),
]


@pytest.mark.parametrize(("path", "body", "headers", "status", "message"),
                         [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_bad_request_is_a_clear_4xx_and_serving_goes_on(server: ServerThread, path: str, body: Any,
                                                        headers: dict[str, str], status: int, message: str) -> None:
    method = "GET" if not body else "POST"
    got, _, raw = post(server.http, path, body, headers, method=method)
    assert got == status, raw
    assert message in error_of(raw)
    good, _, raw = post(server.http, "/v2/models/mlp/infer", GOOD)
    assert good == 200, raw
    assert abs(sum(json.loads(raw)["outputs"][0]["data"]) - 1) < 1e-5


def test_infer_needs_post(server: ServerThread) -> None:
    status, _, raw = post(server.http, "/v2/models/mlp/infer", b"", method="GET")
    assert status == 405 and "POST" in error_of(raw)


def test_grpc_errors_carry_status_codes(server: ServerThread) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    c = grpcclient.InferenceServerClient(server.grpc)
    x = grpcclient.InferInput("x", [1, 8], "INT64")
    x.set_data_from_numpy(np.zeros((1, 8), dtype=np.int64))
    cases = [("nope", "", x, "StatusCode.NOT_FOUND", "Request for unknown model: 'nope' is not found"),
             ("mlp", "7", x, "StatusCode.NOT_FOUND", "'mlp' version 7 is not found"),
             ("mlp", "", x, "StatusCode.INVALID_ARGUMENT", "expects FP32")]
    for model, version, item, code, message in cases:
        with pytest.raises(InferenceServerException) as info:
            c.infer(model, [item], model_version=version)
        assert info.value.status() == code and message in info.value.message()
    good = grpcclient.InferInput("x", [1, 8], "FP32")
    good.set_data_from_numpy(np.zeros((1, 8), dtype=np.float32))
    assert c.infer("mlp", [good]).as_numpy("probs").shape == (1, 4)


def test_invented_model_names_are_not_metric_labels(server: ServerThread) -> None:
    assert post(server.http, "/v2/models/made-up-name/infer", GOOD)[0] == 404
    text = post(server.http, "/metrics", b"", method="GET")[2].decode()
    assert "made-up-name" not in text
    assert 'gpux_requests_total{model="(unknown)",protocol="http",status="404",version=""}' in text
