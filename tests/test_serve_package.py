"""`gpux package --serve`: the image's entry point is `gpux serve`, with the serve extra, ports and a healthcheck."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import gpux
from tests.docker_engine import CannotRunEngine, Engine, running_engine
from tests.test_package import HOST_CA

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def test_serve_image_context(mlp_project: Path, tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    r = gpux("package", str(mlp_project), "--provider", "cpu", "--serve", "--dockerfile-only", str(out), "--json",
             env=NO_ENGINE)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["run"] == "docker run --rm -p 127.0.0.1:8000:8000 -p 127.0.0.1:8001:8001 gpux/tiny-mlp:1.0.0-cpu"
    names = {req.split("=")[0].split(">")[0].split(";")[0] for req in doc["requirements"]}
    assert {"uvicorn", "grpcio", "protobuf", "prometheus-client", "onnxruntime"} <= names
    dockerfile = (out / "Dockerfile").read_text()
    assert "EXPOSE 8000 8001" in dockerfile
    assert 'ENTRYPOINT ["gpux", "serve", "/model", "--host", "0.0.0.0", "--port", "8000", "--grpc-port", "8001"]' \
        in dockerfile
    [health] = [line for line in dockerfile.splitlines() if line.startswith("HEALTHCHECK")]
    assert "http://127.0.0.1:8000/v2/health/ready" in health
    assert '"gpux", "run"' not in dockerfile


def test_serve_ports_come_from_the_serve_block_and_run_is_refused(mlp_project: Path, tmp_path: Path) -> None:
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "serve: {http_port: 9000, grpc_port: null}\n")
    out = tmp_path / "ctx"
    r = gpux("package", str(mlp_project), "--serve", "--dockerfile-only", str(out), env=NO_ENGINE)
    assert r.returncode == 0, r.stderr
    dockerfile = (out / "Dockerfile").read_text()
    assert "EXPOSE 9000\n" in dockerfile and '"--no-grpc"' in dockerfile
    r = gpux("package", str(mlp_project), "--serve", "--run", "--benchmark", env=NO_ENGINE)
    assert r.returncode == 2 and "keeps serving" in r.stderr


# -- a real engine: the image serves, reports healthy, answers tritonclient, and drains on `docker stop` ----------
@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    with contextlib.ExitStack() as stack:
        try:
            yield stack.enter_context(running_engine())
        except CannotRunEngine as exc:
            pytest.skip(f"this machine cannot run a Docker engine: {exc}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.docker
def test_serve_image_is_healthy_and_answers(engine: Engine, mlp_project: Path) -> None:
    http, grpc = free_port(), free_port()
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + f"serve: {{http_port: {http}, grpc_port: {grpc}}}\n")
    tag = "gpux-test/serve-mlp:cpu"
    r = gpux("package", str(mlp_project), "--provider", "cpu", "--serve", "--tag", tag, "--base-image",
             engine.base_image, "--ca-bundle", HOST_CA, env=engine.env, timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]
    client = engine.client()
    # host networking reaches only loopback here: the same entry point, bound to 127.0.0.1 instead of 0.0.0.0
    argv = ["gpux", "serve", "/model", "--host", "127.0.0.1", "--port", str(http), "--grpc-port", str(grpc)]
    container = client.containers.run(tag, entrypoint=argv, network_mode="host", detach=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            container.reload()
            if container.attrs["State"].get("Health", {}).get("Status") == "healthy":
                break
            time.sleep(1)
        assert container.attrs["State"]["Health"]["Status"] == "healthy", container.logs()[-3000:]
        import numpy as np
        import tritonclient.grpc as tg

        import gpux as api

        x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
        item = tg.InferInput("x", [2, 8], "FP32")
        item.set_data_from_numpy(x)
        got = tg.InferenceServerClient(f"127.0.0.1:{grpc}").infer("tiny-mlp", [item]).as_numpy("probs")
        with api.load(str(mlp_project), provider="cpu") as session:
            np.testing.assert_allclose(got, session.run({"x": x})["probs"], rtol=1e-6, atol=1e-7)
        container.stop(timeout=30)
        assert container.wait()["StatusCode"] == 0
        assert b"draining" in container.logs()
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        client.close()
