"""Ray Serve for real: a local single-node cluster (dashboard and usage stats off, 2 CPUs), the MLP with two
replicas behind the Open Inference Protocol ingress, driven by tritonclient's HTTP client."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpux
from gpux.config.load import load_config
from gpux.deploy.ray import actor_options, deployment_options

from .conftest import MLP_YML, make_mlp

pytestmark = pytest.mark.slow

RAY_BLOCK = "deploy:\n  ray: {num_replicas: 2, max_ongoing_requests: 16, ray_actor_options: {num_cpus: 0.5}}\n"


def project(root: Path, extra: str = RAY_BLOCK) -> Path:
    make_mlp(root / "model.onnx")
    (root / "gpux.yml").write_text(MLP_YML.format(name="tiny-mlp") + extra)
    return root


def test_actor_options_follow_the_provider_and_the_config(tmp_path: Path) -> None:
    p = load_config(project(tmp_path, "deploy:\n  ray: {autoscaling: {max_replicas: 3}}\n"))
    assert actor_options(p, "cuda") == {"num_gpus": 1} and actor_options(p, "cpu") == {"num_cpus": 1}
    opts = deployment_options(p, "cpu")
    assert "num_replicas" not in opts and opts["autoscaling_config"]["max_replicas"] == 3
    assert opts["max_ongoing_requests"] == 32, "above Ray's default of 5, below which a batch never fills"
    (tmp_path / "q").mkdir()
    q = load_config(project(tmp_path / "q"))
    assert deployment_options(q, "cuda")["ray_actor_options"] == {"num_gpus": 1, "num_cpus": 0.5}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray import serve

    from gpux.deploy.ray import app

    root = project(tmp_path_factory.mktemp("ray-mlp"))
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app([str(root)], provider="cpu"), name="gpux", route_prefix="/", blocking=False)
        yield {"root": root, "url": f"127.0.0.1:{port}", "serve": serve}
    finally:
        serve.shutdown()
        ray.shutdown()
    assert not ray.is_initialized()


def infer(client: Any, x: np.ndarray) -> np.ndarray:
    import tritonclient.http as th

    i = th.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer("tiny-mlp", [i]).as_numpy("probs")


def served(cluster: dict[str, Any]) -> dict[int, int]:
    handle = cluster["serve"].get_deployment_handle("gpux-ingress", app_name="gpux")
    return handle.served.remote().result()


def test_two_replicas_answer_like_gpux_run_over_tritonclient(cluster: dict[str, Any]) -> None:
    import tritonclient.http as th

    client = th.InferenceServerClient(cluster["url"])
    assert client.is_server_ready() and client.is_model_ready("tiny-mlp")
    meta = client.get_model_metadata("tiny-mlp")
    assert meta["platform"] == "gpux_cpu" and meta["inputs"][0]["shape"] == [-1, 8]
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
    with gpux.load(cluster["root"], provider="cpu") as s:
        expected = s.run({"x": x})["probs"]
    pool = [threading.Thread(target=lambda: [infer(th.InferenceServerClient(cluster["url"]), x)
                                             for _ in range(15)]) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    np.testing.assert_allclose(infer(client, x), expected, rtol=1e-6)
    assert len([pid for pid, n in served(cluster).items() if n > 0]) == 2, "both replicas served traffic"


def test_a_killed_replica_loses_no_request_a_client_retries_once(cluster: dict[str, Any]) -> None:
    import tritonclient.http as th

    x = np.ones((2, 8), np.float32)
    with gpux.load(cluster["root"], provider="cpu") as s:
        expected = s.run({"x": x})["probs"]
    warm = th.InferenceServerClient(cluster["url"])
    for _ in range(10):
        infer(warm, x)
    before = served(cluster)
    victim = max(before, key=lambda pid: before[pid])
    answers: list[np.ndarray] = []
    failures: list[str] = []
    retried = [0]

    def client_loop() -> None:
        c = th.InferenceServerClient(cluster["url"], network_timeout=60)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                answers.append(infer(c, x))
            except Exception:
                retried[0] += 1
                try:
                    answers.append(infer(c, x))
                except Exception as exc:  # a request lost even after one retry
                    failures.append(repr(exc))

    threads = [threading.Thread(target=client_loop) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.5)
    os.kill(victim, signal.SIGKILL)
    for t in threads:
        t.join()
    assert failures == []
    assert len(answers) > 20
    for a in answers:
        np.testing.assert_allclose(a, expected, rtol=1e-6)
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)  # the replica's process is gone
    handle = cluster["serve"].get_deployment_handle("tiny-mlp", app_name="gpux")
    deadline, replaced = time.monotonic() + 90, set()
    while not replaced and time.monotonic() < deadline:  # Ray's health check notices and replaces it
        replaced = {handle.info.remote().result()["pid"] for _ in range(6)} - set(before)
        time.sleep(0.5)
    assert replaced and victim not in replaced, "Ray started a replacement replica"
