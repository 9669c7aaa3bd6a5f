"""gRPC ModelStreamInfer: answers in order on one stream, a failing request answered with its error while the
stream goes on, driven by tritonclient's start_stream / async_stream_infer."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux
from tests.serving import ServerThread, mlp_project

grpcclient = pytest.importorskip("tritonclient.grpc")


def x_input(array: np.ndarray, datatype: str = "FP32") -> Any:
    item = grpcclient.InferInput("x", list(array.shape), datatype)
    item.set_data_from_numpy(array)
    return item


def collect(address: str, sends: list[tuple[str, Any]]) -> list[tuple[Any, Any]]:
    """Send (request id, input) pairs on one stream; the (result, error) of each answer in arrival order."""
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(address)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for request_id, item in sends:
            client.async_stream_infer("mlp", [item], request_id=request_id)
        return [answers.get(timeout=30) for _ in sends]
    finally:
        client.stop_stream()


def test_answers_in_order_and_an_error_keeps_the_stream_open(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1 + i % 3, 8)).astype(np.float32) for i in range(6)]
    sends = [(f"r{i}", x_input(x)) for i, x in enumerate(xs)]
    sends.insert(3, ("bad", x_input(np.zeros((1, 8), dtype=np.float64), "FP64")))
    with ServerThread([mlp]) as server:
        got = collect(server.grpc, sends)
    assert len(got) == 7
    result, error = got[3]
    assert result is None and "datatype FP64" in str(error) and "expects FP32" in str(error)
    answered = [r for r, e in got[:3] + got[4:]]
    assert [r.get_response().id for r in answered] == [f"r{i}" for i in range(6)]
    with gpux.load(str(mlp)) as session:
        for x, r in zip(xs, answered, strict=True):
            np.testing.assert_allclose(r.as_numpy("probs"), session.run({"x": x})["probs"], rtol=1e-6, atol=1e-7)


def test_requests_of_one_stream_share_a_batch(tmp_path: Path) -> None:
    """The stream's requests run at once, not one after another: with batching they merge, and they are counted."""
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0, ", max_batch_size: 16, max_queue_delay_us: 100000")
    x = np.ones((1, 8), dtype=np.float32)
    with ServerThread([mlp]) as server:
        got = collect(server.grpc, [(f"s{i}", x_input(x)) for i in range(8)])
        stats = grpcclient.InferenceServerClient(server.grpc).get_inference_statistics("mlp").model_stats[0]
    assert [r.get_response().id for r, e in got] == [f"s{i}" for i in range(8)]
    assert all(e is None for _, e in got)
    assert stats.inference_stats.success.count == 8 and stats.inference_count == 8
    assert stats.execution_count < 8
