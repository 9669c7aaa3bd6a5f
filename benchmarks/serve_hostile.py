"""`gpux serve` under a hostile corpus: its memory during and after, and whether it keeps answering.

    python benchmarks/serve_hostile.py [--code DIR]

Serves a small image model (a photo in, its mean colour out) with the default `serve:` limits (`--code DIR` runs
another checkout of gpux, for a side-by-side), then sends, phase by phase: three PNGs of 13000x13000 pixels (500 KB
each) at once; one request of 128 PNGs of 2000x2000; three requests of 16 PNGs of 2000x2000 at once; four requests
of a 24 MP PNG (6000x4000, under the pixel limit) at once; four 64 MB headers at once; 300 connections whose body
never arrives (a Content-Length larger than what is sent); 1000 malformed gRPC ModelInfer messages. The server's
RSS (psutil, process and children) is sampled every 10 ms: the baseline after a few ordinary requests, the peak of
each phase, and what is left 3 s after the corpus. Each phase prints the answers it got (HTTP status or gRPC code,
or the error); a legal request must still answer 200 at the end.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve import Served, free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.serving import mean_project  # noqa: E402


def png(width: int, height: int) -> bytes:
    """A real RGB PNG of one colour, written row by row (never held decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z, row, parts = zlib.compressobj(9), b"\0" + bytes([200, 100, 50]) * width, []
    parts = [z.compress(row) for _ in range(height)] + [z.flush()]
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))


class Sampler:
    """The server's RSS every 10 ms: peak since the last mark."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.proc, self.peak, self.running = psutil.Process(pid), 0, True
        threading.Thread(target=self._run, daemon=True).start()

    def rss(self) -> int:
        procs = [self.proc, *self.proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if p.is_running())

    def _run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.01)

    def mark(self) -> int:
        peak, self.peak = self.peak, self.rss()
        return peak


def infer_files(address: str, files: list[bytes]) -> str:
    """One request of encoded files (BYTES, binary tensor extension) with http.client; its status and error."""
    import http.client

    data = b"".join(struct.pack("<I", len(f)) + f for f in files)
    head = json.dumps({"inputs": [{"name": "x", "shape": [len(files)], "datatype": "BYTES",
                                   "parameters": {"binary_data_size": len(data)}}]}).encode()
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", "/v2/models/mean/infer", head + data,
                     {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"})
        reply = conn.getresponse()
        body = reply.read()
        return str(reply.status) if reply.status == 200 else f"{reply.status} {json.loads(body)['error'][:100]}"
    except OSError as exc:
        return type(exc).__name__
    finally:
        conn.close()


def raw(address: str, data: bytes, hold: bool = False) -> str:
    host, port = address.split(":")
    try:
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.sendall(data)
            answer = sock.recv(200)
            return answer.split(b"\r\n", 1)[0].decode() or "closed"
    except OSError as exc:
        return type(exc).__name__


def malformed_grpc(address: str, count: int) -> Counter[str]:
    import grpc

    rng = np.random.default_rng(0)
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        out: Counter[str] = Counter()
        for _ in range(count):
            try:
                call(rng.integers(0, 256, int(rng.integers(1, 200)), dtype=np.uint8).tobytes(), timeout=10)
                out["OK"] += 1
            except grpc.RpcError as exc:
                out[exc.code().name] += 1
        return out


def phases(address: str, grpc_address: str) -> list[tuple[str, Any]]:
    bomb, big, photo = png(13000, 13000), png(2000, 2000), png(6000, 4000)
    head = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 * 2**20) + b"\r\n\r\n"
    stalled = b"POST /v2/models/mean/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"inputs\":"

    def many(n: int, calls: Any) -> Counter[str]:
        with ThreadPoolExecutor(n) as pool:
            return Counter(pool.map(lambda f: f(), [calls] * n))

    return [
        (f"3 x PNG 13000x13000 ({len(bomb) // 1024} KB) at once",
         lambda: many(3, lambda: infer_files(address, [bomb]))),
        (f"1 request of 128 PNGs 2000x2000 ({len(big) // 1024} KB each)", lambda: infer_files(address, [big] * 128)),
        ("3 requests of 16 PNGs 2000x2000 at once", lambda: many(3, lambda: infer_files(address, [big] * 16))),
        ("4 requests of a 24 MP PNG (6000x4000) at once", lambda: many(4, lambda: infer_files(address, [photo]))),
        ("4 x 64 MB header at once", lambda: many(4, lambda: raw(address, head))),
        ("300 bodies that never arrive", lambda: many(300, lambda: raw(address, stalled))),
        ("1000 malformed gRPC ModelInfer", lambda: malformed_grpc(grpc_address, 1000)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", default=str(ROOT), help="the gpux checkout to serve with")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    bounded = "body_timeout_s" in (Path(args.code) / "gpux" / "config" / "schema.py").read_text()
    project = mean_project(work / "mean", ", body_timeout_s: 5" if bounded else "")
    http, grpc_port = free_port(), free_port()
    argv = [sys.executable, "-m", "gpux", "serve", str(project), "--no-access-log", "--port", str(http),
            "--grpc-port", str(grpc_port)]
    with Served(argv, http, grpc_port, env={"PYTHONPATH": args.code}, cwd=work) as server:
        small = png(640, 480)
        for _ in range(20):
            assert infer_files(server.http, [small]) == "200"
        sampler = Sampler(server.proc.pid)
        time.sleep(0.5)
        base = sampler.mark()
        print(f"code: {args.code}; body_timeout_s: {'5 s' if bounded else 'none'}\nbaseline RSS {base / 2**20:.0f} MB")
        for name, run in phases(server.http, server.grpc):
            started = time.perf_counter()
            got = run()
            peak = sampler.mark()
            answers = dict(got) if isinstance(got, Counter) else {got: 1}
            print(f"{name}: peak +{(peak - base) / 2**20:.0f} MB, {time.perf_counter() - started:.1f} s, "
                  f"{json.dumps(answers)}")
        time.sleep(3)
        after = sampler.rss()
        print(f"after 3 s: +{(after - base) / 2**20:.0f} MB; a legal request: {infer_files(server.http, [small])}")
        sampler.running = False


if __name__ == "__main__":
    main()
