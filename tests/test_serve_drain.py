"""SIGTERM under load on a real `gpux serve` process: every request whose bytes the server accepted is answered (200,
or 503 / UNAVAILABLE while it drains), on keep-alive and on fresh connections, REST and gRPC; a client only ever
finds the port closed before it sends."""

from __future__ import annotations

import http.client
import json
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.serving import ServerThread, mlp_project
from tests.test_serve_cli import Process

grpc = pytest.importorskip("grpc")
BODY = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]})


def rest_client(address: str, keep_alive: bool, stop: threading.Event, seen: Counter[str]) -> None:
    """Requests one after the other until the port is closed; each outcome counted ("lost": no answer to a request
    whose bytes were sent)."""
    host, port = address.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    while not stop.is_set():
        if not keep_alive:
            conn.close()
        try:
            conn.connect() if conn.sock is None else None
        except OSError:  # refused: nothing was sent
            seen["refused before sending"] += 1
            return
        try:
            conn.request("POST", "/v2/models/mlp/infer", BODY)
            reply = conn.getresponse()
            reply.read()
            seen[str(reply.status)] += 1
        except OSError as exc:  # reset or closed after the request went out
            seen[f"lost: {type(exc).__name__}"] += 1
            conn.close()


def grpc_client(address: str, stop: threading.Event, seen: Counter[str]) -> None:
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    request.raw_input_contents.append(np.full((1, 8), 0.5, np.float32).tobytes())
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        while not stop.is_set():
            try:
                stub.ModelInfer(request, timeout=30)
                seen["OK"] += 1
            except grpc.RpcError as exc:
                seen[exc.code().name] += 1
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    return


def test_sigterm_under_load_answers_every_request_it_accepted(tmp_path: Path) -> None:
    for run in range(3):
        p = Process(str(mlp_project(tmp_path / f"mlp{run}", "1.0.0", 0)), "--no-access-log")
        try:
            seen = under_load(p.start())
        finally:
            p.stop()
        lost = {k: v for k, v in seen.items() if k.startswith("lost")}
        assert not lost and seen["200"] and seen["OK"], seen
        assert set(seen) <= {"200", "503", "OK", "UNAVAILABLE", "refused before sending"}, seen


def under_load(p: Process) -> Counter[str]:
    """6 REST clients (half on fresh connections) and 2 gRPC clients, SIGTERM after a second; what they got."""
    stop, seen = threading.Event(), Counter[str]()
    threads = [threading.Thread(target=rest_client, args=(p.http, i % 2 == 0, stop, seen)) for i in range(6)]
    threads += [threading.Thread(target=grpc_client, args=(p.grpc, stop, seen)) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(60) == 0
    stop.set()
    for t in threads:
        t.join(30)
    return seen


def test_calls_waiting_in_grpc_core_when_the_drain_begins_are_answered(tmp_path: Path) -> None:
    """gRPC calls that came in while the server's loop was busy wait in grpc core, not yet handed to the loop; the
    drain answers each (OK, or UNAVAILABLE as it refuses new work), none is CANCELLED by the gRPC server's stop."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="mlp")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    request.raw_input_contents.append(np.full((1, 8), 0.5, np.float32).tobytes())
    busy, release = threading.Event(), threading.Event()

    def block() -> None:  # the loop is busy elsewhere until released
        busy.set()
        release.wait(30)

    with ServerThread([mlp_project(tmp_path / "mlp", "1.0.0", 0)]) as server, grpc.insecure_channel(server.grpc) as ch:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(ch)
        stub.ModelInfer(request, timeout=30)  # connected
        server.loop.call_soon_threadsafe(block)
        assert busy.wait(30)
        calls = [stub.ModelInfer.future(request, timeout=30) for _ in range(50)]
        time.sleep(0.3)  # they reach the server, and wait there
        server.loop.call_soon_threadsafe(server.server.stopping.set)  # SIGTERM's handler, once the loop is free
        release.set()
        seen = Counter(c.code().name for c in calls)
    assert set(seen) <= {"OK", "UNAVAILABLE"}, seen
