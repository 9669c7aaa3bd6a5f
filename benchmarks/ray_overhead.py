"""What `gpux deploy ray` adds over the smallest Ray Serve app that runs the same model, in one Ray session.

    python benchmarks/ray_overhead.py [--rounds 5] [--calls 300] [--out FILE.md]

Both applications run side by side on one local Ray Serve: the MLP example through `gpux.deploy.ray.app`
(route /) and a one-deployment app whose `__call__` reads the same Open Inference Protocol binary request,
runs an ONNX Runtime `InferenceSession` on the same model.onnx and answers in the same format (route
/v2/models/raw). One tritonclient HTTP client (binary tensors, batch 1, concurrency 1) alternates calls between
them, so both see the same machine load; p50 per round and over all rounds. Then the cost of the statistics
route, which asks every replica of the model (`GET /v2/models/stats`), beside the model metadata that one replica
answers alone (`GET /v2/models/mlp`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "examples" / "mlp"


def raw_app(model: str) -> Any:
    """A minimal Ray Serve app: one deployment, the OIP binary request parsed by hand, ONNX Runtime directly."""
    from ray import serve

    @serve.deployment(name="raw", ray_actor_options={"num_cpus": 1})
    class Raw:
        def __init__(self, path: str) -> None:
            import onnxruntime as ort

            self.session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import Response

            body = await request.body()
            split = int(request.headers["inference-header-content-length"])
            item = json.loads(body[:split])["inputs"][0]
            x = np.frombuffer(body[split:], np.float32).reshape(item["shape"])
            (y,) = self.session.run(None, {item["name"]: x})
            data = y.tobytes()
            head = json.dumps({"model_name": "raw", "outputs": [
                {"name": "probs", "datatype": "FP32", "shape": list(y.shape),
                 "parameters": {"binary_data_size": len(data)}}]}).encode()
            return Response(head + data, media_type="application/octet-stream",
                            headers={"inference-header-content-length": str(len(head))})

    deployment: Any = Raw
    return deployment.bind(model)


def timed_call(client: Any, name: str, x: np.ndarray) -> float:
    import tritonclient.http as th

    i = th.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    out = [th.InferRequestedOutput("probs", binary_data=True)]
    started = time.perf_counter()
    client.infer(name, [i], outputs=out).as_numpy("probs")
    return time.perf_counter() - started


def timed_get(address: str, path: str) -> float:
    import http.client

    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        started = time.perf_counter()
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200, (path, resp.status)
        return time.perf_counter() - started
    finally:
        conn.close()


def measure(rounds: int, calls: int) -> dict[str, list[list[float]]]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import tritonclient.http as th
    from ray import serve

    from gpux.deploy.ray import app

    if not (PROJECT / "model.onnx").is_file():
        subprocess.run([sys.executable, str(PROJECT / "make_model.py")], check=True, capture_output=True)
    port = 8000 + os.getpid() % 1000
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)  # logical CPUs: both apps get theirs
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app([str(PROJECT)], provider="cpu"), name="gpux", route_prefix="/", blocking=False)
        serve.run(raw_app(str(PROJECT / "model.onnx")), name="raw", route_prefix="/v2/models/raw", blocking=False)
        client = th.InferenceServerClient(f"127.0.0.1:{port}")
        x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
        times: dict[str, list[list[float]]] = {"mlp": [], "raw": []}
        for _ in range(50):  # warm both
            timed_call(client, "mlp", x), timed_call(client, "raw", x)
        for _ in range(rounds):
            got: dict[str, list[float]] = {"mlp": [], "raw": []}
            for _ in range(calls):
                for name in got:
                    got[name].append(timed_call(client, name, x))
            for name, t in got.items():
                times[name].append(t)
        address = f"127.0.0.1:{port}"
        routes = {"stats": "/v2/models/stats", "metadata": "/v2/models/mlp"}
        for name, path in routes.items():
            times[name] = [[timed_get(address, path) for _ in range(calls // 2)]]
        return times
    finally:
        serve.shutdown()
        ray.shutdown()


def render(times: dict[str, list[list[float]]], command: str) -> str:
    def p50(ts: list[float]) -> float:
        return statistics.median(ts) * 1e3

    gpux_all, raw_all = p50([t for r in times["mlp"] for t in r]), p50([t for r in times["raw"] for t in r])
    rounds = ", ".join(f"{p50(g):.2f}/{p50(r):.2f}" for g, r in zip(times["mlp"], times["raw"], strict=True))
    return "\n".join([
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; `{command}`", "",
        "| app (same Ray session, interleaved calls) | p50 ms (c=1) |", "|---|---|",
        f"| `gpux deploy ray` (examples/mlp) | {gpux_all:.3f} |",
        f"| minimal Ray Serve app, ONNX Runtime directly | {raw_all:.3f} |", "",
        f"gpux over the minimal app: **{gpux_all - raw_all:+.3f} ms** (p50 ratio **{gpux_all / raw_all:.2f}×**); "
        f"per round gpux/minimal p50 ms: {rounds}", "",
        f"`GET /v2/models/stats` (every replica asked) p50 **{p50(times['stats'][0]):.2f} ms** vs "
        f"`GET /v2/models/mlp` (one replica) {p50(times['metadata'][0]):.2f} ms", ""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300, help="calls per app per round")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = render(measure(args.rounds, args.calls), " ".join(["python benchmarks/ray_overhead.py", *sys.argv[1:]]))
    print(text, flush=True)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
