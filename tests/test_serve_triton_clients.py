"""Triton's own clients against one `gpux serve` process serving the models Triton's example clients call
(tests/triton_models.py): the calls those examples make (infer, async infer, shared-memory clean-up, model config,
model control with a config override, health, metadata, unknown-model errors), through tritonclient's HTTP, gRPC
and asyncio clients, and the Open Inference Protocol's REST bodies as the KServe SDK reads them."""

from __future__ import annotations

import asyncio
import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.serving import error_of, post
from tests.triton_models import GPUX_YML, add_sub, triton_projects

tritonhttp = pytest.importorskip("tritonclient.http")
tritongrpc = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

from tests.test_serve_cli import Process  # noqa: E402

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones((1, 16), dtype=np.int32)


def extra_project(base: Path, name: str, build: Any, batch: int = 8) -> Path:
    root = base / name
    root.mkdir(parents=True)
    build(root / "model.onnx")
    (root / "gpux.yml").write_text(GPUX_YML.format(name=name, batch=batch))
    return root


def broken(path: Path) -> None:
    path.write_bytes(b"not an onnx model")


def sized_project(base: Path) -> Path:
    """n string [1] -> y float [5]: arange(5) reshaped to [int(n)]. It runs only on n = "5", its verify.data: a
    warm-up on generated values ("0") fails, one on the declared sample serves."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    root = base / "sized"
    root.mkdir()
    five = numpy_helper.from_array(np.arange(5, dtype=np.float32), "five")
    nodes = [helper.make_node("Cast", ["n"], ["k"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["five", "k"], ["y"])]
    graph = helper.make_graph(nodes, "sized", [helper.make_tensor_value_info("n", TensorProto.STRING, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])], [five])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), root / "model.onnx")
    np.savez(root / "sample.npz", n=np.array(["5"]))
    (root / "gpux.yml").write_text(GPUX_YML.format(name="sized", batch=0) + "verify: {data: sample.npz}\n")
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """One `gpux serve` process: Triton's example models, `simple_fp32`, `control` (a `simple` the model control
    test reloads) and `broken` (a file that is no model: reported, not served, the others serve)."""
    from onnx import TensorProto

    base = tmp_path_factory.mktemp("triton")
    paths = triton_projects(base)
    paths.append(extra_project(base, "simple_fp32", lambda p: add_sub(p, TensorProto.FLOAT, "simple_fp32")))
    paths.append(extra_project(base, "control", lambda p: add_sub(p, TensorProto.INT32, "control")))
    paths.append(extra_project(base, "broken", broken))
    paths.append(sized_project(base))
    proc = Process(*map(str, paths), "--no-access-log")
    try:
        proc.start()
        deadline = time.monotonic() + 120
        while post(proc.http, "/v2/health/ready", b"", method="GET")[0] != 200:
            assert time.monotonic() < deadline and proc.proc.poll() is None, proc.drain_log()
            time.sleep(0.1)
        yield proc
    finally:
        proc.stop()


def simple_inputs(module: Any, a: np.ndarray = A, b: np.ndarray = B, datatype: str = "INT32") -> list[Any]:
    items = [module.InferInput("INPUT0", list(a.shape), datatype), module.InferInput("INPUT1", list(b.shape), datatype)]
    items[0].set_data_from_numpy(a)
    items[1].set_data_from_numpy(b)
    return items


def test_a_model_that_cannot_open_is_reported_and_the_others_serve(served: Process) -> None:
    log = served.drain_log()
    assert "broken 1: not served: failed to load:" in log and "Traceback" not in log, log
    assert "ready: simple_string 1" in log  # its warm-up ran on numbers written as strings, not empty ones
    index = {m["name"]: m for m in tritonhttp.InferenceServerClient(served.http).get_model_repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"].startswith("failed to load:")
    assert all(m["state"] == "READY" for n, m in index.items() if n != "broken")
    status, _, raw = post(served.http, "/v2/models/broken/ready", b"", method="GET")
    assert status == 503 and "model 'broken' version 1 failed to load:" in error_of(raw)
    client = tritongrpc.InferenceServerClient(served.grpc)
    assert client.is_server_ready() and not client.is_model_ready("broken") and client.is_model_ready("simple")
    item = tritongrpc.InferInput("n", [1], "BYTES")  # warmed up on its verify.data, where "0" fails
    item.set_data_from_numpy(np.array([b"5"], dtype=np.object_))
    np.testing.assert_array_equal(client.infer("sized", [item]).as_numpy("y"), np.arange(5, dtype=np.float32))


def test_no_model_served_or_strict_stops_the_server(tmp_path: Path) -> None:
    from tests.conftest import gpux

    good, bad = triton_projects(tmp_path, ["simple"])[0], extra_project(tmp_path, "broken", broken)
    for args in ([str(bad)], [str(good), str(bad), "--strict"]):
        r = gpux("serve", *args, "--port", "0", "--grpc-port", "0", "--no-access-log", timeout=120)
        assert r.returncode not in (0, 70), r.stderr
        assert "broken 1: not served: failed to load:" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_health_and_model_ready_have_the_protocols_bodies(served: Process) -> None:
    """The Open Inference Protocol's REST bodies, which the KServe SDK's REST client parses."""
    for path, body in [("/v2/health/live", {"live": True}), ("/v2/health/ready", {"ready": True}),
                       ("/v2/models/simple/ready", {"name": "simple", "ready": True}),
                       ("/v2/models/simple/versions/1/ready", {"name": "simple", "ready": True})]:
        status, headers, raw = post(served.http, path, b"", method="GET")
        assert status == 200 and headers["content-type"] == "application/json" and json.loads(raw) == body, path
    status, _, raw = post(served.http, "/v2/models/simple", b"", method="GET")
    meta = json.loads(raw)
    assert meta["name"] == "simple" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": n, "datatype": "INT32", "shape": [-1, 16]} for n in ("INPUT0", "INPUT1")]


def test_oip_json_inference_fp32_and_bytes(served: Process) -> None:
    """FP32 and BYTES through the protocol's JSON (no binary extension), as the KServe SDK sends them."""
    body = {"id": "k", "inputs": [{"name": n, "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}
                                  for n in ("INPUT0", "INPUT1")]}
    status, _, raw = post(served.http, "/v2/models/simple_fp32/infer", json.dumps(body))
    doc = json.loads(raw)
    assert status == 200 and doc["id"] == "k" and doc["model_name"] == "simple_fp32", raw
    outputs = {o["name"]: o for o in doc["outputs"]}
    assert outputs["OUTPUT0"]["data"] == [1.0] * 16 and outputs["OUTPUT1"]["data"] == [0.0] * 16
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": ["7", "-3"] * 8},
                       {"name": "INPUT1", "shape": [1, 16], "datatype": "BYTES", "data": ["5", "4"] * 8}]}
    status, _, raw = post(served.http, "/v2/models/simple_string/infer", json.dumps(body))
    assert status == 200, raw
    outputs = {o["name"]: o for o in json.loads(raw)["outputs"]}
    assert outputs["OUTPUT0"]["data"] == ["12", "1"] * 8 and outputs["OUTPUT1"]["data"] == ["2", "-7"] * 8


def test_tritonclient_inference_on_every_client(served: Process) -> None:
    http, grpc = tritonhttp.InferenceServerClient(served.http), tritongrpc.InferenceServerClient(served.grpc)
    for result in (http.infer("simple", simple_inputs(tritonhttp)), grpc.infer("simple", simple_inputs(tritongrpc)),
                   http.async_infer("simple", simple_inputs(tritonhttp)).get_result()):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    done: queue.Queue[Any] = queue.Queue()
    grpc.async_infer("simple", simple_inputs(tritongrpc), lambda result, error: done.put((result, error)))
    result, error = done.get(timeout=30)
    assert error is None and (result.as_numpy("OUTPUT0") == A + B).all()
    words = np.array([[str(v).encode() for v in row] for row in A], dtype=np.object_)
    ones = np.array([[b"1"] * 16], dtype=np.object_)
    for module, client in ((tritonhttp, http), (tritongrpc, grpc)):
        out = client.infer("simple_string", simple_inputs(module, words, ones, "BYTES"))
        assert [int(v) for v in out.as_numpy("OUTPUT0")[0]] == list(range(1, 17))
        small = simple_inputs(module, A.astype(np.int8), B.astype(np.int8), "INT8")
        np.testing.assert_array_equal(client.infer("simple_int8", small).as_numpy("OUTPUT1"), (A - B).astype(np.int8))
        raw = np.array([[b"a\x00b", "wörld".encode(), b""]], dtype=np.object_)
        item = module.InferInput("INPUT0", [1, 3], "BYTES")
        item.set_data_from_numpy(raw)
        assert list(client.infer("simple_identity", [item]).as_numpy("OUTPUT0")[0]) == list(raw[0])


def test_asyncio_clients(served: Process) -> None:
    import tritonclient.grpc.aio as grpcaio
    import tritonclient.http.aio as httpaio

    async def both() -> list[Any]:
        http, grpc = httpaio.InferenceServerClient(served.http), grpcaio.InferenceServerClient(served.grpc)
        try:
            return list(await asyncio.gather(http.infer("simple", simple_inputs(httpaio)),
                                             grpc.infer("simple", simple_inputs(grpcaio)),
                                             http.get_model_config("simple"), grpc.get_model_config("simple")))
        finally:
            await http.close()
            await grpc.close()

    via_http, via_grpc, http_config, grpc_config = asyncio.run(both())
    assert (via_http.as_numpy("OUTPUT0") == A + B).all() and (via_grpc.as_numpy("OUTPUT1") == A - B).all()
    assert http_config["max_batch_size"] == grpc_config.config.max_batch_size == 8


def test_model_configuration_extension(served: Process) -> None:
    """Triton's ModelConfig derived from gpux.yml and what opened; tritonclient's gRPC parses it into
    model_config_pb2, the way its image client reads a model's batching, dims and input format."""
    import tritonclient.grpc.model_config_pb2 as mc

    http = tritonhttp.InferenceServerClient(served.http)
    doc = http.get_model_config("simple")
    assert doc == http.get_model_config("simple", "1")
    assert doc["name"] == "simple" and doc["platform"] == "onnxruntime_onnx" and doc["max_batch_size"] == 8
    assert doc["input"] == [{"name": n, "data_type": "TYPE_INT32", "dims": [16]} for n in ("INPUT0", "INPUT1")]
    assert [o["name"] for o in doc["output"]] == ["OUTPUT0", "OUTPUT1"]
    assert doc["dynamic_batching"] == {"max_queue_delay_microseconds": 0}
    assert doc["instance_group"] == [{"name": "simple", "count": 1, "kind": "KIND_CPU"}]
    config = tritongrpc.InferenceServerClient(served.grpc).get_model_config("densenet_onnx").config
    assert isinstance(config, mc.ModelConfig) and config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert config.input[0].format == mc.ModelInput.FORMAT_NCHW and list(config.input[0].dims) == [3, 224, 224]
    assert config.output[0].data_type == mc.TYPE_FP32 and list(config.output[0].dims) == [1000]
    assert tritongrpc.InferenceServerClient(served.grpc).get_model_config("simple_string").config.input[0].data_type \
        == mc.TYPE_STRING
    for call in (lambda: http.get_model_config("nope"),
                 lambda: tritongrpc.InferenceServerClient(served.grpc).get_model_config("nope")):
        with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is not found"):
            call()
    with pytest.raises(InferenceServerException, match="'simple' version 7 is not found"):
        http.get_model_config("simple", "7")


def test_cuda_shared_memory_is_answered_as_a_cpu_only_triton(served: Process) -> None:
    """Status empty and unregister OK (a client's clean-up), register refused naming why."""
    http, grpc = tritonhttp.InferenceServerClient(served.http), tritongrpc.InferenceServerClient(served.grpc)
    assert http.get_cuda_shared_memory_status() == [] and not grpc.get_cuda_shared_memory_status().regions
    http.unregister_cuda_shared_memory()
    grpc.unregister_cuda_shared_memory("region")
    http.unregister_system_shared_memory()
    grpc.unregister_system_shared_memory()
    with pytest.raises(InferenceServerException, match="CUDA shared memory is not supported") as caught:
        http.register_cuda_shared_memory("r", "AAAA", 0, 64)
    assert caught.value.status() == "400"
    with pytest.raises(InferenceServerException, match="system shared memory") as caught:
        grpc.register_cuda_shared_memory("r", b"\0" * 64, 0, 64)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"


def test_load_applies_a_config_override_or_refuses_it(served: Process) -> None:
    http, grpc = tritonhttp.InferenceServerClient(served.http), tritongrpc.InferenceServerClient(served.grpc)
    with pytest.raises(InferenceServerException, match="failed to load 'control'") as caught:
        http.load_model("control", config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert caught.value.status() == "400"
    http.load_model("control", config='{"max_batch_size":"16"}')
    assert http.get_model_config("control")["max_batch_size"] == 16
    grpc.load_model("control", config=json.dumps({"dynamic_batching": {"max_queue_delay_microseconds": 250},
                                                  "instance_group": [{"count": 2}]}))
    config = grpc.get_model_config("control").config
    assert config.dynamic_batching.max_queue_delay_microseconds == 250 and config.instance_group[0].count == 2
    assert config.max_batch_size == 8  # each load starts again from gpux.yml
    for wrong, field in [('{"platform": "tensorrt_plan"}', "'platform'"), ('{"sequence_batching": {}}', "sequence"),
                         ('{"dynamic_batching": {"preferred_batch_size": [4]}}', "preferredBatchSize")]:
        with pytest.raises(InferenceServerException, match=field) as caught:
            grpc.load_model("control", config=wrong)
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT" and "failed to load" in caught.value.message()
    with pytest.raises(InferenceServerException, match="failed to poll from model repository") as caught:
        grpc.load_model("control", config="{}", files={"file:1/model.onnx": b"onnx"})
    assert caught.value.status() == "StatusCode.INTERNAL"
    for client in (http, grpc):
        with pytest.raises(InferenceServerException, match="failed to load 'wrong_model_name'"):
            client.load_model("wrong_model_name")
    assert grpc.is_model_ready("control")
    assert (http.infer("control", simple_inputs(tritonhttp)).as_numpy("OUTPUT0") == A + B).all()


def test_what_gpux_does_not_do_is_refused_by_name(served: Process) -> None:
    http, grpc = tritonhttp.InferenceServerClient(served.http), tritongrpc.InferenceServerClient(served.grpc)
    refused = r"parameters\.sequence_id: gpux serve has no sequence batcher"
    with pytest.raises(InferenceServerException, match=refused) as caught:
        http.infer("simple", simple_inputs(tritonhttp), sequence_id=5, sequence_start=True)
    assert caught.value.status() == "400"
    with pytest.raises(InferenceServerException, match="sequence_id") as caught:
        grpc.infer("simple", simple_inputs(tritongrpc), sequence_id=5)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    timed = http.infer("simple", simple_inputs(tritonhttp), timeout=10_000_000)  # Triton's per-request timeout, in us
    assert (timed.as_numpy("OUTPUT0") == A + B).all()
    answers: queue.Queue[Any] = queue.Queue()
    grpc.start_stream(lambda result, error: answers.put(error))
    grpc.async_stream_infer("simple", simple_inputs(tritongrpc), enable_empty_final_response=True)
    error = answers.get(timeout=30)
    grpc.stop_stream()
    assert error is not None and "no decoupled models" in str(error)
    with pytest.raises(InferenceServerException) as caught:
        grpc.get_trace_settings()
    assert caught.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "TraceSetting is not implemented by gpux serve" in caught.value.message()
