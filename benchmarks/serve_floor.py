"""`gpux serve` against the floor: bare servers of the same protocols with no features, on the same model.

    python benchmarks/serve_floor.py [--rounds 5] [--seconds 2]

All at once on 127.0.0.1: `gpux serve examples/mlp -p cpu` (with --no-access-log, started once before to keep its
record, so it serves without reading gpux.yml; a second one with its access log on, as by default, writing to
/dev/null); a bare REST floor (uvicorn + a plain ASGI callable
that parses the KServe v2 body with json, binary tensor extension included, and calls an ONNX Runtime
InferenceSession inline); a bare gRPC floor (grpc.aio serving only ModelInfer from gpux's own generated stubs,
ORT inline); and a raw ORT process (one session, a few runs, then idle) for the memory floor. Every cell is
driven by the same tritonclient clients from this process (serve.py's helpers): concurrency 1 with the blocking
clients (p50/p99 over all rounds), concurrency 16 with the asyncio clients (median req/s over rounds), cells
interleaved round by round; the JSON rows also with a plain keep-alive `http.client` client (inputs only, every
output back as JSON; sixteen threads at c=16). RSS is read after the load (process and its children: psutil, else
/proc VmRSS).
A gRPC server that answers every request with its first answer (nothing decoded or run) shows what the protocol
itself costs with this client. The same file runs the floors: `serve_floor.py --floor rest|grpc|grpc-echo|ort MODEL
[PORT]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import Served, free_port, gpux_serve, served_cell, summarize, threaded, window

ROOT = Path(__file__).resolve().parents[1]
DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32}
NAMES = {np.dtype(v).str: k for k, v in DTYPES.items()}
PROTOCOLS = ("REST binary", "REST JSON", "REST JSON, http.client", "gRPC")


def session(model: str) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # as examples/mlp's cpu provider
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def rest_floor(model: str, port: int) -> None:
    """uvicorn + one ASGI callable: health, and POST /v2/models/<name>/infer in JSON or the binary extension."""
    import uvicorn

    sess = session(model)

    async def body(receive: Any) -> bytes:
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                return b"".join(chunks)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        status, headers, out = 200, [(b"content-type", b"application/json")], b""
        if scope["method"] == "POST" and scope["path"].endswith("/infer"):
            raw = await body(receive)
            hlen = dict(scope["headers"]).get(b"inference-header-content-length")
            request = json.loads(raw[:int(hlen)] if hlen else raw)
            offset = int(hlen) if hlen else 0
            feeds = {}
            for i in request["inputs"]:
                size = (i.get("parameters") or {}).get("binary_data_size")
                if size is None:
                    arr = np.asarray(i["data"], dtype=DTYPES[i["datatype"]])
                else:
                    arr = np.frombuffer(raw, DTYPES[i["datatype"]], size // 4 if i["datatype"] in ("FP32", "INT32")
                                        else size // 8, offset)
                    offset += size
                feeds[i["name"]] = arr.reshape(i["shape"])
            wanted = {o["name"]: (o.get("parameters") or {}).get("binary_data", False)
                      for o in request.get("outputs", [])}
            names = list(wanted) or [o.name for o in sess.get_outputs()]
            results = sess.run(names, feeds)
            outputs, blobs = [], []
            for name, arr in zip(names, results, strict=True):
                o: dict[str, Any] = {"name": name, "datatype": NAMES[arr.dtype.str], "shape": list(arr.shape)}
                if wanted.get(name):
                    blob = arr.tobytes()
                    o["parameters"] = {"binary_data_size": len(blob)}
                    blobs.append(blob)
                else:
                    o["data"] = arr.ravel().tolist()
                outputs.append(o)
            head = json.dumps({"model_name": scope["path"].split("/")[3], "outputs": outputs}).encode()
            out = head + b"".join(blobs)
            if blobs:
                headers = [(b"content-type", b"application/octet-stream"),
                           (b"inference-header-content-length", str(len(head)).encode())]
        elif not scope["path"].startswith("/v2/health"):
            status = 404
        headers.append((b"content-length", str(len(out)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": out})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off")


def grpc_floor(model: str, port: int, echo: bool = False) -> None:
    """grpc.aio serving ModelInfer only (raw tensor contents), from gpux's own generated stubs. `echo`: the first
    answer again for every request, nothing decoded or run (what the protocol itself costs with this client)."""
    import grpc

    from gpux.serve.proto import inference_pb2 as pb
    from gpux.serve.proto import inference_pb2_grpc as pbg

    sess = session(model)
    answered: list[Any] = []

    class Service(pbg.GRPCInferenceServiceServicer):
        async def ModelInfer(self, request: Any, context: Any) -> Any:
            if not echo:
                return self.infer(request)
            if not answered:
                answered.append(self.infer(request))
            return answered[0]

        def infer(self, request: Any) -> Any:
            feeds = {i.name: np.frombuffer(raw, DTYPES[i.datatype]).reshape(list(i.shape))
                     for i, raw in zip(request.inputs, request.raw_input_contents, strict=True)}
            names = [o.name for o in request.outputs] or [o.name for o in sess.get_outputs()]
            results = sess.run(names, feeds)
            reply = pb.ModelInferResponse(model_name=request.model_name, id=request.id)
            for name, arr in zip(names, results, strict=True):
                reply.outputs.add(name=name, datatype=NAMES[arr.dtype.str], shape=list(arr.shape))
                reply.raw_output_contents.append(arr.tobytes())
            return reply

    async def main() -> None:
        server = grpc.aio.server()
        pbg.add_GRPCInferenceServiceServicer_to_server(Service(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def ort_floor(model: str) -> None:
    """The memory floor: one session, a few runs, then idle until terminated."""
    sess = session(model)
    i = sess.get_inputs()[0]
    x = np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
    for _ in range(100):
        sess.run(None, {i.name: x})
    print("ready", flush=True)
    time.sleep(3600)


def plain_cell(address: str) -> Any:
    """A plain keep-alive JSON client (http.client, no tritonclient; what a hand-written client sends: the inputs only,
    every output back as JSON): c=1 on one connection, c=16 on sixteen threads with a connection each."""
    import http.client
    import threading

    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 64], "datatype": "FP32", "data": x.ravel().tolist()}]})
    host, port = address.split(":")
    local = threading.local()

    def call() -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v2/models/mlp/infer", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        assert reply.status == 200, reply.status

    def cell(seconds: float) -> dict[str, Any]:
        local.conn = None  # a new connection per window (an idle one is closed between rounds)
        window(0.1, call)
        return {"times": window(seconds / 2, call), "rps16": threaded(16, seconds / 2, call)}

    return cell


def rss_mb(pid: int) -> float:
    """Resident set of a process and its children, MB."""
    try:
        import psutil
    except ImportError:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")
    p = psutil.Process(pid)
    return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20


def wait_port(port: int, proc: subprocess.Popen[Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"floor exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} never opened")


def floors(model: Path) -> tuple[Served, list[subprocess.Popen[Any]], int, int, subprocess.Popen[Any]]:
    me = [sys.executable, __file__, "--floor"]
    rest, grpc, echo = free_port(), free_port(), free_port()
    rest_srv = Served([*me, "rest", str(model), str(rest)], rest, free_port())
    grpc_proc = subprocess.Popen([*me, "grpc", str(model), str(grpc)], stderr=subprocess.DEVNULL)
    echo_proc = subprocess.Popen([*me, "grpc-echo", str(model), str(echo)], stderr=subprocess.DEVNULL)
    ort_proc = subprocess.Popen([*me, "ort", str(model)], stdout=subprocess.PIPE, text=True)
    wait_port(grpc, grpc_proc)
    wait_port(echo, echo_proc)
    assert ort_proc.stdout is not None and ort_proc.stdout.readline().strip() == "ready"
    return rest_srv, [grpc_proc, echo_proc], grpc, echo, ort_proc


def bench(rounds: int, seconds: float) -> str:
    project = ROOT / "examples" / "mlp"
    model = project / "model.onnx"
    subprocess.run([sys.executable, str(project / "make_model.py")], check=True, capture_output=True)
    for provider in ("cpu", "openvino"):
        subprocess.run([sys.executable, "-m", "gpux", "build", str(project), "--provider", provider], check=True,
                       capture_output=True)
    rest_srv, grpc_procs, grpc_port, echo_port, ort_proc = floors(model)
    try:
        shutil.rmtree(project / ".gpux" / ".serve", ignore_errors=True)  # no record left by an earlier run
        with gpux_serve(project, False) as first:  # reads gpux.yml and keeps the record the next start serves from
            served_cell("rest-binary", first.http, "mlp")(1.0)
            served_cell("grpc", first.grpc, "mlp")(1.0)
            first_rss = rss_mb(first.proc.pid)
        openvino = {}  # the same model compiled by OpenVINO: a first start, then one served from its record
        for label in ("gpux serve --provider openvino, first start", "gpux serve --provider openvino"):
            with gpux_serve(project, False, provider="openvino") as ov:
                served_cell("rest-binary", ov.http, "mlp")(1.0)
                openvino[label] = rss_mb(ov.proc.pid)
        with gpux_serve(project, False) as gx, gpux_serve(project, False, access_log=True) as logged, rest_srv as fl:
            cells = [("gpux REST binary", served_cell("rest-binary", gx.http, "mlp")),
                     ("gpux REST binary, access log on", served_cell("rest-binary", logged.http, "mlp")),
                     ("floor REST binary", served_cell("rest-binary", fl.http, "mlp")),
                     ("gpux REST JSON", served_cell("rest-json", gx.http, "mlp")),
                     ("floor REST JSON", served_cell("rest-json", fl.http, "mlp")),
                     ("gpux REST JSON, http.client", plain_cell(gx.http)),
                     ("floor REST JSON, http.client", plain_cell(fl.http)),
                     ("gpux gRPC", served_cell("grpc", gx.grpc, "mlp")),
                     ("floor gRPC", served_cell("grpc", f"127.0.0.1:{grpc_port}", "mlp")),
                     ("gRPC echo", served_cell("grpc", f"127.0.0.1:{echo_port}", "mlp"))]
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in cells}
            for _ in range(rounds):
                for label, cell in cells:
                    runs[label].append(cell(seconds))
            rss = {"gpux serve": rss_mb(gx.proc.pid), "gpux serve, first start (reads gpux.yml)": first_rss,
                   **openvino, "REST floor": rss_mb(fl.proc.pid),
                   "gRPC floor": rss_mb(grpc_procs[0].pid), "raw ORT process": rss_mb(ort_proc.pid)}
    finally:
        for p in (*grpc_procs, ort_proc):
            p.terminate()
            p.wait(30)
    return render({label: summarize(r) for label, r in runs.items()}, rss)


def render(s: dict[str, dict[str, Any]], rss: dict[str, float]) -> str:
    lines = ["| protocol | p50 µs gpux / floor (Δ) | p99 µs gpux / floor (Δ) | req/s c=16 gpux / floor (ratio) |",
             "|---|---|---|---|"]
    for proto in PROTOCOLS:
        g, f = s[f"gpux {proto}"], s[f"floor {proto}"]
        p50 = f"{g['p50_ms'] * 1e3:.0f} / {f['p50_ms'] * 1e3:.0f} ({(g['p50_ms'] - f['p50_ms']) * 1e3:+.0f})"
        p99 = f"{g['p99_ms'] * 1e3:.0f} / {f['p99_ms'] * 1e3:.0f} ({(g['p99_ms'] - f['p99_ms']) * 1e3:+.0f})"
        lines.append(f"| {proto} | {p50} | {p99} | {g['rps16']:.0f} / {f['rps16']:.0f} "
                     f"({g['rps16'] / f['rps16']:.2f}×) |")
    on, fb = s["gpux REST binary, access log on"], s["floor REST binary"]
    lines.append(f"| REST binary, gpux with its access log on (the default) | {on['p50_ms'] * 1e3:.0f} / "
                 f"{fb['p50_ms'] * 1e3:.0f} ({(on['p50_ms'] - fb['p50_ms']) * 1e3:+.0f}) | | {on['rps16']:.0f} / "
                 f"{fb['rps16']:.0f} ({on['rps16'] / fb['rps16']:.2f}×) |")
    lines += ["", "| process | RSS MB | vs raw ORT process |", "|---|---|---|"]
    lines += [f"| {k} | {v:.1f} | {v - rss['raw ORT process']:+.1f} |" for k, v in rss.items()]
    d = {p: (s[f"gpux {p}"]["p50_ms"] - s[f"floor {p}"]["p50_ms"]) * 1e3 for p in PROTOCOLS}
    checks = [(f"c=1 p50 within 60 µs of the floor, {p} ({d[p]:+.0f} µs)", d[p] <= 60) for p in d]
    checks.append(("c=1 gRPC no slower than REST binary (gpux p50 "
                   f"{s['gpux gRPC']['p50_ms'] * 1e3:.0f} vs {s['gpux REST binary']['p50_ms'] * 1e3:.0f} µs; floors "
                   f"{s['floor gRPC']['p50_ms'] * 1e3:.0f} vs {s['floor REST binary']['p50_ms'] * 1e3:.0f} µs; a gRPC "
                   f"server answering without decoding or running anything: {s['gRPC echo']['p50_ms'] * 1e3:.0f} µs)",
                   s["gpux gRPC"]["p50_ms"] <= s["gpux REST binary"]["p50_ms"]))
    checks += [(f"c=16 throughput ≥ 0.9× the floor, {p} ({s[f'gpux {p}']['rps16'] / s[f'floor {p}']['rps16']:.2f}×)",
                s[f"gpux {p}"]["rps16"] >= 0.9 * s[f"floor {p}"]["rps16"]) for p in PROTOCOLS]
    for label in ("gpux serve", "gpux serve, first start (reads gpux.yml)"):
        checks.append((f"RSS ≤ raw ORT process + 30 MB, {label} ({rss[label] - rss['raw ORT process']:+.1f} MB)",
                       rss[label] <= rss["raw ORT process"] + 30))
    lines += ["", "p50 ms per round: " + "; ".join(f"{k} {v['p50_rounds_ms']}" for k, v in s.items())]
    lines += ["", *[f"- {'met' if ok else 'NOT met'}: {text}" for text, ok in checks]]
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--floor":
        kind, model, *port = sys.argv[2:]
        {"rest": lambda: rest_floor(model, int(port[0])), "grpc": lambda: grpc_floor(model, int(port[0])),
         "grpc-echo": lambda: grpc_floor(model, int(port[0]), echo=True), "ort": lambda: ort_floor(model)}[kind]()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds over every cell")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per cell per round (half c=1, half c=16)")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"`python benchmarks/serve_floor.py --rounds {args.rounds} --seconds {args.seconds:g}`, "
          f"{os.cpu_count()} cores, load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n", flush=True)
    print(bench(args.rounds, args.seconds), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
