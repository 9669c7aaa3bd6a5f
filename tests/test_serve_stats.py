"""The statistics extension: per-model counters in Triton's layout, read by tritonclient over REST and gRPC."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from tests.serving import ServerThread, error_of, make_bool, mlp_project, plain_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
BATCHING = ", max_batch_size: 16, max_queue_delay_us: 100000"
PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    base = tmp_path_factory.mktemp("stats")
    paths = [mlp_project(base / "mlp", "1.0.0", 0, BATCHING), plain_project(base / "flip", "flip", make_bool)]
    with ServerThread(paths) as served:
        yield served


def infer_mlp(address: str, rows: int) -> Any:
    item = tritonhttp.InferInput("x", [rows, 8], "FP32")
    item.set_data_from_numpy(np.ones((rows, 8), dtype=np.float32))
    return tritonhttp.InferenceServerClient(address).infer("mlp", [item])


def test_counts_requests_samples_and_batches(server: ServerThread) -> None:
    client = tritonhttp.InferenceServerClient(server.http)
    before = client.get_inference_statistics("mlp")["model_stats"]
    assert [(s["name"], s["version"]) for s in before] == [("mlp", "1.0.0")]
    assert before[0]["inference_count"] == before[0]["execution_count"] == before[0]["last_inference"] == 0
    assert set(before[0]["inference_stats"]) == set(PHASES)
    started = time.time() * 1000
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _i: infer_mlp(server.http, 2), range(8)))  # 8 requests of 2 samples, merged
    stats = client.get_inference_statistics("mlp", "1.0.0")["model_stats"][0]
    inference = stats["inference_stats"]
    assert stats["inference_count"] == 16
    assert 1 <= stats["execution_count"] < 8  # merged into fewer inferences than requests
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in stats["batch_stats"]) == 16
    assert sum(b["compute_infer"]["count"] for b in stats["batch_stats"]) == stats["execution_count"]
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[phase]["count"] == 8, phase
        assert inference[phase]["ns"] > 0, phase
    assert inference["fail"] == {"count": 0, "ns": 0}
    assert inference["queue"]["ns"] > 0  # each waited for its batch to fill or the delay to pass
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"]
    assert started - 1 <= stats["last_inference"] <= time.time() * 1000 + 1


def test_failed_request_is_counted_apart(server: ServerThread) -> None:
    client = tritonhttp.InferenceServerClient(server.http)
    before = client.get_inference_statistics("mlp")["model_stats"][0]["inference_stats"]
    status, _, body = post(server.http, "/v2/models/mlp/infer",
                           '{"inputs":[{"name":"x","datatype":"INT64","shape":[1,8],"data":[0,0,0,0,0,0,0,0]}]}')
    assert status == 400 and "datatype" in error_of(body)
    after = client.get_inference_statistics("mlp")["model_stats"][0]["inference_stats"]
    assert after["fail"]["count"] == before["fail"]["count"] + 1 and after["fail"]["ns"] > before["fail"]["ns"]
    assert after["success"] == before["success"]


def test_model_without_batch_counts_one_inference_per_request(server: ServerThread) -> None:
    client = tritonhttp.InferenceServerClient(server.http)
    item = tritonhttp.InferInput("flags", [3], "BOOL")
    item.set_data_from_numpy(np.array([True, False, True]))
    for _ in range(2):
        client.infer("flip", [item])
    stats = client.get_inference_statistics("flip")["model_stats"][0]
    assert stats["inference_count"] == stats["execution_count"] == 2  # not 3 samples each: flags has no batch dim
    assert stats["batch_stats"] == [{"batch_size": 1, "compute_input": {"count": 0, "ns": 0},
                                     "compute_infer": stats["batch_stats"][0]["compute_infer"],
                                     "compute_output": {"count": 0, "ns": 0}}]


def test_grpc_and_rest_agree_and_list_every_model(server: ServerThread) -> None:
    infer_mlp(server.http, 3)
    rest = tritonhttp.InferenceServerClient(server.http).get_inference_statistics()["model_stats"]
    assert [s["name"] for s in rest] == ["flip", "mlp"]
    grpc = grpcclient.InferenceServerClient(server.grpc)
    one = grpc.get_inference_statistics("mlp").model_stats[0]  # the protobuf message
    mlp = next(s for s in rest if s["name"] == "mlp")
    assert (one.name, one.version, one.inference_count, one.execution_count) == \
        ("mlp", "1.0.0", mlp["inference_count"], mlp["execution_count"])
    assert one.inference_stats.success.count == mlp["inference_stats"]["success"]["count"]
    assert one.inference_stats.queue.ns == mlp["inference_stats"]["queue"]["ns"]
    every = grpc.get_inference_statistics(as_json=True)["model_stats"]
    assert [s["name"] for s in every] == ["flip", "mlp"]


def test_unknown_model_or_version(server: ServerThread) -> None:
    status, _, body = post(server.http, "/v2/models/nope/stats", b"", method="GET")
    assert status == 404 and "Request for unknown model: 'nope' is not found" in error_of(body)
    status, _, body = post(server.http, "/v2/models/mlp/versions/9/stats", b"", method="GET")
    assert status == 404 and "version 9 is not found" in error_of(body)
    with pytest.raises(grpcclient.InferenceServerException, match="Request for unknown model: 'nope' is not found"):
        grpcclient.InferenceServerClient(server.grpc).get_inference_statistics("nope")


def test_an_inference_is_counted_when_its_caller_gave_up_or_it_failed() -> None:
    import asyncio

    from gpux.serve.batcher import Worker

    def slow(feeds: dict[str, Any]) -> dict[str, Any]:
        time.sleep(0.2)
        return {"y": feeds["x"]}

    def broken(feeds: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the runtime failed")

    async def run() -> tuple[Any, Any]:
        gave_up, failed = Worker([slow]), Worker([broken])
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(gave_up.infer({"x": np.zeros((1, 2))}), 0.05)
        with pytest.raises(RuntimeError):
            await failed.infer({"x": np.zeros((1, 2))})
        await asyncio.sleep(0.4)  # the inference given up on ends meanwhile
        return gave_up.stats, failed.stats

    gave_up, failed = asyncio.run(run())
    assert (gave_up.queue.count, gave_up.execution_count, gave_up.compute_infer.count) == (1, 1, 1)
    assert gave_up.runs.seconds >= 0.2
    assert (failed.queue.count, failed.execution_count) == (1, 0)


def test_every_refused_request_is_one_failure_on_every_protocol(server: ServerThread) -> None:
    """Wherever a request fails (its body, its inputs, the model), on REST, gRPC or a stream, it is one failure of
    the model it names, as gpux_requests_total counts it."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    client = tritonhttp.InferenceServerClient(server.http)

    def fails() -> int:
        return int(client.get_inference_statistics("mlp")["model_stats"][0]["inference_stats"]["fail"]["count"])

    before = fails()
    few = '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,8],"data":[0,0,0]}]}'  # refused as the body is read
    assert post(server.http, "/v2/models/mlp/infer", few)[0] == 400
    assert post(server.http, "/v2/models/mlp/infer", "{not json")[0] == 400
    short = service_pb2.ModelInferRequest(model_name="mlp")
    short.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    short.raw_input_contents.append(b"\0" * 12)  # refused as the message is decoded
    with grpc.insecure_channel(server.grpc) as channel:
        with pytest.raises(grpc.RpcError):
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(short, timeout=30)
        stream = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(iter([short, short]), timeout=30)
        assert all(answer.error_message for answer in stream)
    assert fails() == before + 5
