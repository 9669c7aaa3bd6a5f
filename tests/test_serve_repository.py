"""The model repository extension: index, unload (in-flight requests finish) and load (a new model file or version
picked up without a restart), driven by tritonclient over REST and gRPC."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux
from tests.conftest import make_mlp
from tests.serving import MLP, ServerThread, error_of, make_bool, mlp_project, plain_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
X = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)


def probs(address: str) -> np.ndarray:
    item = tritonhttp.InferInput("x", list(X.shape), "FP32")
    item.set_data_from_numpy(X)
    return tritonhttp.InferenceServerClient(address).infer("mlp", [item]).as_numpy("probs")


def reference(folder: Path) -> np.ndarray:
    with gpux.load(str(folder)) as session:
        return session.run({"x": X})["probs"]


def queue_count(address: str) -> float:
    text = post(address, "/metrics", b"", method="GET")[2].decode()
    return float(re.search(r'^gpux_queue_duration_seconds_count\{model="mlp"\} (\S+)$', text, re.M).group(1))


def test_index_unload_load_over_rest(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    flip = plain_project(tmp_path / "flip", "flip", make_bool)
    with ServerThread([mlp, flip]) as server:
        client = tritonhttp.InferenceServerClient(server.http)
        assert client.get_model_repository_index() == [
            {"name": "flip", "version": "1", "state": "READY"}, {"name": "mlp", "version": "1.0.0", "state": "READY"}]
        first = probs(server.http)

        client.unload_model("mlp")
        assert not client.is_model_ready("mlp")
        assert client.is_server_ready()  # a model unloaded on purpose does not make the server unready
        status, _, body = post(server.http, "/v2/models/mlp/infer",
                               '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,8],"data":[0,0,0,0,0,0,0,0]}]}')
        assert status == 404 and "model 'mlp' is unloaded" in error_of(body)
        assert post(server.http, "/v2/models/mlp", b"", method="GET")[0] == 404
        assert client.get_model_repository_index()[1] == {"name": "mlp", "version": "1.0.0", "state": "UNAVAILABLE",
                                                          "reason": "unloaded"}
        status, _, body = post(server.http, "/v2/repository/index", '{"ready": true}')
        assert status == 200 and [m["name"] for m in json.loads(body)] == ["flip"]
        flags = tritonhttp.InferInput("flags", [3], "BOOL")
        flags.set_data_from_numpy(np.array([True, False, True]))
        assert client.infer("flip", [flags]).as_numpy("inverted").tolist() == [False, True, False]  # others serve

        client.load_model("mlp")
        assert client.is_model_ready("mlp")
        np.testing.assert_array_equal(probs(server.http), first)

        make_mlp(mlp / "model.onnx", seed=7)  # a new model file and a new version: picked up by a load
        (mlp / "gpux.yml").write_text(MLP.format(version="1.1.0", serve=""))
        queued = queue_count(server.http)
        client.load_model("mlp")
        assert client.get_model_metadata("mlp")["versions"] == ["1.1.0"]
        np.testing.assert_allclose(probs(server.http), reference(mlp), rtol=1e-6, atol=1e-7)
        assert not np.allclose(probs(server.http), first)
        assert client.get_inference_statistics("mlp")["model_stats"][0]["version"] == "1.1.0"
        assert queue_count(server.http) == queued + 2  # two requests since; Prometheus's counts go on across the reload

        with pytest.raises(tritonhttp.InferenceServerException, match="unknown model 'nope'"):
            client.load_model("nope")


def test_a_load_reads_a_model_rewritten_in_place(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """A retrained model written over the served file, same size and mtime: a load serves the new weights."""
    from tests.conftest import rewrite_in_place

    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    with ServerThread([mlp]) as server:
        first = probs(server.http)
        tritonhttp.InferenceServerClient(server.http).load_model("mlp")  # the store is there now: hashes memoised
        elsewhere = tmp_path_factory.mktemp("new")
        make_mlp(elsewhere / "model.onnx", seed=7)
        rewrite_in_place(mlp / "model.onnx", (elsewhere / "model.onnx").read_bytes())
        tritonhttp.InferenceServerClient(server.http).load_model("mlp")
        assert not np.allclose(probs(server.http), first)
        np.testing.assert_allclose(probs(server.http), reference(mlp), rtol=1e-6, atol=1e-7)


def test_failed_load_keeps_the_old_model_serving(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    with ServerThread([mlp]) as server:
        client = tritonhttp.InferenceServerClient(server.http)
        before = probs(server.http)
        (mlp / "model.onnx").write_bytes(b"not an onnx file")
        with pytest.raises(tritonhttp.InferenceServerException, match="failed to load model 'mlp'"):
            client.load_model("mlp")
        (mlp / "gpux.yml").write_text("name: mlp\nversion: [\n")
        with pytest.raises(tritonhttp.InferenceServerException, match=r"failed to load model 'mlp'.*gpux\.yml"):
            client.load_model("mlp")
        assert client.is_model_ready("mlp")
        np.testing.assert_array_equal(probs(server.http), before)


def test_unload_lets_requests_in_flight_finish(tmp_path: Path) -> None:
    """A request waiting in a batch (max_queue_delay_us 400 ms) when the unload comes still gets its answer; the
    unload returns after it."""
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0, ", max_batch_size: 8, max_queue_delay_us: 400000")
    with ServerThread([mlp]) as server, ThreadPoolExecutor(1) as pool:
        client = tritonhttp.InferenceServerClient(server.http)
        pending = pool.submit(probs, server.http)
        time.sleep(0.15)
        started = time.perf_counter()
        client.unload_model("mlp")
        waited = time.perf_counter() - started
        np.testing.assert_allclose(pending.result(), reference(mlp), rtol=1e-6, atol=1e-7)
        assert waited > 0.1  # the unload waited for the request in its batch
        assert not client.is_model_ready("mlp")


def test_repository_over_grpc(tmp_path: Path) -> None:
    mlp = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    with ServerThread([mlp]) as server:
        client: Any = grpcclient.InferenceServerClient(server.grpc)
        index = client.get_model_repository_index(as_json=True)["models"]
        assert index == [{"name": "mlp", "version": "1.0.0", "state": "READY"}]
        client.unload_model("mlp")
        assert not client.is_model_ready("mlp")
        assert client.get_model_repository_index().models[0].state == "UNAVAILABLE"
        item = grpcclient.InferInput("x", list(X.shape), "FP32")
        item.set_data_from_numpy(X)
        with pytest.raises(grpcclient.InferenceServerException, match="is unloaded") as caught:
            client.infer("mlp", [item])
        assert caught.value.status() == "StatusCode.NOT_FOUND"
        client.load_model("mlp")
        assert client.is_model_ready("mlp")
        np.testing.assert_allclose(client.infer("mlp", [item]).as_numpy("probs"), reference(mlp), rtol=1e-6,
                                   atol=1e-7)
        with pytest.raises(grpcclient.InferenceServerException, match="unknown model 'nope'"):
            client.unload_model("nope")
