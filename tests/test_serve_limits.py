"""The serve: block's bounds on a real `gpux serve` on 127.0.0.1: headers too large (431), bodies that never arrive
(408), images too large to decode, too many files and too much decoded at once (413); malformed gRPC messages and
requests with raw and typed contents (INVALID_ARGUMENT). Each refusal names its limit or fault, is counted and logged,
and the server goes on answering."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serving import ServerThread, error_of, mean_project, mlp_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
pytest.importorskip("PIL")
LIMITS = ", body_timeout_s: 1.0, max_header_bytes: 4096"
IMAGES = ", max_files: 4, max_image_pixels: 1000000, max_decoded_bytes: 1048576"  # one 400x400 at a time


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("limits")
    with ServerThread([mlp_project(base / "mlp", "1.0.0", 0, LIMITS), mean_project(base / "mean", IMAGES)]) as s:
        yield s


def exchange(address: str, data: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes on a new connection; everything the server answers until it closes."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def live(server: ServerThread) -> int:
    return post(server.http, "/v2/health/live", b"", method="GET")[0]


@pytest.mark.parametrize("head", [
    b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 16 * 2**20 + b"\r\n\r\n",  # one large header
    b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 10_000 + b"\r\n",  # many small ones
    b"GET /v2/" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # a long request line
])
def test_a_head_over_the_limit_is_431_and_closed(server: ServerThread, head: bytes) -> None:
    answer = exchange(server.http, head)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
    assert "exceed 4096 bytes (serve.max_header_bytes)" in error_of(answer.split(b"\r\n\r\n", 1)[1])
    assert live(server) == 200


def test_a_head_within_the_limit_is_served(server: ServerThread) -> None:
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + b"X-A: b\r\n" * 400 + b"\r\n"
    assert exchange(server.http, head).startswith(b"HTTP/1.1 200 ")


def test_a_body_that_never_arrives_is_408_and_closed_while_others_are_served(server: ServerThread) -> None:
    stalled = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"inputs\": ["
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: exchange(server.http, stalled), range(8)))
        body = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]})
        assert post(server.http, "/v2/models/mlp/infer", body)[0] == 200  # meanwhile
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        assert "(serve.body_timeout_s)" in error_of(answer.split(b"\r\n\r\n", 1)[1])


def png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 100, 50)).save(out, "PNG")
    return out.getvalue()


def png_head(width: int, height: int) -> bytes:
    """A PNG's signature and header for a width x height RGB image, and no pixels: what a client may claim."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) + \
        chunk(b"IEND", b"")


def send_files(server: ServerThread, files: list[bytes]) -> np.ndarray:
    item = tritonhttp.InferInput("x", [len(files)], "BYTES")
    item.set_data_from_numpy(np.array(files, dtype=object))
    return tritonhttp.InferenceServerClient(server.http).infer("mean", [item], request_id="").as_numpy("rgb")


@pytest.mark.parametrize(("files", "message"), [
    (lambda: [png_head(13_000, 13_000)], "an image of 13000x13000 = 169000000 pixels, above the limit of 1000000 "
                                         "(serve.max_image_pixels)"),
    (lambda: [png_head(20_000, 20_000)], "above the limit of 1000000: serve.max_image_pixels"),  # Pillow's bomb
    (lambda: [png(8, 8)] * 5, "input 'x' has 5 files, above the limit of 4 (serve.max_files)"),
    (lambda: [png(8, 8), png(600, 600)], "takes 1440000 bytes decoded, above the limit of 1048576 "
                                         "(serve.max_decoded_bytes)"),
])
def test_files_over_a_limit_are_413_before_they_are_decoded(server: ServerThread, files: Callable[[], list[bytes]],
                                                            message: str) -> None:
    with pytest.raises(tritonhttp.InferenceServerException, match=r"\[413\]") as refused:
        send_files(server, files())
    assert message in str(refused.value)
    np.testing.assert_allclose(send_files(server, [png(32, 32)]), [[200 / 255, 100 / 255, 50 / 255]], rtol=1e-5)


def test_requests_over_the_decoding_budget_together_take_turns(server: ServerThread) -> None:
    """Four requests whose images take 640 KB decoded each, under a budget of 1 MiB: each waits for its turn, none
    is refused."""
    files = [png(400, 400), png(400, 400)]
    barrier = threading.Barrier(4)

    def one(_: int) -> np.ndarray:
        barrier.wait()
        return send_files(server, files)

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(one, range(4)):
            np.testing.assert_allclose(got, [[200 / 255, 100 / 255, 50 / 255]] * 2, rtol=1e-5)
    assert server.server.repo.decoding.held == 0


def test_the_limits_are_in_the_schema() -> None:
    from gpux.config.schema import Serve

    fields = Serve.model_fields
    for name in ("body_timeout_s", "keep_alive_s", "max_connections", "max_header_bytes", "max_files",
                 "max_image_pixels", "max_decoded_bytes"):
        assert fields[name].description and fields[name].default, name
    assert Path(__file__).parents[1].joinpath("schemas", "gpux.schema.json").read_text().count("max_decoded_bytes")


def grpc_call(server: ServerThread, method: str, data: bytes) -> Any:
    """Raw bytes as one gRPC message to `method` of the service; the RpcError it is answered with."""
    import grpc

    with grpc.insecure_channel(server.grpc) as channel, pytest.raises(grpc.RpcError) as info:
        channel.unary_unary(f"/inference.GRPCInferenceService/{method}")(data, timeout=30)
    return info.value


def test_a_malformed_grpc_message_is_invalid_argument_counted_and_logged(server: ServerThread,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    from tests.test_serve_hostile import requests_total

    before = requests_total(server)
    with caplog.at_level(logging.INFO, logger="gpux.serve.access"):
        for junk in (b"\xff\xff\xff", b"\x0a\x80", bytes(range(256))):
            error = grpc_call(server, "ModelInfer", junk)
            assert error.code().name == "INVALID_ARGUMENT", error
            assert "malformed ModelInferRequest message" in error.details()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "gpux.serve.access"]
    lines = [x for x in lines if x["protocol"] == "grpc"]
    assert [(x["method"], x["status"]) for x in lines] == [("ModelInfer", 400)] * 3
    key = ("(unknown)", "grpc", "400")
    assert requests_total(server).get(key, 0) - before.get(key, 0) == 3
    error = grpc_call(server, "ModelMetadata", b"\xff\xff\xff")
    assert error.code().name == "INVALID_ARGUMENT" and "malformed ModelMetadataRequest" in error.details()


def test_a_malformed_message_on_a_stream_is_answered_and_the_stream_goes_on(server: ServerThread) -> None:
    import grpc
    from tritonclient.grpc import service_pb2

    good = service_pb2.ModelInferRequest(model_name="mlp", id="good")
    good.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    good.raw_input_contents.append(np.full((1, 8), 0.5, np.float32).tobytes())
    with grpc.insecure_channel(server.grpc) as channel:
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                       response_deserializer=service_pb2.ModelStreamInferResponse.FromString)
        answers = list(stream(iter([b"\xff\xff\xff", good.SerializeToString()]), timeout=30))
    assert "malformed ModelInferRequest message" in answers[0].error_message
    assert answers[1].error_message == "" and answers[1].infer_response.id == "good"


def test_raw_and_typed_contents_in_one_request_are_refused(server: ServerThread) -> None:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name="mlp")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    tensor.contents.fp32_contents.extend([0.5] * 8)
    request.raw_input_contents.append(np.full((1, 8), 0.5, np.float32).tobytes())
    error = grpc_call(server, "ModelInfer", request.SerializeToString())
    assert error.code().name == "INVALID_ARGUMENT" and "contents and raw_input_contents" in error.details()


def test_a_connection_past_the_limit_is_503_and_closed(tmp_path: Path) -> None:
    with ServerThread([mlp_project(tmp_path / "mlp", "1.0.0", 0, ", max_connections: 3")]) as server:
        host, port = server.http.split(":")
        held = [socket.create_connection((host, int(port))) for _ in range(3)]
        try:
            answer = exchange(server.http, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:100]
            assert "more than 3 connections open (serve.max_connections)" in error_of(answer.split(b"\r\n\r\n")[1])
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 10
        while live(server) != 200 and time.monotonic() < deadline:  # the refused one lingers a moment
            time.sleep(0.1)
        assert live(server) == 200


def test_data_and_binary_data_in_one_rest_input_are_refused(server: ServerThread) -> None:
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8,
                                   "parameters": {"binary_data_size": 32}}]}).encode()
    status, _, body = post(server.http, "/v2/models/mlp/infer", head + np.full((1, 8), 0.5, np.float32).tobytes(),
                           {"Inference-Header-Content-Length": str(len(head))})
    assert status == 400 and "has 'data' and also parameters.binary_data_size" in error_of(body)
