"""`gpux serve` as a process: ports in the log, SIGTERM drains accepted requests, a bounded load test."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import gpux
from tests.serving import mlp_project, post

tritonhttp = pytest.importorskip("tritonclient.http")
tritongrpc = pytest.importorskip("tritonclient.grpc")


class Process:
    """A `gpux serve` subprocess whose stderr is read line by line; killed if still running at exit."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "gpux", "serve", *args, "--port", "0", "--grpc-port", "0"],
                                     stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.log: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.http = self.grpc = ""

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.log.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} never logged; log so far:\n{''.join(self.log)}")

    def start(self) -> Process:
        line = self.wait_for("listening:")
        self.http = line.split("http://")[1].split(",")[0].strip()
        self.grpc = line.split("grpc ")[1].strip()
        self.wait_for("ready:")
        return self

    def drain_log(self) -> str:
        while not self.lines.empty():
            self.log.append(self.lines.get())
        return "".join(self.log)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def serve_process() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for p in started:
        p.stop()


def test_help_and_bad_target() -> None:
    r = gpux("serve", "--help")
    assert r.returncode == 0 and "--max-batch-size" in r.stdout and "--api-key" in r.stdout
    r = gpux("serve", "/no/such/project")
    assert r.returncode == 3 and "error:" in r.stderr and "Traceback" not in r.stderr


def send_http(address: str, x: np.ndarray) -> np.ndarray:
    item = tritonhttp.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    return tritonhttp.InferenceServerClient(address, network_timeout=30).infer("mlp", [item]).as_numpy("probs")


def send_grpc(address: str, x: np.ndarray) -> np.ndarray:
    item = tritongrpc.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    return tritongrpc.InferenceServerClient(address).infer("mlp", [item], client_timeout=30).as_numpy("probs")


def test_sigterm_drains_accepted_requests(tmp_path: Path, serve_process: list[Process]) -> None:
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    # a one-second batching window holds every accepted request in the queue when SIGTERM arrives
    p = Process(str(project), "--max-batch-size", "64", "--max-queue-delay-us", "1000000")
    serve_process.append(p)
    p.start()
    assert p.http.startswith("127.0.0.1:") and p.grpc.startswith("127.0.0.1:")  # loopback unless asked
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(12)]
    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(send_http if i % 2 else send_grpc, p.http if i % 2 else p.grpc, x)
                   for i, x in enumerate(xs)]
        time.sleep(0.4)
        assert not any(f.done() for f in futures), "requests answered before the batching window closed"
        p.proc.send_signal(signal.SIGTERM)
        results = [f.result(timeout=30) for f in futures]
    assert p.proc.wait(30) == 0
    log = p.drain_log()
    assert "draining" in log
    # every answered request has its access line, written by the log's thread before the process ended
    lines = [json.loads(x) for x in log.splitlines() if x.startswith("{")]
    answered = [x for x in lines if x.get("method") == "ModelInfer" or str(x.get("path")).endswith("/infer")]
    assert len(answered) == 12 and {x["status"] for x in answered} == {200}, log
    import gpux as api

    with api.load(str(project)) as session:
        for x, got in zip(xs, results, strict=True):
            np.testing.assert_allclose(got, session.run({"x": x})["probs"], rtol=1e-5, atol=1e-6)
    with pytest.raises(OSError):
        post(p.http, "/v2/health/live", b"", method="GET")


@pytest.mark.slow
def test_bounded_load_has_no_failures(tmp_path: Path, serve_process: list[Process]) -> None:
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    p = Process(str(project), "--no-access-log", "--max-batch-size", "32")
    serve_process.append(p)
    p.start()
    clients, seconds = 32, 10.0
    deadline = time.monotonic() + seconds
    x = np.ones((1, 8), dtype=np.float32)

    def client(i: int) -> tuple[list[float], int]:
        grpc = i % 2 == 0
        c: Any = (tritongrpc.InferenceServerClient(p.grpc) if grpc
                  else tritonhttp.InferenceServerClient(p.http, network_timeout=30))
        mod = tritongrpc if grpc else tritonhttp
        item = mod.InferInput("x", [1, 8], "FP32")
        item.set_data_from_numpy(x)
        times, failures = [], 0
        while time.monotonic() < deadline and len(times) < 20000:
            started = time.perf_counter()
            try:
                out = c.infer("mlp", [item]).as_numpy("probs")
                failures += int(out.shape != (1, 4))
            except Exception:
                failures += 1
            times.append(time.perf_counter() - started)
        return times, failures

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    times = np.array([t for r in results for t in r[0]]) * 1000
    failures = sum(r[1] for r in results)
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    print(f"\nload: {clients} clients x {seconds:.0f} s (half REST binary, half gRPC): {len(times)} requests, "
          f"{len(times) / seconds:.0f}/s, {failures} failed; latency ms p50 {p50:.2f} p90 {p90:.2f} p99 {p99:.2f}")
    assert failures == 0 and len(times) > clients
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(30) == 0


def test_a_model_that_cannot_open_stops_the_server_with_its_exit_code(tmp_path: Path) -> None:
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    r = gpux("serve", str(project), "--provider", "tensorrt", "--strict", "--port", "0", "--grpc-port", "0",
             timeout=120)
    assert r.returncode == 4, r.stderr
    assert "error: tensorrt unavailable" in r.stderr and "Traceback" not in r.stderr


def test_fallback_is_reported_and_served(tmp_path: Path, serve_process: list[Process]) -> None:
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    p = Process(str(project), "--provider", "tensorrt")
    serve_process.append(p)
    p.start()
    log = p.drain_log()
    assert "mlp 1.0.0: skipped tensorrt (probe)" in log and "ready: mlp 1.0.0 on cpu" in log
    meta = tritonhttp.InferenceServerClient(p.http).get_model_metadata("mlp")
    assert meta["platform"] == "gpux_cpu"
    p.proc.send_signal(signal.SIGTERM)
    assert p.proc.wait(30) == 0


def loaded(pid: int, library: str) -> bool:
    """Is `library` mapped into process `pid`?"""
    return library in Path(f"/proc/{pid}/maps").read_text()


def served_once(project: Path, serve_process: list[Process], measure: Callable[[Process], Any], *args: str,
                recorded: bool = True) -> Any:
    """One `gpux serve PROJECT --no-access-log ARGS`: `measure(process)` once it is up, then it stops once its serve
    record is there (`recorded`), or gone; a record is kept, or dropped, once every model is ready."""
    p = Process(str(project), "--no-access-log", *args)
    serve_process.append(p)
    p.start()
    out = measure(p)
    deadline = time.monotonic() + 30
    while bool(list((project / ".gpux" / ".serve").glob("*.json"))) != recorded and time.monotonic() < deadline:
        time.sleep(0.05)
    p.stop()
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_a_later_start_serves_from_its_record_without_reading_the_config(tmp_path: Path,
                                                                         serve_process: list[Process]) -> None:
    """The second start of the same command serves the same answers from the record the first one kept, without
    pydantic; a changed gpux.yml is read again (and the model it names now served)."""
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    answers = []
    for version in ("1.0.0", "1.0.0", "2.0.0"):
        if version == "2.0.0":
            mlp_project(tmp_path / "mlp", version, 3)  # a new model and gpux.yml: the record no longer holds
        answers.append(served_once(project, serve_process, lambda p: (
            loaded(p.proc.pid, "pydantic_core"), send_http(p.http, x), send_grpc(p.grpc, x),
            tritonhttp.InferenceServerClient(p.http).get_model_metadata("mlp")["versions"]), "--provider", "cpu"))
    (read_first, *first), (read_again, *second), (read_third, *third) = answers
    assert read_first and not read_again and read_third  # config read, record served, config read again
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[2] == second[2] == ["1.0.0"] and third[2] == ["2.0.0"]
    assert not np.allclose(third[0], first[0])  # the new model answers
    records = list((project / ".gpux" / ".serve").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["models"][0]["version"] == "2.0.0"
    # the artifact damaged in place (same size, same mtime): the record is not trusted, the config is read
    from gpux.serve import record

    command = record.Command(targets=[str(project)], provider="cpu", strict=False, store=None, overrides={})
    [kept] = record.replay([str(project)], command) or []
    artifact = Path(kept.recipe.arguments["model"])
    stat, data = artifact.stat(), bytearray(artifact.read_bytes())
    data[-10] ^= 0xFF
    artifact.write_bytes(bytes(data))
    os.utime(artifact, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert record.replay([str(project)], command) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_an_openvino_model_is_served_from_its_record(tmp_path: Path, serve_process: list[Process]) -> None:
    """OpenVINO's compiled model opens again from its recipe: the same answers and platform, no pydantic."""
    pytest.importorskip("openvino")
    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    starts = [served_once(project, serve_process, lambda p: (
        loaded(p.proc.pid, "pydantic_core"), send_http(p.http, x), send_grpc(p.grpc, x),
        tritonhttp.InferenceServerClient(p.http).get_model_metadata("mlp")["platform"]), "--provider", "openvino",
        "--strict") for _ in range(2)]
    (read_first, *first), (read_again, *second) = starts
    assert read_first and not read_again
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_array_equal(first[1], second[1])
    assert first[2] == second[2] == "gpux_openvino"
    [record] = (project / ".gpux" / ".serve").glob("*.json")
    [model] = json.loads(record.read_text())["models"]
    assert model["recipe"]["runtime"] == "gpux.runtimes.openvino:open_compiled_runner"
    assert model["recipe"]["arguments"]["model"].endswith("model.xml")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps; symbolic links")
def test_the_record_is_not_used_when_what_it_depends_on_changed(tmp_path: Path,
                                                                 serve_process: list[Process]) -> None:
    """A model file that is a link pointed elsewhere, new verify data (part of the artifact's key) and a record
    whose session no longer opens all make the next start read gpux.yml; the answers are always the config's."""
    from tests.conftest import make_mlp

    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    (project / "models").mkdir()
    make_mlp(project / "models" / "a.onnx", seed=0)
    make_mlp(project / "models" / "b.onnx", seed=5)
    (project / "model.onnx").unlink()
    (project / "model.onnx").symlink_to("models/a.onnx")
    yml = project / "gpux.yml"
    yml.write_text(yml.read_text() + "verify: {data: v.npz}\n")
    np.savez(project / "v.npz", x=np.ones((2, 8), np.float32))
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)

    def start(recorded: bool = True) -> tuple[bool, np.ndarray]:
        return served_once(project, serve_process, lambda p: (loaded(p.proc.pid, "pydantic_core"),
                                                              send_http(p.http, x)), "--provider", "cpu",
                           recorded=recorded)

    read, first = start()
    assert read and not start()[0]  # then served from the record
    (project / "model.onnx").unlink()
    (project / "model.onnx").symlink_to("models/b.onnx")  # same file name, another model
    read, repointed = start()
    assert read and not np.allclose(repointed, first)
    assert not start()[0]
    np.savez(project / "v.npz", x=np.zeros((2, 8), np.float32))  # new verify data: another artifact key
    assert start()[0]
    [record] = (project / ".gpux" / ".serve").glob("*.json")
    doc = json.loads(record.read_text())
    doc["models"][0]["recipe"]["arguments"]["level"] = "no such level"  # a session that does not open so
    record.write_text(json.dumps(doc))
    read, again = start(recorded=False)
    assert read and np.allclose(again, repointed)
    assert start()[0] and not start()[0]  # that record dropped: the next start reads and records, the one after serves
    [record] = (project / ".gpux" / ".serve").glob("*.json")
    doc = json.loads(record.read_text())
    doc["models"][0]["runs_on"] = "somewhere else"  # the session opens, but not where the record says it ran
    record.write_text(json.dumps(doc))
    assert start(recorded=False)[0] and start()[0] and not start()[0]
    doc = json.loads(record.read_text())
    doc["models"][0]["inputs"][0]["shape"] = [1, 9]  # the session opens, but its first inference fails
    record.write_text(json.dumps(doc))
    read, answer = start(recorded=False)
    assert read and np.allclose(answer, repointed)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")
def test_a_model_or_labels_rewritten_in_place_are_not_served_from_the_record(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, serve_process: list[Process]) -> None:
    """Same size, mtime set back: the next start reads the config and serves the new weights; new labels of the
    same size also void the record."""
    from gpux.serve import record
    from tests.conftest import make_mlp, rewrite_in_place

    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    yml = project / "gpux.yml"
    yml.write_text(yml.read_text().replace("[cat, dog, fox, owl]", "labels.txt"))
    (project / "labels.txt").write_text("cat\ndog\nfox\nowl\n")
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)

    def start() -> tuple[bool, np.ndarray]:
        return served_once(project, serve_process, lambda p: (loaded(p.proc.pid, "pydantic_core"),
                                                              send_http(p.http, x)), "--provider", "cpu")

    read, first = start()
    assert read and not start()[0]
    elsewhere = tmp_path_factory.mktemp("new")
    make_mlp(elsewhere / "model.onnx", seed=5)
    rewrite_in_place(project / "model.onnx", (elsewhere / "model.onnx").read_bytes())
    read, retrained = start()
    assert read and not np.allclose(retrained, first)
    assert not start()[0]
    command = record.Command(targets=[str(project)], provider="cpu", strict=False, store=None, overrides={})
    assert record.replay([str(project)], command) is not None
    rewrite_in_place(project / "labels.txt", b"owl\nfox\ndog\ncat\n")
    assert record.replay([str(project)], command) is None


def test_a_record_is_dropped_only_for_a_model_that_did_not_open_as_recorded(tmp_path: Path) -> None:
    """A model reloaded through the repository API is read from its config too, but its record opened fine."""
    from types import SimpleNamespace

    from gpux.serve import record

    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    command = record.Command(targets=[str(project)], provider="cpu", strict=False, store=None, overrides={})
    where = record.record_file([str(project)], command)
    assert where is not None
    where.parent.mkdir(parents=True)
    where.write_text("{}")
    record.forget([str(project)], command, [SimpleNamespace(recorded=None, record_failed=False)])
    assert where.exists()
    record.forget([str(project)], command, [SimpleNamespace(recorded=None, record_failed=True)])
    assert not where.exists()


def test_a_record_opens_only_through_its_artifact_kinds_runtime(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The function a record names is called only where it is an opening function of the runtime its artifact's
    kind opens with; a record that does not read is logged (its file, why, the configs read instead)."""
    import logging

    import gpux
    from gpux.serve import record

    project = mlp_project(tmp_path / "mlp", "1.0.0", 0)
    with gpux.load(project, provider="cpu") as session:
        recipe = session.runner.recipe
    assert recipe is not None
    assert record.opener(recipe).__name__ == "open_session_runner"
    for named in ("os:system", "gpux.runtimes.onnxruntime:build_onnx", "gpux.runtimes.openvino:open_compiled_runner"):
        with pytest.raises(ValueError, match="is not how a"):
            record.opener(record.Recipe(named, recipe.arguments))
    command = record.Command(targets=[str(project)], provider="cpu", strict=False, store=None, overrides={})
    where = record.record_file([str(project)], command)
    assert where is not None
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text("{not json")
    logger = logging.getLogger("gpux.serve")
    monkeypatch.setattr(logger, "disabled", False)  # a library's logging.config run earlier in this process
    previous = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(caplog.handler)
    try:
        assert record.replay([str(project)], command) is None
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(previous)
    [line] = {r.getMessage() for r in caplog.records}  # (caught once or twice: as it propagates too)
    assert str(where) in line and "JSONDecodeError" in line and "reading the configs instead" in line
