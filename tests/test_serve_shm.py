"""The system shared memory extension, driven by tritonclient's own shared memory helpers over REST and gRPC."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serving import ServerThread, error_of, make_echo, make_two_inputs, mlp_project, plain_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
utils = pytest.importorskip("tritonclient.utils")
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="system shared memory needs /dev/shm")
CLIENTS = {"http": tritonhttp, "grpc": grpcclient}
IDS = np.array([[0, 9], [3, 3], [7, 1]], dtype=np.int64)  # 48 bytes
SCALE = np.array([[1.0], [2.0], [-0.5]], dtype=np.float32)  # 12 bytes
DELAY = ", max_batch_size: 16, max_queue_delay_us: 400000"  # an mlp request waits 0.4 s in the queue


def make_pair(path: Path) -> Path:
    """x float32 [batch, 2] -> first = x + 1, second = x * 2: two outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2, dtype=np.float32), "two")
    one = numpy_helper.from_array(np.array(1, dtype=np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["first"]), helper.make_node("Mul", ["x", "two"], ["second"])], "pair",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 2]) for n in ("first", "second")], [two, one])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("shm")
    paths = [plain_project(base / "two", "two", make_two_inputs), plain_project(base / "echo", "echo", make_echo),
             plain_project(base / "pair", "pair", make_pair), mlp_project(base / "mlp", "1.0.0", 0, DELAY)]
    with ServerThread(paths) as served:
        yield served


@pytest.fixture
def regions() -> Iterator[Any]:
    """make(size) -> (handle, key) of a fresh region; every one destroyed afterwards."""
    made: list[Any] = []

    def make(size: int) -> tuple[Any, str]:
        key = f"/gpux_test_{uuid.uuid4().hex[:12]}"
        made.append(shm.create_shared_memory_region(key[1:], key, size, create_only=True))
        return made[-1], key

    yield make
    for handle in made:
        shm.destroy_shared_memory_region(handle)


def client(server: ServerThread, protocol: str) -> Any:
    return CLIENTS[protocol].InferenceServerClient(server.http if protocol == "http" else server.grpc)


def status_of(c: Any, protocol: str, name: str = "") -> list[dict[str, Any]]:
    """The status as REST's list of {name, key, offset, byte_size} on both protocols."""
    if protocol == "http":
        return list(c.get_system_shared_memory_status(name))
    regions = c.get_system_shared_memory_status(name, as_json=True).get("regions", {})
    return [{**r, "offset": int(r.get("offset", 0)), "byte_size": int(r["byte_size"])} for r in regions.values()]


def two_inputs(protocol: str) -> list[Any]:
    module = CLIENTS[protocol]
    return [module.InferInput("ids", list(IDS.shape), "INT64"), module.InferInput("scale", list(SCALE.shape), "FP32")]


def expected_out(server: ServerThread) -> np.ndarray:
    ids, scale = two_inputs("http")
    ids.set_data_from_numpy(IDS)
    scale.set_data_from_numpy(SCALE)
    out = tritonhttp.InferenceServerClient(server.http).infer("two", [ids, scale]).as_numpy("out")
    assert out is not None and out.shape == (3, 4)
    return out


def failure(call: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    """(status, message) of a call tritonclient raises on."""
    with pytest.raises((tritonhttp.InferenceServerException, grpcclient.InferenceServerException)) as caught:
        call(*args, **kwargs)
    return str(caught.value.status()), str(caught.value.message())


BAD = {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"}


def test_extension_is_advertised(server: ServerThread) -> None:
    assert "system_shared_memory" in tritonhttp.InferenceServerClient(server.http).get_server_metadata()["extensions"]
    meta = grpcclient.InferenceServerClient(server.grpc).get_server_metadata(as_json=True)
    assert "system_shared_memory" in meta["extensions"]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inputs_and_output_in_shared_memory(server: ServerThread, regions: Any, protocol: str) -> None:
    c = client(server, protocol)
    ins, in_key = regions(64)
    outs, out_key = regions(16 + 48 + 8)
    shm.set_shared_memory_region(ins, [IDS])
    shm.set_shared_memory_region(ins, [SCALE], offset=48)
    c.register_system_shared_memory("in", in_key, 60)
    c.register_system_shared_memory("out", out_key, 56, offset=16)  # the region starts 16 bytes into the file
    try:
        assert sorted((r["name"], r["key"], r["offset"], r["byte_size"]) for r in status_of(c, protocol)) == [
            ("in", in_key, 0, 60), ("out", out_key, 16, 56)]
        assert status_of(c, protocol, "out") == [{"name": "out", "key": out_key, "offset": 16, "byte_size": 56}]
        ids, scale = two_inputs(protocol)
        ids.set_shared_memory("in", 48)
        scale.set_shared_memory("in", 12, offset=48)
        wanted = CLIENTS[protocol].InferRequestedOutput("out")
        wanted.set_shared_memory("out", 48, offset=4)
        result = c.infer("two", [ids, scale], outputs=[wanted])
        written = shm.get_contents_as_numpy(outs, np.float32, [3, 4], offset=16 + 4)
        np.testing.assert_array_equal(written, expected_out(server))
        output = result.get_output("out") if protocol == "http" else \
            result.get_response(as_json=True)["outputs"][0]  # (its get_output(as_json=True) returns None)
        assert output["shape"] in ([3, 4], ["3", "4"]) and output["datatype"] == "FP32"
        params = {k: v.get("int64_param", v.get("string_param")) if isinstance(v, dict) else v
                  for k, v in output["parameters"].items()}
        assert params == {"shared_memory_region": "out", "shared_memory_byte_size": 48 if protocol == "http"
                          else "48", "shared_memory_offset": 4 if protocol == "http" else "4"}
        assert "data" not in output and (protocol == "grpc" or "binary_data_size" not in output["parameters"])
        if protocol == "grpc":
            assert list(result.get_response().raw_output_contents) == []
    finally:
        c.unregister_system_shared_memory()
    assert status_of(c, protocol) == []


def test_grpc_mixes_raw_and_shared_memory_inputs(server: ServerThread, regions: Any) -> None:
    c = client(server, "grpc")
    handle, key = regions(12)
    shm.set_shared_memory_region(handle, [SCALE])
    c.register_system_shared_memory("scale", key, 12)
    try:
        ids, scale = two_inputs("grpc")
        ids.set_data_from_numpy(IDS)  # raw_input_contents carries ids alone
        scale.set_shared_memory("scale", 12)
        np.testing.assert_array_equal(c.infer("two", [ids, scale]).as_numpy("out"), expected_out(server))
    finally:
        c.unregister_system_shared_memory("scale")


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_output_in_shared_memory_and_one_in_the_reply(server: ServerThread, regions: Any, protocol: str) -> None:
    c = client(server, protocol)
    handle, key = regions(16)
    c.register_system_shared_memory("first", key, 16)
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    try:
        item = CLIENTS[protocol].InferInput("x", [2, 2], "FP32")
        item.set_data_from_numpy(x)
        first, second = (CLIENTS[protocol].InferRequestedOutput(n) for n in ("first", "second"))
        first.set_shared_memory("first", 16)
        result = c.infer("pair", [item], outputs=[first, second])
        np.testing.assert_array_equal(result.as_numpy("second"), x * 2)  # gRPC: its raw contents are at index 0
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.float32, [2, 2]), x + 1)
    finally:
        c.unregister_system_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_in_and_out(server: ServerThread, regions: Any, protocol: str) -> None:
    c = client(server, protocol)
    words = np.array([b"shared", b"", b"memory \xe2\x9c\x93"], dtype=object)
    serialized = utils.serialize_byte_tensor(words)
    size = utils.serialized_byte_size(serialized)
    ins, in_key = regions(size)
    outs, out_key = regions(256)
    shm.set_shared_memory_region(ins, [serialized])
    c.register_system_shared_memory("words", in_key, size)
    c.register_system_shared_memory("same", out_key, 256)
    try:
        item = CLIENTS[protocol].InferInput("words", [3], "BYTES")
        item.set_shared_memory("words", size)
        wanted = CLIENTS[protocol].InferRequestedOutput("same")
        wanted.set_shared_memory("same", 256)
        c.infer("echo", [item], outputs=[wanted])
        assert list(shm.get_contents_as_numpy(outs, np.object_, [3])) == list(words)
    finally:
        c.unregister_system_shared_memory()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_register_errors(server: ServerThread, regions: Any, tmp_path: Path, protocol: str) -> None:
    c = client(server, protocol)
    _, key = regions(32)
    status, message = failure(c.register_system_shared_memory, "big", key, 33)
    assert status == BAD[protocol]
    assert message == f"register 'big': offset 0 + byte_size 33 runs past the end of '{key}' (32 bytes)"
    assert "runs past the end" in failure(c.register_system_shared_memory, "off", key, 8, offset=30)[1]
    for bad in ("/../etc/passwd", "/dev/shm/x", "etc", "/..", "/a/../b", "/"):
        status, message = failure(c.register_system_shared_memory, "bad", bad, 8)
        assert status == BAD[protocol]
        assert message.startswith(f"register 'bad': key '{bad}' is not a POSIX shared memory name")
    missing = f"/gpux_test_missing_{uuid.uuid4().hex[:8]}"
    assert failure(c.register_system_shared_memory, "gone", missing, 8)[1] == \
        f"register 'gone': no shared memory object '{missing}' (/dev/shm{missing}); create it before registering"
    secret = tmp_path / "secret"
    secret.write_bytes(b"x" * 64)
    link = f"/dev/shm/gpux_test_link_{uuid.uuid4().hex[:8]}"
    os.symlink(secret, link)
    try:  # a link in /dev/shm does not lead out of it
        assert "cannot open shared memory object" in failure(
            c.register_system_shared_memory, "link", "/" + os.path.basename(link), 8)[1]
    finally:
        os.unlink(link)
    c.register_system_shared_memory("once", key, 16)
    try:
        status, message = failure(c.register_system_shared_memory, "once", key, 8)
        assert status == BAD[protocol]
        assert message == f"register 'once': shared memory region 'once' is already registered (key '{key}'); " \
                          "unregister it first"
    finally:
        c.unregister_system_shared_memory("once")
    status, message = failure(status_of, c, protocol, "once")
    assert status == BAD[protocol] and "unknown shared memory region 'once'" in message
    assert status_of(c, protocol) == []
    c.unregister_system_shared_memory("never-registered")  # as in Triton: no error


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_infer_errors(server: ServerThread, regions: Any, protocol: str) -> None:
    c = client(server, protocol)
    ins, key = regions(64)
    shm.set_shared_memory_region(ins, [IDS])
    shm.set_shared_memory_region(ins, [SCALE], offset=48)
    c.register_system_shared_memory("in", key, 60)
    cases = [  # (ids byte size, ids offset, ids region, output byte size) -> message
        ((40, 0, "in", 48), "input 'ids': parameters.shared_memory_byte_size is 40 but shape [3, 2] of INT64 is "
                            "48 bytes"),
        ((48, 16, "in", 48), "input 'ids': parameters.shared_memory_offset 16 + shared_memory_byte_size 48 runs "
                             "past the end of shared memory region 'in' (60 bytes)"),
        ((48, 0, "nope", 48), "input 'ids': parameters.shared_memory_region: unknown shared memory region 'nope' "
                              "(registered: in); register it first"),
        ((48, 0, "in", 40), "output 'out': 48 bytes (shape [3, 4] of FP32) do not fit "
                            "parameters.shared_memory_byte_size 40"),
    ]
    try:
        for (size, offset, region, out_size), expected in cases:
            ids, scale = two_inputs(protocol)
            ids.set_shared_memory(region, size, offset=offset)
            scale.set_shared_memory("in", 12, offset=48)
            wanted = CLIENTS[protocol].InferRequestedOutput("out")
            wanted.set_shared_memory("in", out_size)
            status, message = failure(c.infer, "two", [ids, scale], outputs=[wanted])
            assert (status, message) == (BAD[protocol], expected)
        c.unregister_system_shared_memory("in")
        ids, scale = two_inputs(protocol)
        ids.set_shared_memory("in", 48)
        scale.set_data_from_numpy(SCALE)
        status, message = failure(c.infer, "two", [ids, scale])
        assert (status, message) == (BAD[protocol], "input 'ids': parameters.shared_memory_region: unknown shared "
                                                    "memory region 'in' (registered: none); register it first")
    finally:
        c.unregister_system_shared_memory()


def test_a_file_shrunk_after_registering_is_an_error_not_a_crash(server: ServerThread, regions: Any) -> None:
    c = client(server, "http")
    _, key = regions(64)
    c.register_system_shared_memory("shrinks", key, 64)
    try:
        os.truncate(f"/dev/shm{key}", 8)
        ids, scale = two_inputs("http")
        ids.set_shared_memory("shrinks", 48)
        scale.set_data_from_numpy(SCALE)
        status, message = failure(c.infer, "two", [ids, scale])
        assert (status, message) == ("400", f"input 'ids': shared memory region 'shrinks' ends early: '{key}' is "
                                            "now 8 bytes (shrunk after it was registered)")
        assert c.is_server_live()
    finally:
        c.unregister_system_shared_memory()


def test_unregister_during_a_request_waits_for_it(server: ServerThread, regions: Any) -> None:
    """The request holds its regions (as Triton's does): it finishes and writes its output; the next one is told
    the region is unknown."""
    c = client(server, "http")
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    ins, in_key = regions(64)
    outs, out_key = regions(32)
    shm.set_shared_memory_region(ins, [x])
    c.register_system_shared_memory("x", in_key, 64)
    c.register_system_shared_memory("probs", out_key, 32)
    item = tritonhttp.InferInput("x", [2, 8], "FP32")
    item.set_shared_memory("x", 64)
    wanted = tritonhttp.InferRequestedOutput("probs")
    wanted.set_shared_memory("probs", 32)
    pool = ThreadPoolExecutor(1)
    pending = pool.submit(lambda: tritonhttp.InferenceServerClient(server.http).infer("mlp", [item], outputs=[wanted]))
    held = server.server.repo.shm._regions
    deadline = time.monotonic() + 10
    while not (held.get("probs") and held["probs"].users) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert held["probs"].users == 1  # the request holds it (and waits 0.4 s for a batch)
    c.unregister_system_shared_memory()
    assert status_of(c, "http") == []
    pending.result(30)
    pool.shutdown()
    direct = tritonhttp.InferInput("x", [2, 8], "FP32")
    direct.set_data_from_numpy(x)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(outs, np.float32, [2, 4]),
                                  c.infer("mlp", [direct]).as_numpy("probs"))
    status, message = failure(c.infer, "mlp", [item], outputs=[wanted])
    assert (status, message) == ("400", "input 'x': parameters.shared_memory_region: unknown shared memory region "
                                        "'x' (registered: none); register it first")


def test_rest_routes_and_bodies(server: ServerThread) -> None:
    assert post(server.http, "/v2/systemsharedmemory/status", "", method="GET")[2] == b"[]"
    status, _, body = post(server.http, "/v2/systemsharedmemory/region/r/register", '{"key": "/x", "offset": -1, '
                                                                                     '"byte_size": 8}')
    assert status == 400 and error_of(body) == "register 'r': offset must be a non-negative integer, got -1"
    status, _, body = post(server.http, "/v2/systemsharedmemory/region/r/register", '{"key": "/x"}')
    assert status == 400 and error_of(body) == "register 'r': byte_size must be a non-negative integer, got None"
    assert post(server.http, "/v2/systemsharedmemory/register", "{}")[0] == 404
    assert post(server.http, "/v2/systemsharedmemory/status", "")[0] == 405
    status, _, body = post(server.http, "/v2/models/two/infer", '{"inputs": [{"name": "ids", "datatype": "INT64", '
                           '"shape": [1, 1], "data": [1], "parameters": {"shared_memory_region": "r", '
                           '"shared_memory_byte_size": 8}}]}')
    assert status == 400 and error_of(body) == "input 'ids' has parameters.shared_memory_region and also data; " \
                                               "send one"
    status, _, body = post(server.http, "/v2/models/two/infer", '{"inputs": [{"name": "ids", "datatype": "INT64", '
                           '"shape": [1, 1], "parameters": {"shared_memory_region": "r"}}]}')
    assert status == 400 and error_of(body) == "input 'ids': parameters.shared_memory_byte_size is needed with " \
                                               "shared_memory_region"
