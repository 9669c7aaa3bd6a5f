"""Ray Serve for real: a local single-node cluster (dashboard and usage stats off, 2 CPUs), the MLP with two
replicas and a batching two-input model, each an application whose replicas answer the Open Inference Protocol
themselves, driven by tritonclient's HTTP client."""

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

from .conftest import MLP_YML, make_mlp, make_two_inputs

pytestmark = pytest.mark.slow

RAY_BLOCK = "deploy:\n  ray: {num_replicas: 2, max_ongoing_requests: 16, ray_actor_options: {num_cpus: 0.5}}\n"
TWO_YML = """\
name: two
version: 1.0.0
model: {source: model.onnx}
inputs:
  ids: {dtype: int64, shape: [batch, seq]}
  scale: {dtype: float32, shape: [batch, 1]}
outputs:
  out: {dtype: float32, shape: [batch, 4]}
runtime: {backend: cpu}
serve: {max_batch_size: 8, max_queue_delay_us: 100000}
deploy:
  ray: {num_replicas: 1, ray_actor_options: {num_cpus: 0.5}}
"""


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


def test_a_proxy_the_controller_killed_while_starting_is_waited_for_again(capsys: pytest.CaptureFixture[str]) -> None:
    """Serve's controller kills an HTTP proxy not ready within its first wait (a busy machine) and starts another,
    waiting longer; serve.start gives up on a proxy not up in 60 s: the start is tried again (Ray's own
    ActorDiedError and serve.start's TimeoutError, raised as serve.start raises them), up to STARTS times; then
    Ray's error goes on (launch says it in one line)."""
    import types

    import ray

    from gpux.deploy.ray_launch import STARTS, RayLaunch, start

    tries: list[dict[str, Any]] = []

    def flaky(http_options: dict[str, Any]) -> None:
        tries.append(http_options)
        if len(tries) == 1:  # serve.start's own 60 s wait for the proxy ran out (its message, its class)
            raise TimeoutError("HTTP proxies not available after 60s.")
        if len(tries) < STARTS:
            raise ray.exceptions.ActorDiedError()

    def dead(http_options: dict[str, Any]) -> None:
        tries.append(http_options)
        raise ray.exceptions.ActorDiedError()

    proxies = iter([{}, {"node": "STARTING"}, {"node": "HEALTHY"}])  # none listed yet: still starting
    asked: list[dict[str, str]] = []

    def status() -> types.SimpleNamespace:
        asked.append(next(proxies))
        return types.SimpleNamespace(proxies=asked[-1])

    start(ray, types.SimpleNamespace(start=flaky, status=status), RayLaunch(targets=[], port=8123))
    assert tries == [{"host": "127.0.0.1", "port": 8123}] * STARTS
    assert asked == [{}, {"node": "STARTING"}, {"node": "HEALTHY"}], "after a retry, until the new proxy is healthy"
    assert "not ready in time (try 1 of 3)" in capsys.readouterr().err
    tries.clear()
    with pytest.raises(ray.exceptions.ActorDiedError):
        start(ray, types.SimpleNamespace(start=dead), RayLaunch(targets=[]))
    assert len(tries) == STARTS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray import serve

    from gpux.deploy.ray import apps
    from gpux.deploy.ray_launch import RayLaunch, start

    root = project(tmp_path_factory.mktemp("ray-mlp"))
    two = tmp_path_factory.mktemp("ray-two")
    make_two_inputs(two / "model.onnx")
    (two / "gpux.yml").write_text(TWO_YML)
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        start(ray, serve, RayLaunch(targets=[], port=port))  # as gpux deploy ray starts Serve (a busy machine: again)
        for a in apps([str(root), str(two)], provider="cpu"):
            serve.run(a.application, name=a.name, route_prefix=a.route_prefix, blocking=False)
        yield {"root": root, "two": two, "url": f"127.0.0.1:{port}", "serve": serve}
    finally:
        serve.shutdown()
        ray.shutdown()
    assert not ray.is_initialized()


def infer(client: Any, x: np.ndarray) -> np.ndarray:
    import tritonclient.http as th

    i = th.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return client.infer("tiny-mlp", [i]).as_numpy("probs")


def served(cluster: dict[str, Any], replicas: int = 2) -> dict[int, int]:
    """Infer requests answered per replica process of tiny-mlp (Ray's handle picks a replica per call)."""
    handle = cluster["serve"].get_deployment_handle("tiny-mlp", app_name="gpux")
    seen: dict[int, int] = {}
    for _ in range(60):
        info = handle.info.remote().result()
        seen[info["pid"]] = info["served"]
        if len(seen) == replicas:
            break
    return seen


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


def running_replicas(cluster: dict[str, Any]) -> int:
    app = cluster["serve"].status().applications.get("gpux")
    return app.deployments["tiny-mlp"].replica_states.get("RUNNING", 0) if app is not None else 0


def test_a_killed_replica_loses_no_request_a_client_retries_once(cluster: dict[str, Any]) -> None:
    """Four clients under load, each request retried at most once on a connection error or a 5xx; one replica's
    process killed (its pid from the replica itself); Ray's controller starts a replacement, no redeploy."""
    import tritonclient.http as th
    from tritonclient.utils import InferenceServerException

    x = np.ones((2, 8), np.float32)
    with gpux.load(cluster["root"], provider="cpu") as s:
        expected = s.run({"x": x})["probs"]
    warm = th.InferenceServerClient(cluster["url"])
    for _ in range(10):
        infer(warm, x)
    before = served(cluster)
    assert len(before) == 2 and running_replicas(cluster) == 2
    victim = max(before, key=lambda pid: before[pid])
    answers: list[np.ndarray] = []
    failures: list[str] = []
    retried: list[str] = []

    def retryable(exc: Exception) -> bool:  # a connection error or a 5xx; a 4xx is the client's own mistake
        if isinstance(exc, InferenceServerException):
            return exc.status() is None or str(exc.status()).startswith("5")
        return isinstance(exc, OSError | ConnectionError)

    def client_loop() -> None:
        c = th.InferenceServerClient(cluster["url"], network_timeout=60)
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                answers.append(infer(c, x))
                continue
            except Exception as exc:
                if not retryable(exc):
                    failures.append(f"not retryable: {exc!r}")
                    continue
                retried.append(repr(exc))
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
    assert failures == [], (failures, retried)
    assert len(answers) > 20
    for a in answers:
        np.testing.assert_allclose(a, expected, rtol=1e-6)
    with pytest.raises(ProcessLookupError):
        os.kill(victim, 0)  # the replica's process is gone
    deadline = time.monotonic() + 240  # a hang guard: the replacement is a new process that opens the model (34 s
    while running_replicas(cluster) < 2 and time.monotonic() < deadline:  # on 2 busy cores); the controller replaces it
        time.sleep(0.5)
    assert running_replicas(cluster) == 2, cluster["serve"].status().applications["gpux"]
    after = served(cluster)
    while len(after) < 2 and time.monotonic() < deadline:  # this process's router learns of the new one late
        after = served(cluster)
    assert victim not in after and len(after) == 2, "a new replica process took the dead one's place"
    assert th.InferenceServerClient(cluster["url"]).is_model_ready("tiny-mlp")


def test_the_replica_that_gets_the_http_request_runs_the_model(cluster: dict[str, Any]) -> None:
    import tritonclient.http as th

    status = cluster["serve"].status().applications
    deployments = {name: sorted(a.deployments) for name, a in status.items()}
    assert deployments == {"gpux": ["tiny-mlp"], "gpux-two": ["two"]}, "one deployment per model, no ingress hop"
    before = sum(served(cluster).values())
    client = th.InferenceServerClient(cluster["url"])
    for _ in range(6):
        infer(client, np.ones((1, 8), np.float32))
    assert sum(served(cluster).values()) == before + 6, "the model's replicas answered the HTTP requests"
    assert client.get_model_metadata("two")["inputs"][0]["shape"] == [-1, -1], "routed to the second model's app"


def two_request(url: str, ids: np.ndarray, scale: np.ndarray) -> tuple[int, Any]:
    import json
    import urllib.error
    import urllib.request

    body = {"inputs": [{"name": "ids", "datatype": "INT64", "shape": list(ids.shape), "data": ids.ravel().tolist()},
                       {"name": "scale", "datatype": "FP32", "shape": list(scale.shape),
                        "data": scale.ravel().tolist()}]}
    req = urllib.request.Request(f"http://{url}/v2/models/two/infer", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            doc = json.loads(r.read())
            return r.status, np.array(doc["outputs"][0]["data"], np.float32).reshape(doc["outputs"][0]["shape"])
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["error"]


def test_mismatched_shapes_in_a_batch_are_split_or_refused_with_400(cluster: dict[str, Any]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(0)
    good = [(rng.integers(0, 10, (1, seq)), np.full((1, 1), 0.5, np.float32)) for seq in (3, 5, 3, 7, 5, 3)]
    bad = (np.zeros((2, 3), np.int64), np.ones((3, 1), np.float32))  # rows disagree across the inputs
    with gpux.load(cluster["two"], provider="cpu") as s:
        expected = [s.run({"ids": ids, "scale": scale})["out"] for ids, scale in good]
    with ThreadPoolExecutor(len(good) + 1) as pool:  # all within one 100 ms batch window
        answers = list(pool.map(lambda r: two_request(cluster["url"], *r), [*good, bad]))
    for (status, out), want in zip(answers, expected, strict=False):
        assert status == 200, out
        np.testing.assert_allclose(out, want, rtol=1e-6)
    status, error = answers[-1]
    assert status == 400 and "disagree on the batch" in error, error


def test_repository_statistics_and_unknown_models_span_every_replica(cluster: dict[str, Any]) -> None:
    """Whichever replica answers: the index lists both models, statistics sum every replica of a model, an unknown
    model's 404 names every served one, and load/unload say what to do under Ray (a 400, not a 404)."""
    import json

    from tests.serving import error_of, post

    url = cluster["url"]
    for _ in range(60):  # the killed replica's replacement (an earlier test) must be up to count everything
        if running_replicas(cluster) == 2:
            break
        time.sleep(0.5)
    status, _, body = post(url, "/v2/repository/index", "")
    assert status == 200 and json.loads(body) == [{"name": "tiny-mlp", "version": "1.0.0", "state": "READY"},
                                                  {"name": "two", "version": "1.0.0", "state": "READY"}]

    def stats(path: str = "/v2/models/stats") -> dict[str, Any]:
        code, _, raw = post(url, path, "", method="GET")
        assert code == 200, raw
        return {e["name"]: e for e in json.loads(raw)["model_stats"]}

    base = stats()
    client_count = 12
    for _ in range(client_count):
        infer(th_client(url), np.ones((1, 8), np.float32))
    per_replica = served(cluster)
    assert len([n for n in per_replica.values() if n]) == 2, "both replicas took part"
    for _ in range(4):  # the same totals whichever replica answers
        now = stats()
        mlp = now["tiny-mlp"]["inference_stats"]
        assert mlp["success"]["count"] - base["tiny-mlp"]["inference_stats"]["success"]["count"] == client_count
        assert mlp["queue"]["count"] >= mlp["success"]["count"] > 0 and mlp["compute_infer"]["ns"] > 0
        assert now["tiny-mlp"]["inference_count"] >= client_count and set(now) == {"tiny-mlp", "two"}
    assert stats("/v2/models/tiny-mlp/stats")["tiny-mlp"]["inference_stats"]["success"] == mlp["success"]
    assert set(stats("/v2/models/two/versions/1.0.0/stats")) == {"two"}
    status, _, body = post(url, "/v2/models/tiny-mlp/versions/9/stats", "", method="GET")
    assert status == 404 and "Request for unknown model: 'tiny-mlp' version 9 is not found" in error_of(body)

    x = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.0] * 8}]})
    status, _, body = post(url, "/v2/models/nope/infer", x)
    assert status == 404 and error_of(body) == ("Request for unknown model: 'nope' is not found; served models: "
                                                "tiny-mlp, two")
    status, _, body = post(url, "/v2/repository/models/two/unload", "")
    assert status == 400 and "not supported under Ray Serve" in error_of(body) and "gpux deploy ray" in error_of(body)
    status, _, body = post(url, "/v2/repository/models/nope/load", "")
    assert status == 404 and "unknown model: 'nope' is not found" in error_of(body)
    assert th_client(url).is_model_ready("two"), "nothing was unloaded"


def th_client(url: str) -> Any:
    import tritonclient.http as th

    return th.InferenceServerClient(url)


def test_bad_requests_are_refused_as_gpux_serve_refuses_them(cluster: dict[str, Any]) -> None:
    """Shapes, datatypes and batch dims are checked by gpux serve's own code in each replica: the same request gets
    the same status and message from the Ray application as from `gpux serve` on the same projects."""
    import json

    from tests.serving import ServerThread, post

    def body(name: str, datatype: str, shape: list[int]) -> str:
        return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": shape,
                                       "data": [1] * int(np.prod(shape))}]})

    two = json.dumps({"inputs": [{"name": "ids", "datatype": "INT64", "shape": [2, 3], "data": [0] * 6},
                                 {"name": "scale", "datatype": "FP32", "shape": [3, 1], "data": [1.0] * 3}]})
    bad = [("/v2/models/tiny-mlp/infer", body("x", "FP32", [1, 7])),  # a static dim wrong
           ("/v2/models/tiny-mlp/infer", body("x", "FP32", [8])),  # the rank wrong
           ("/v2/models/tiny-mlp/infer", body("x", "INT64", [1, 8])),  # the datatype wrong
           ("/v2/models/tiny-mlp/infer", body("y", "FP32", [1, 8])),  # no such input
           ("/v2/models/two/infer", two)]  # inputs disagree on the batch dim
    with ServerThread([cluster["root"], cluster["two"]], provider="cpu") as server:
        expected = [post(server.http, path, b)[::2] for path, b in bad]
    got = [post(cluster["url"], path, b)[::2] for path, b in bad]
    assert [s for s, _ in got] == [400] * len(bad)
    assert got == expected
