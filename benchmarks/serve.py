"""Serving benchmark: in-process Session.run vs `gpux serve` (REST binary, gRPC) vs Seldon MLServer, one run.

    python benchmarks/serve.py [--models mlp,resnet50] [--seconds 6] [--rounds 3] [--mlserver] [--out FILE.md]

Every server runs the same ONNX model on ONNX Runtime CPU and is driven by the same tritonclient clients from
this process: concurrency 1 with the blocking clients (latency), concurrency 16 with the asyncio clients
(throughput = answered requests / wall time of the window); every server is up at once and the cells are
measured in alternating rounds (medians over rounds), because the machine is shared and noisy. `gpux serve`
runs with and without dynamic
batching. `--mlserver` installs MLServer 1.7.1 into a throwaway venv of its own (never this one) and serves
the model through a minimal custom runtime (`MLSERVER_RUNTIME` below); MLServer's REST has no binary tensor
extension, so its REST rows use JSON (gpux's JSON row is given beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MLSERVER_VENV = Path(tempfile.gettempdir()) / "gpux-bench-mlserver"
# uvloop 0.22+ breaks MLServer 1.7.1's worker processes (no current event loop)
MLSERVER_PINS = ["mlserver==1.7.1", "onnxruntime==1.31.1", "numpy==2.4.6", "uvloop==0.21.0"]
MLSERVER_RUNTIME = '''
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        self.session = ort.InferenceSession(self.settings.parameters.uri, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        return True

    async def predict(self, payload):
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        outputs = self.session.run(None, feeds)
        return InferenceResponse(model_name=self.name, id=payload.id,
                                 outputs=[NumpyCodec.encode_output(n, a) for n, a in zip(self.names, outputs)])
'''
SHAPES = {"mlp": ("x", (1, 64)), "resnet50": ("input", (1, 3, 224, 224))}
OUTPUTS = {"mlp": "probs", "resnet50": "logits"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[Any], timeout: float = 300) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} never became ready")


class Served:
    """A server subprocess on free loopback ports; stopped (SIGTERM, then kill) on exit."""

    def __init__(self, argv: list[str], http: int, grpc: int, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.http, self.grpc = f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                                     env={**os.environ, **(env or {})})

    def __enter__(self) -> Served:
        wait_ready(f"http://{self.http}/v2/health/ready", self.proc)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def gpux_serve(project: Path, batching: bool, access_log: bool = False, provider: str = "cpu") -> Served:
    http, grpc = free_port(), free_port()
    argv = [sys.executable, "-m", "gpux", "serve", str(project), "--provider", provider,
            *([] if access_log else ["--no-access-log"]), "--port", str(http), "--grpc-port", str(grpc)]
    if batching:
        argv += ["--max-batch-size", "16", "--max-queue-delay-us", "200"]
    return Served(argv, http, grpc)


def mlserver(model: Path, name: str, workdir: Path) -> Served:
    if not (MLSERVER_VENV / "bin" / "mlserver").exists():
        subprocess.run([sys.executable, "-m", "venv", str(MLSERVER_VENV)], check=True)
        subprocess.run([str(MLSERVER_VENV / "bin" / "pip"), "install", "-q", *MLSERVER_PINS], check=True)
    http, grpc = free_port(), free_port()
    folder = workdir / "mlserver"
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / "runtime.py").write_text(MLSERVER_RUNTIME)
    (folder / "settings.json").write_text(json.dumps({"http_port": http, "grpc_port": grpc, "metrics_port":
                                                      free_port(), "host": "127.0.0.1"}))
    (folder / name / "model-settings.json").write_text(json.dumps(
        {"name": name, "implementation": "runtime.OnnxModel", "parameters": {"uri": str(model)}}))
    return Served([str(MLSERVER_VENV / "bin" / "mlserver"), "start", str(folder)], http, grpc,
                  env={"PYTHONPATH": str(folder)}, cwd=folder)


def window(seconds: float, calls: Callable[[], None]) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        calls()
        times.append(time.perf_counter() - t)
    return times


def threaded(concurrency: int, seconds: float, call: Callable[[], None]) -> float:
    counts = [0] * concurrency
    deadline = time.perf_counter() + seconds

    def loop(i: int) -> None:
        while time.perf_counter() < deadline:
            call()
            counts[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


async def closed_loop(concurrency: int, seconds: float, call: Callable[[], Awaitable[Any]]) -> float:
    count = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < deadline:
            await call()
            count += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - start)


def clients(kind: str, address: str, name: str, x: np.ndarray, output: str) -> tuple[Callable[[], None], Any]:
    """A blocking call and a factory of (async call, closer) for one protocol: rest-binary, rest-json, grpc."""
    import tritonclient.grpc as tg
    import tritonclient.grpc.aio as tga
    import tritonclient.http as th
    import tritonclient.http.aio as tha

    grpc = kind == "grpc"
    binary = kind == "rest-binary"
    sync_mod: Any = tg if grpc else th
    sync_client = sync_mod.InferenceServerClient(address)

    def inputs(mod: Any) -> list[Any]:
        item = mod.InferInput(SHAPES_NAME[name], list(x.shape), "FP32")
        if grpc:
            item.set_data_from_numpy(x)
        else:
            item.set_data_from_numpy(x, binary_data=binary)
        return [item]

    def outputs(mod: Any) -> list[Any]:
        return [mod.InferRequestedOutput(output) if grpc else mod.InferRequestedOutput(output, binary_data=binary)]

    sync_inputs, sync_outputs = inputs(sync_mod), outputs(sync_mod)
    # MLServer (FastAPI) reads JSON only with a Content-Type, and gzips answers unless told not to
    headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"} if kind == "rest-json" else None

    def call() -> None:
        sync_client.infer(name, sync_inputs, outputs=sync_outputs, headers=headers)

    def make_async() -> tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[None]]]:
        mod: Any = tga if grpc else tha
        client = mod.InferenceServerClient(address) if grpc else mod.InferenceServerClient(address, conn_limit=64)
        ins, outs = inputs(tg if grpc else th), outputs(tg if grpc else th)
        return (lambda: client.infer(name, ins, outputs=outs, headers=headers)), client.close

    return call, make_async


SHAPES_NAME = {k: v[0] for k, v in SHAPES.items()}


Cell = Callable[[float], dict[str, Any]]  # one measured window of `seconds`: c=1 latencies, c=16 throughput


def served_cell(kind: str, address: str, name: str) -> Cell:
    x = np.random.default_rng(0).standard_normal(SHAPES[name][1]).astype(np.float32)
    call, make_async = clients(kind, address, name, x, OUTPUTS[name])

    async def run16(seconds: float) -> float:
        acall, close = make_async()
        await closed_loop(16, min(0.3, seconds / 4), acall)  # connections opened, pools warm
        rate = await closed_loop(16, seconds, acall)
        await close()
        return rate

    def cell(seconds: float) -> dict[str, Any]:
        window(0.1, call)
        return {"times": window(seconds / 2, call), "rps16": asyncio.run(run16(seconds / 2))}

    return cell


def floor_cell(kind: str, address: str) -> Cell:
    """The empty round trip of the transport: ServerLive (gRPC) or GET /v2/health/live (REST)."""
    import tritonclient.grpc as tg
    import tritonclient.http as th

    client: Any = tg.InferenceServerClient(address) if kind == "grpc" else th.InferenceServerClient(address)

    def cell(seconds: float) -> dict[str, Any]:
        return {"times": window(seconds / 2, client.is_server_live), "rps16": None}

    return cell


def in_process_cell(session: Any, name: str) -> Cell:
    feeds = {SHAPES_NAME[name]: np.random.default_rng(0).standard_normal(SHAPES[name][1]).astype(np.float32)}

    def cell(seconds: float) -> dict[str, Any]:
        return {"times": window(seconds / 2, lambda: session.run(feeds)),
                "rps16": threaded(16, seconds / 2, lambda: session.run(feeds))}

    return cell


def bench_model(name: str, seconds: float, rounds: int, with_mlserver: bool,
                workdir: Path) -> list[tuple[str, dict[str, Any]]]:
    """Every server up at once; cells measured in alternating rounds; medians over rounds."""
    import contextlib

    import gpux

    project = ROOT / "examples" / name
    subprocess.run([sys.executable, str(project / "make_model.py")], check=True, capture_output=True)
    subprocess.run([sys.executable, "-m", "gpux", "build", str(project), "--provider", "cpu"], check=True,
                   capture_output=True)
    with contextlib.ExitStack() as stack:
        session = stack.enter_context(gpux.load(str(project), provider="cpu"))
        cells: list[tuple[str, Cell]] = [("in-process Session.run", in_process_cell(session, name))]
        plain = stack.enter_context(gpux_serve(project, False))
        batched = stack.enter_context(gpux_serve(project, True))
        cells += [(f"gpux serve {k}", served_cell(k, plain.grpc if k == "grpc" else plain.http, name))
                  for k in ("rest-binary", "grpc", "rest-json")]
        cells += [(f"gpux serve (batching 16, 200 us) {k}",
                   served_cell(k, batched.grpc if k == "grpc" else batched.http, name))
                  for k in ("rest-binary", "grpc")]
        if with_mlserver:
            ml = stack.enter_context(mlserver(project / "model.onnx", name, workdir))
            cells += [(f"MLServer 1.7.1 {k}", served_cell(k, ml.grpc if k == "grpc" else ml.http, name))
                      for k in ("rest-json", "grpc")]
        cells += [("empty round trip: gpux REST GET /v2/health/live", floor_cell("rest", plain.http)),
                  ("empty round trip: gpux gRPC ServerLive", floor_cell("grpc", plain.grpc))]
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in cells}
        for _ in range(rounds):
            for label, cell in cells:
                runs[label].append(cell(seconds / rounds))
    return [(label, summarize(r)) for label, r in runs.items()]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [t for r in runs for t in r["times"]]
    rates = [r["rps16"] for r in runs if r["rps16"] is not None]
    return {"p50_ms": statistics.median(times) * 1e3, "p99_ms": float(np.percentile(times, 99)) * 1e3,
            "rps1": len(times) / sum(times), "rps16": statistics.median(rates) if rates else None,
            "p50_rounds_ms": [round(statistics.median(r["times"]) * 1e3, 3) for r in runs]}


def render(name: str, rows: list[tuple[str, dict[str, float]]]) -> str:
    base = rows[0][1]["p50_ms"]
    lines = [f"### {name} (ONNX Runtime CPU, batch 1)", "",
             "| path | p50 ms (c=1) | overhead vs in-process ms | p99 ms (c=1) | req/s c=1 | req/s c=16 |",
             "|---|---|---|---|---|---|"]
    for label, r in rows:
        over = "–" if label.startswith("in-process") else f"{r['p50_ms'] - base:+.3f}"
        rps16 = "–" if r["rps16"] is None else f"{r['rps16']:.0f}"
        lines.append(f"| {label} | {r['p50_ms']:.3f} | {over} | {r['p99_ms']:.3f} | {r['rps1']:.0f} | {rps16} |")
    ml = {k: v for k, v in rows if k.startswith("MLServer")}
    if ml:
        for ours, theirs in (("gpux serve grpc", "MLServer 1.7.1 grpc"),
                             ("gpux serve (batching 16, 200 us) grpc", "MLServer 1.7.1 grpc"),
                             ("gpux serve rest-binary", "MLServer 1.7.1 rest-json"),
                             ("gpux serve rest-json", "MLServer 1.7.1 rest-json")):
            mine = dict(rows)[ours]["rps16"]
            lines.append(f"\n{ours} / {theirs} throughput at c=16: **{mine / ml[theirs]['rps16']:.2f}x**")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp", help="comma list of mlp, resnet50")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per cell, over all rounds")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds over every cell")
    parser.add_argument("--mlserver", action="store_true", help="also MLServer 1.7.1 (own throwaway venv)")
    parser.add_argument("--out", default=None, help="also write the tables to this file")
    args = parser.parse_args()
    text = f"`python benchmarks/serve.py --models {args.models} --seconds {args.seconds:g} --rounds {args.rounds}" + \
        (" --mlserver`" if args.mlserver else "`") + f", {os.cpu_count()} cores\n\n"
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            table = render(name, bench_model(name, args.seconds, args.rounds, args.mlserver, Path(tmp)))
            print(table, flush=True)
            text += table + "\n"
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
