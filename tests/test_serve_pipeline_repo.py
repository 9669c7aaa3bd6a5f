"""A workspace's pipeline served as one model under the repository API: a load reads its gpux.workspace.yml again
and opens the pipeline as a start does (a broken file is a 400 naming its line and field, the old version serving
on), and an unload closes the sessions of each of its steps."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .serving import ServerThread, error_of, post

NAME = "detect-classify"


def live_sessions() -> list[Any]:
    """ONNX Runtime's sessions alive in this process."""
    import onnxruntime as ort

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, ort.InferenceSession)]


def infer(address: str) -> np.ndarray:
    image = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 32, 32], "data": image.ravel().tolist()}]}
    status, _, raw = post(address, f"/v2/models/{NAME}/infer", json.dumps(body))
    assert status == 200, raw
    (out,) = json.loads(raw)["outputs"]
    return np.asarray(out["data"]).reshape(out["shape"])


def index(address: str) -> list[dict[str, str]]:
    status, _, raw = post(address, "/v2/repository/index", "{}")
    assert status == 200, raw
    return list(json.loads(raw))


def test_a_pipeline_loads_from_its_workspace_and_unload_closes_its_sessions(ws: Path) -> None:
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from gpux.serve.command import ServeCommand, _open

    opening = _open(ServeCommand(targets=[str(ws)], provider="cpu"))
    assert list(opening.pipelines) == [NAME]
    workspace = ws / "gpux.workspace.yml"
    good = workspace.read_text()
    before = {id(s) for s in live_sessions()}
    with ServerThread([], provider="cpu", opening=opening._replace(projects=opening.projects[-1:])) as server:
        started = [weakref.ref(s) for s in live_sessions() if id(s) not in before]
        assert len(started) == 2  # the pipeline's: its detector's and its classifier's
        first = infer(server.http)

        workspace.write_text(good.replace(f"name: {NAME}\n", f"name: {NAME}\nversion: '2'\n"))
        status, _, raw = post(server.http, f"/v2/repository/models/{NAME}/load", "")
        assert status == 200, raw
        assert index(server.http) == [{"name": NAME, "version": "2", "state": "READY"}]  # the workspace read again
        np.testing.assert_allclose(infer(server.http), first, rtol=1e-6)

        workspace.write_text(good.replace("  - model: classifier\n", "  - model: clasifier\n"))
        status, _, raw = post(server.http, f"/v2/repository/models/{NAME}/load", "")
        said = error_of(raw)
        assert status == 400 and len(said.splitlines()) == 1, raw
        assert said.startswith(f"failed to load model '{NAME}': {workspace}:") and ":5 pipeline.1.model: no model " \
            "'clasifier' in models" in said, said
        assert index(server.http) == [{"name": NAME, "version": "2", "state": "READY"}]  # the old one serves on
        np.testing.assert_allclose(infer(server.http), first, rtol=1e-6)

        serving = [weakref.ref(s) for s in live_sessions() if id(s) not in before]
        assert len(serving) == 2 and all(r() is None for r in started)  # the first version's were released
        status, _, raw = post(server.http, f"/v2/repository/models/{NAME}/unload", "")
        assert status == 200, raw
        assert [r() for r in serving if r() is not None] == [], "the unloaded pipeline's sessions are still open"
        assert index(server.http) == [{"name": NAME, "version": "2", "state": "UNAVAILABLE", "reason": "unloaded"}]

        workspace.write_text(good)
        grpcclient.InferenceServerClient(server.grpc).load_model(NAME)  # gRPC's RepositoryModelLoad: the same
        assert index(server.http) == [{"name": NAME, "version": "1", "state": "READY"}]
        np.testing.assert_allclose(infer(server.http), first, rtol=1e-6)
        reloaded = [weakref.ref(s) for s in live_sessions() if id(s) not in before]
    gc.collect()
    assert len(reloaded) == 2 and [r() for r in reloaded if r() is not None] == [], \
        "a stopped server's sessions are still open"
