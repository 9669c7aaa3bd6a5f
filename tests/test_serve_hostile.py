"""Hostile and edge requests against a real `gpux serve` on 127.0.0.1: each is a clear 4xx naming what is wrong (never
a traceback), every answer is counted, replies are always JSON, slow clients are cut off and one large request does
not stall the others."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.conftest import make_two_inputs
from tests.serving import (
    ServerThread,
    error_of,
    make_bool,
    make_echo,
    make_fp16,
    make_raises,
    mlp_project,
    plain_project,
    post,
)

tritonhttp = pytest.importorskip("tritonclient.http")
tritongrpc = pytest.importorskip("tritonclient.grpc")
HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("hostile")
    paths = [mlp_project(base / "mlp", "1.0.0", 0, f", header_timeout_s: {HEADER_TIMEOUT_S}"),
             plain_project(base / "half", "half", make_fp16), plain_project(base / "flip", "flip", make_bool),
             plain_project(base / "echo", "echo", make_echo), plain_project(base / "two", "two", make_two_inputs),
             plain_project(base / "raises", "raises", make_raises)]
    with ServerThread(paths) as running:
        yield running


def x_body(**x: Any) -> str:
    return json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8, **x}]})


def infer(server: ServerThread, body: str | bytes, model: str = "mlp",
          headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, _, raw = post(server.http, f"/v2/models/{model}/infer", body, headers)
    return status, raw


def requests_total(server: ServerThread) -> dict[tuple[str, str, str], float]:
    """gpux_requests_total by (model, protocol, status), summed over versions."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(post(server.http, "/metrics", b"", method="GET")[2].decode()):
        for sample in family.samples:
            if sample.name == "gpux_requests_total":
                key = (sample.labels["model"], sample.labels["protocol"], sample.labels["status"])
                out[key] = out.get(key, 0) + sample.value
    return out


def grpc_infer(server: ServerThread, model: str, tensors: list[tuple[str, str, list[int], bytes]]) -> Any:
    """A ModelInfer with raw contents as any client may send them (tritonclient checks shapes first)."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, shape, raw in tensors:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(raw)
    with grpc.insecure_channel(server.grpc) as channel, pytest.raises(grpc.RpcError) as info:
        service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    return info.value


def errors_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("gpux")]


# 1. nesting: the JSON parser's own limit, and data nested deeper than any tensor, each a 400 naming the input
def test_deep_nesting_is_a_400_naming_the_input(server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    status, raw = infer(server, x_body().replace('"data": [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]', f'"data": {deep}'))
    assert status == 400 and error_of(raw).startswith("input 'x': data nests deeper than"), raw
    words = {"name": "words", "shape": [1], "datatype": "BYTES", "data": json.loads("[" * 200 + '"a"' + "]" * 200)}
    status, raw = infer(server, json.dumps({"inputs": [words]}), "echo")
    assert status == 400 and error_of(raw) == "input 'words': data nests deeper than 32 lists (a tensor has at " \
                                              "most 32 dims)"
    status, raw = infer(server, '{"parameters": {"p": ' + deep + '}, "inputs": []}')
    assert status == 400 and "request JSON nests deeper than 500 levels at parameters.p" in error_of(raw)
    assert infer(server, x_body())[0] == 200
    assert not errors_logged(caplog)


# 2. shapes numpy cannot hold, negative or not matching the data: 400 / INVALID_ARGUMENT, counted, logged as such
@pytest.mark.parametrize(("shape", "message"), [
    ([2**63, 2**63, 0], "non-zero dims multiply to 85070591730234615865843651857942052864, above the limit"),
    ([2**40, 0], "above the limit of 16777216"), ([10**30], "elements exceed the limit"),
    ([-1, 8], "negative dim"), ([1] * 40, "40 dims, more than 32"), ([2, 8], "needs 16 values but data has 8")])
def test_bad_shapes_are_400s(server: ServerThread, caplog: pytest.LogCaptureFixture, shape: list[int],
                             message: str) -> None:
    caplog.set_level(logging.INFO, logger="gpux.serve.access")
    before = requests_total(server)
    status, raw = infer(server, x_body(shape=shape))
    assert status == 400 and message in error_of(raw) and "input 'x'" in error_of(raw), raw
    grpc_shape = [min(d, 2**62) for d in shape]  # gRPC dims are int64
    error = grpc_infer(server, "mlp", [("x", "FP32", grpc_shape, bytes(32 if shape == [2, 8] else 0))])
    assert error.code().name == "INVALID_ARGUMENT" and "input 'x'" in error.details(), error.details()
    after = requests_total(server)
    for protocol in ("http", "grpc"):
        assert after[("mlp", protocol, "400")] - before.get(("mlp", protocol, "400"), 0) == 1
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gpux.serve.access"]
    assert [line["status"] for line in logged if line["protocol"] == "grpc"] == [400]
    assert not errors_logged(caplog)


# 3. JSON has no NaN or Infinity: such inputs are 400s naming the input; such outputs travel as strings
@pytest.mark.parametrize(("model", "body", "message"), [
    ("mlp", x_body().replace("0.5, 0.5]", "0.5, NaN]"), "input 'x': FP32 data must be numbers, got NaN/Infinity"),
    ("mlp", x_body().replace("0.5, 0.5]", "0.5, -Infinity]"), "got NaN/Infinity, which JSON does not have"),
    ("mlp", x_body().replace("0.5, 0.5]", "0.5, 1e999]"), "input 'x': data holds a value out of the FP32 range"),
    ("mlp", x_body().replace("0.5, 0.5]", "0.5, 1e39]"), "out of the FP32 range"),
    ("half", json.dumps({"inputs": [{"name": "h", "shape": [1, 4], "datatype": "FP16", "data": [7e4, 0, 0, 0]}]}),
     "input 'h': data holds a value out of the FP16 range")])
def test_non_finite_json_inputs_are_400s(server: ServerThread, model: str, body: str, message: str) -> None:
    status, raw = infer(server, body, model)
    assert status == 400 and message in error_of(raw), raw


def test_non_finite_outputs_are_json_strings(server: ServerThread) -> None:
    h = np.array([[60000, -60000, np.nan, 1]], dtype=np.float16)  # h * 2 + 1 overflows float16
    item = tritonhttp.InferInput("h", [1, 4], "FP16")
    item.set_data_from_numpy(h, binary_data=True)
    out = tritonhttp.InferRequestedOutput("y", binary_data=False)
    result = tritonhttp.InferenceServerClient(server.http).infer("half", [item], outputs=[out])
    np.testing.assert_array_equal(result.as_numpy("y"), np.array([[np.inf, -np.inf, np.nan, 3]], np.float16))
    head = json.dumps({"inputs": [{"name": "h", "shape": [1, 4], "datatype": "FP16",
                                   "parameters": {"binary_data_size": 8}}]}).encode()
    status, raw = infer(server, head + h.tobytes(), "half", {"Inference-Header-Content-Length": str(len(head))})

    def strict(token: str) -> Any:
        raise AssertionError(f"bare {token} in the reply: not JSON")

    assert status == 200
    assert json.loads(raw, parse_constant=strict)["outputs"][0]["data"] == ["Infinity", "-Infinity", "NaN", 3.0]


# 4. parameters are typed: a string "false" is not false
@pytest.mark.parametrize(("body", "message"), [
    (json.dumps({"parameters": {"binary_data_output": "false"}, **json.loads(x_body())}),
     "parameters.binary_data_output must be true or false, got 'false'"),
    (json.dumps({"outputs": [{"name": "probs", "parameters": {"binary_data": 1}}], **json.loads(x_body())}),
     "output 'probs': parameters.binary_data must be true or false, got 1"),
    (json.dumps({"parameters": {"answers": "no"}, **json.loads(x_body())}), "parameters.answers must be true or false"),
    (json.dumps({"id": 7, **json.loads(x_body())}), "'id' must be a string, got 7"),
    (x_body(data=None, parameters={"binary_data_size": True}), "binary_data_size must be a non-negative integer")])
def test_parameters_are_typed(server: ServerThread, body: str, message: str) -> None:
    status, raw = infer(server, body)
    assert status == 400 and message in error_of(raw), raw
    body = json.dumps({"parameters": {"binary_data_output": False}, **json.loads(x_body())})
    status, raw = infer(server, body)
    assert status == 200 and len(json.loads(raw)["outputs"][0]["data"]) == 4


# 5. the data of a datatype is of its JSON kind: numbers (integers for INT/UINT), true/false for BOOL, strings for BYTES
@pytest.mark.parametrize(("model", "item", "message"), [
    ("mlp", {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": ["1.5"] * 8},
     "input 'x': FP32 data must be numbers, got a string ('1.5')"),
    ("mlp", {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [True] * 8},
     "input 'x': FP32 data must be numbers, got true/false (True)"),
    ("mlp", {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [[0.5] * 7 + [False]]}, "got true/false"),
    ("mlp", {"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [None] * 8}, "got null"),
    ("two", {"name": "ids", "shape": [1, 2], "datatype": "INT64", "data": [1.5, 2]},
     "input 'ids': INT64 data must be integers, got a number (1.5)"),
    ("flip", {"name": "flags", "shape": [3], "datatype": "BOOL", "data": [1, 0, 1]},
     "input 'flags': BOOL data must be true or false, got an integer (1)"),
    ("echo", {"name": "words", "shape": [1], "datatype": "BYTES", "data": [1]},
     "input 'words': BYTES data must be strings, got an integer (1)")])
def test_data_must_be_of_the_datatypes_kind(server: ServerThread, model: str, item: dict[str, Any],
                                            message: str) -> None:
    status, raw = infer(server, json.dumps({"inputs": [item]}), model)
    assert status == 400 and message in error_of(raw), raw


# 6. a client sending its request head slower than serve.header_timeout_s is answered 408 and closed
def test_slow_headers_are_cut_off_while_others_are_served(server: ServerThread) -> None:
    host, port = server.http.split(":")
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 20 + b"\r\n"
    opened = time.monotonic()
    slow, idle = (socket.create_connection((host, int(port))) for _ in range(2))
    ended: dict[str, tuple[bytes, float]] = {}

    def watch(name: str, sock: socket.socket) -> None:
        data = b""
        try:
            while chunk := sock.recv(1024):
                data += chunk
        except OSError:  # a reset is a close too
            pass
        ended[name] = (data, time.monotonic() - opened)

    def trickle() -> None:  # one byte every 0.1 s: the head would take 20 s
        try:
            for byte in head:
                slow.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass

    for target, args in ((watch, ("slow", slow)), (watch, ("idle", idle)), (trickle, ())):
        threading.Thread(target=target, args=args, daemon=True).start()
    served = []
    while len(ended) < 2 and time.monotonic() - opened < HEADER_TIMEOUT_S + 5:  # others are answered meanwhile
        served.append(infer(server, x_body())[0])
        time.sleep(0.05)
    slow.close()
    idle.close()
    for name in ("slow", "idle"):
        data, after = ended[name]
        assert data.startswith(b"HTTP/1.1 408 Request Timeout") or data == b"", (name, data)
        assert HEADER_TIMEOUT_S - 0.1 < after < HEADER_TIMEOUT_S + 2, (name, after)
    assert len(served) >= 5 and set(served) == {200}


# 7. every answer is counted: a model whose session raises (500), a bad request (400), a body over the limit (413)
def test_every_answer_is_counted(server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    before = requests_total(server)
    boom = json.dumps({"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": ["boom"]}]})
    status, raw = infer(server, boom, "raises")
    assert status == 500 and "inference failed: RuntimeException" in error_of(raw)
    error = grpc_infer(server, "raises", [("s", "BYTES", [1], b"\x04\x00\x00\x00boom")])
    assert error.code().name == "INTERNAL" and "inference failed" in error.details()
    assert infer(server, x_body(shape=[2**63, 2**63, 0]))[0] == 400
    host, port = server.http.split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 413")
    after = requests_total(server)
    for key in [("raises", "http", "500"), ("raises", "grpc", "500"), ("mlp", "http", "400"), ("mlp", "http", "413")]:
        assert after.get(key, 0) - before.get(key, 0) == 1, key
    ok = json.dumps({"inputs": [{"name": "s", "shape": [1], "datatype": "BYTES", "data": ["fine"]}]})
    assert infer(server, ok, "raises")[0] == 200


# 9. one large legal request decodes (in a worker process: json.loads holds the GIL) and runs and renders (on
# threads) off the event loop, which answers everyone else meanwhile; the server runs in its own process, so the
# client's threads here do not share its GIL
def test_a_large_request_does_not_stall_the_others(tmp_path: Any) -> None:
    from tests.test_serve_cli import Process

    server = Process(str(mlp_project(tmp_path / "mlp", "1.0.0", 0)), "--no-access-log")
    try:
        server.start()
        rows = 400_000
        body = json.dumps({"inputs": [{"name": "x", "shape": [rows, 8], "datatype": "FP32",
                                       "data": np.full((rows, 8), 0.25).tolist()}]}).encode()
        result: list[Any] = []

        def large() -> None:
            started = time.perf_counter()
            status, _, raw = post(server.http, "/v2/models/mlp/infer", body)
            result.extend([status, time.perf_counter() - started, raw])

        thread = threading.Thread(target=large)
        thread.start()
        waits = []
        while thread.is_alive():
            started = time.perf_counter()
            assert post(server.http, "/v2/health/live", b"", method="GET")[0] == 200
            waits.append(time.perf_counter() - started)
            time.sleep(0.02)
        thread.join()
    finally:
        server.stop()
    status, took, raw = result
    assert status == 200 and json.loads(raw)["outputs"][0]["shape"] == [rows, 4]
    assert len(waits) >= 5 and max(waits) < took / 4, (max(waits), len(waits), took)


def test_large_batches_run_on_a_thread(server: ServerThread) -> None:
    worker = server.server.repo.find("mlp").worker
    assert not worker.runs_inline({"x": np.zeros((400_000, 8), np.float32)})  # whatever the warm-up measured


# 8. draining: new requests are refused with what is happening
def test_drain_says_the_server_is_shutting_down(tmp_path: Any) -> None:
    with ServerThread([mlp_project(tmp_path / "mlp", "1.0.0", 0)]) as server:
        server.loop.call_soon_threadsafe(server.server.refuse_new)
        deadline = time.monotonic() + 10
        while server.server.repo.live and time.monotonic() < deadline:
            time.sleep(0.01)
        status, raw = infer(server, x_body())
        assert status == 503 and error_of(raw).startswith("server is shutting down: model 'mlp' takes no new"), raw
        status, _, raw = post(server.http, "/v2/health/ready", b"", method="GET")
        assert status == 503 and error_of(raw) == "server is shutting down"
        item = tritongrpc.InferInput("x", [1, 8], "FP32")
        item.set_data_from_numpy(np.zeros((1, 8), np.float32))
        from tritonclient.utils import InferenceServerException

        with pytest.raises(InferenceServerException) as info:
            tritongrpc.InferenceServerClient(server.grpc).infer("mlp", [item])
        assert info.value.status() == "StatusCode.UNAVAILABLE" and "shutting down" in info.value.message()
