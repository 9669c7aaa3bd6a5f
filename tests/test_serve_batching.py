"""Dynamic batching: concurrent requests merge along the batch dim, each gets its own rows back, exactly."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import gpux
from tests.conftest import make_two_inputs
from tests.serving import ServerThread, mlp_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
BATCHING = ", max_batch_size: 8, max_queue_delay_us: 100000, instances: 2"


def metric(text: str, name: str, model: str) -> float:
    match = re.search(rf'^{name}{{model="{model}"}} (\S+)$', text, re.M)
    assert match, f"{name} for {model} not in metrics"
    return float(match.group(1))


def test_concurrent_requests_are_merged_and_split_back(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0, BATCHING)
    two = tmp_path / "two"
    two.mkdir()
    make_two_inputs(two / "model.onnx")
    (two / "gpux.yml").write_text("name: two\nmodel: {source: model.onnx}\nruntime: {backend: cpu}\n"
                                  f"serve: {{{BATCHING[2:]}}}\n")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1 + i % 2, 8)).astype(np.float32) for i in range(16)]
    # different seq lengths cannot share a batch: they are held over to the next one
    pairs = [(rng.integers(0, 10, (1, 2 + i % 2)), rng.standard_normal((1, 1)).astype(np.float32)) for i in range(8)]
    with ServerThread([mlp, two]) as server:

        def call_mlp(x: np.ndarray) -> np.ndarray:
            item = tritonhttp.InferInput("x", list(x.shape), "FP32")
            item.set_data_from_numpy(x)
            return tritonhttp.InferenceServerClient(server.http).infer("mlp", [item]).as_numpy("probs")

        def call_two(pair: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
            ids, scale = tritonhttp.InferInput("ids", list(pair[0].shape), "INT64"), \
                tritonhttp.InferInput("scale", [1, 1], "FP32")
            ids.set_data_from_numpy(pair[0])
            scale.set_data_from_numpy(pair[1])
            return tritonhttp.InferenceServerClient(server.http).infer("two", [ids, scale]).as_numpy("out")

        with ThreadPoolExecutor(16) as pool:
            mlp_out = list(pool.map(call_mlp, xs))
            two_out = list(pool.map(call_two, pairs))
        text = post(server.http, "/metrics", b"", method="GET")[2].decode()
    with gpux.load(str(mlp)) as s:
        for x, got in zip(xs, mlp_out, strict=True):
            np.testing.assert_allclose(got, s.run({"x": x})["probs"], rtol=1e-5, atol=1e-6)
    with gpux.load(str(two)) as s:
        for (ids, scale), got in zip(pairs, two_out, strict=True):
            np.testing.assert_allclose(got, s.run({"ids": ids, "scale": scale})["out"], rtol=1e-5, atol=1e-6)
    rows = sum(len(x) for x in xs)
    assert metric(text, "gpux_batch_size_sum", "mlp") == rows
    assert metric(text, "gpux_batch_size_count", "mlp") < len(xs)  # fewer inferences than requests: merged
    assert metric(text, "gpux_batch_size_count", "two") >= 2  # two seq lengths: at least two batches


def test_instances_without_batching(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0, ", instances: 2")
    xs = [np.full((1, 8), i / 10, dtype=np.float32) for i in range(12)]
    with ServerThread([mlp]) as server:

        def call(x: np.ndarray) -> np.ndarray:
            item = tritonhttp.InferInput("x", [1, 8], "FP32")
            item.set_data_from_numpy(x)
            return tritonhttp.InferenceServerClient(server.http).infer("mlp", [item]).as_numpy("probs")

        with ThreadPoolExecutor(6) as pool:
            outs = list(pool.map(call, xs))
        text = post(server.http, "/metrics", b"", method="GET")[2].decode()
    assert 'gpux_model_info{instances="2",model="mlp",provider="cpu"' in text
    assert metric(text, "gpux_batch_size_sum", "mlp") == metric(text, "gpux_batch_size_count", "mlp") == 12
    with gpux.load(str(mlp)) as s:
        for x, got in zip(xs, outs, strict=True):
            np.testing.assert_allclose(got, s.run({"x": x})["probs"], rtol=1e-6, atol=1e-7)
