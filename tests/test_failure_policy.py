"""The one failure policy (`gpux.errors.classify`, docs/design.md "Errors: one way to fail") at each catch site:
a gpux bug, a machine error and the runtime's own failure planted at an ONNX build, an OpenVINO build, opening a
session, the first inference, serve decoding a request and tune's baseline. A bug is exit 70 / raised with its
traceback (a logged 500), never remembered, never a fallback; a model's failure is remembered (builds) and falls
back; a machine error is one line, exit 1, never remembered; an input error is the user's, named."""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import gpux
from gpux import providers as providers_mod
from gpux.cli.main import main
from gpux.errors import BuildFailed, Failure, InputError, ProviderUnavailable, UsageError, classify
from gpux.providers import Availability
from gpux.run import fallback as fallback_mod
from gpux.runtimes import onnxruntime as ort_mod
from gpux.runtimes import openvino as ov_mod
from gpux.serve.errors import is_bug
from tests.serving import ServerThread, error_of, mlp_project, post

X = {"x": np.zeros((1, 8), np.float32)}

# what each failure runs, as code of a gpux module: a bug in gpux's code, the machine's error raised there, the
# runtime's own error (real ONNX Runtime refusing a file that is no model)
BODIES = {
    "bug": "return len(None)",
    "machine": "raise OSError(errno.ENOSPC, 'No space left on device')",
    "memory": "raise MemoryError",
    "model": "import onnxruntime\n    onnxruntime.InferenceSession(b'not a model')",
}


def planted(module: ModuleType, failure: str) -> Callable[..., Any]:
    """A function whose code is in `module`'s file (gpux's code, as far as a traceback tells) failing as named."""
    namespace: dict[str, Any] = {"errno": errno}
    exec(compile(f"def planted(*args, **kwargs):\n    {BODIES[failure]}\n", module.__file__, "exec"), namespace)
    return namespace["planted"]


def build(project: Path, provider: str, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(["build", str(project), "-p", provider, *more])
    return int(done.value.code or 0), capsys.readouterr().err


def caught(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as exc:
        return exc
    raise AssertionError("nothing raised")


def test_the_classifier_names_whose_failure_it_is() -> None:
    assert classify(caught(planted(ort_mod, "bug"))) is Failure.BUG
    assert classify(caught(planted(ort_mod, "machine"))) is Failure.MACHINE
    assert classify(caught(planted(ort_mod, "model"))) is Failure.MODEL
    assert classify(MemoryError()) is Failure.MACHINE
    assert classify(caught(lambda: len(None))) is Failure.MODEL, "raised outside gpux: not gpux's bug"  # type: ignore[arg-type]
    # a ValueError at gpux's line may be a C extension's (numpy's, a runtime's native call): never counted a bug
    value = caught(lambda: exec(compile("raise ValueError('x')", ort_mod.__file__, "exec")))
    assert classify(value) is Failure.MODEL
    assert classify(InputError("x")) is Failure.INPUT and classify(UsageError("x")) is Failure.INPUT
    assert classify(BuildFailed("x")) is Failure.MODEL and classify(ProviderUnavailable("x")) is Failure.MACHINE
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    assert classify(InvalidArgument("dims"), (InvalidArgument,)) is Failure.INPUT
    for failure in BODIES:  # serve asks the same classifier: a bug is its logged 500, nothing else is
        assert is_bug(caught(planted(ort_mod, failure))) is (failure == "bug")


@pytest.mark.parametrize(("provider", "module", "name"), [
    ("cpu", ort_mod, "has_external_data"),  # inside the ONNX build step (artifacts/build's model step)
    ("openvino", ov_mod, "compress"),  # OpenVINO's own model step (NNCF compression)
])
@pytest.mark.parametrize("failure", ["bug", "machine", "memory", "model"])
def test_a_build_site_applies_the_one_policy(mlp_project: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str], provider: str,
                                             module: ModuleType, name: str, failure: str) -> None:
    monkeypatch.setattr(module, name, planted(module, failure))
    code, err = build(mlp_project, provider, capsys, "--force")
    monkeypatch.undo()
    again, err_again = build(mlp_project, provider, capsys)
    if failure == "bug":
        assert code == 70 and "Traceback" in err and "TypeError: object of type 'NoneType' has no len()" in err, err
        assert again == 0 and "remembered" not in err_again, "a bug is never remembered"
    elif failure == "machine":
        assert code == 1 and "Traceback" not in err and "error: [Errno 28] No space left on device" in err, err
        assert again == 0 and "remembered" not in err_again, "the machine's error is never remembered"
    elif failure == "memory":
        assert code == 1 and "Traceback" not in err and "error: MemoryError" in err, err
        assert again == 0 and "remembered" not in err_again, "the machine's error is never remembered"
    elif provider == "cpu":  # the model's failure on the last provider there is: one line, exit 1, remembered
        assert code == 1 and "Traceback" not in err and "InvalidProtobuf" in err, err
        assert again == 1 and "remembered from an earlier build" in err_again, err_again
    else:  # the model's failure on OpenVINO: the build falls back to cpu, and the next one skips OpenVINO at once
        assert code == 0 and f"skipped {provider} (build)" in err and "InvalidProtobuf" in err, err
        # the plant is gone: only the remembered failure can say it again
        assert again == 0 and f"skipped {provider} (build)" in err_again and "InvalidProtobuf" in err_again, err_again


def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda probes as present (its build is the ONNX file cpu shares) and opens ONNX Runtime's CPU session, where
    each test plants its failure."""
    real, real_open = providers_mod.probe, fallback_mod.open_runner
    monkeypatch.setattr(providers_mod, "probe",
                        lambda name: Availability(name, "ok", "fake ok") if name == "cuda" else real(name))

    def open_runner(provider: str, *args: Any) -> Any:
        runner = real_open("cpu" if provider == "cuda" else provider, *args)
        runner.dropped = None
        return runner

    monkeypatch.setattr(fallback_mod, "open_runner", open_runner)


@pytest.mark.parametrize("failure", ["bug", "machine", "model"])
def test_opening_a_session_applies_the_one_policy(mlp_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                  failure: str) -> None:
    fake_cuda(monkeypatch)
    real, plant = fallback_mod.open_runner, planted(ort_mod, failure)
    monkeypatch.setattr(fallback_mod, "open_runner",
                        lambda provider, *a: plant() if provider == "cuda" else real(provider, *a))
    if failure == "bug":
        with pytest.raises(TypeError, match="NoneType"):
            gpux.load(mlp_project, provider="cuda,cpu")
        return
    # a runtime's failure to open, or the machine's refusal there: the next provider may open (nothing at open
    # is remembered)
    with gpux.load(mlp_project, provider="cuda,cpu") as s:
        assert s.provider == "cpu" and s.run(X)["probs"].shape == (1, 4)
        cuda = next(a for a in s.attempts if a.provider == "cuda")
        assert cuda.stage == "session" and ("InvalidProtobuf" if failure == "model" else "Errno 28") in cuda.reason


@pytest.mark.parametrize("failure", ["bug", "machine", "model", "input"])
def test_the_first_inference_applies_the_one_policy(mlp_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                    failure: str) -> None:
    fake_cuda(monkeypatch)
    with gpux.load(mlp_project, provider="cuda,cpu") as s:
        assert s.provider == "cuda"
        real_run = s.runner.run
        if failure == "input":  # the real runtime refusing feeds that do not fit: the user's, named
            s.runner.run = lambda _feeds: real_run({"x": np.zeros((1, 3), np.float32)})
            with pytest.raises(InputError, match=r"the model rejected the inputs: .*x"):
                s.run(X)
            assert s.provider == "cuda"
            return
        s.runner.run = planted(ort_mod, failure)
        if failure == "bug":
            with pytest.raises(TypeError, match="NoneType"):
                s.run(X)
            assert s.provider == "cuda" and not [a for a in s.attempts if a.stage == "first-inference"]
            return
        assert s.run(X)["probs"].shape == (1, 4) and s.provider == "cpu", "the next provider ran it"
        first = next(a for a in s.attempts if a.stage == "first-inference")
        assert first.provider == "cuda" and ("InvalidProtobuf" if failure == "model" else "Errno 28") in first.reason


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    with ServerThread([mlp_project(tmp_path_factory.mktemp("policy") / "mlp", "1.0.0", 0)]) as running:
        yield running


@pytest.mark.parametrize("failure", ["bug", "machine", "model"])
def test_serve_decoding_a_request_applies_the_one_policy(served: ServerThread, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture, failure: str) -> None:
    """A bug while decoding a request's tensors is a 500 with its traceback logged; the machine's error and the
    runtime's own are the request's `inference failed` 500, nothing logged as gpux's; the server goes on."""
    from gpux.serve import protocol

    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 8], "datatype": "FP32", "data": [0.5] * 8}]})
    monkeypatch.setattr(protocol, "check_inputs", planted(protocol, failure))
    logger = logging.getLogger("gpux.serve")  # its own handler: another test's `gpux serve` may stop propagation
    logger.addHandler(caplog.handler)
    try:
        status, _, raw = post(served.http, "/v2/models/mlp/infer", body)
    finally:
        logger.removeHandler(caplog.handler)
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert status == 500, raw
    if failure == "bug":
        assert "internal error: TypeError" in error_of(raw) and "internal error on POST" in logged
    else:
        said = "InvalidProtobuf" if failure == "model" else "OSError: [Errno 28] No space left on device"
        assert f"inference failed: {said}" in error_of(raw) and "internal error" not in logged, (raw, logged)
    monkeypatch.undo()
    assert post(served.http, "/v2/models/mlp/infer", body)[0] == 200, "serving goes on"


@pytest.mark.parametrize("failure", ["bug", "machine", "model"])
def test_tune_s_baseline_applies_the_one_policy(mlp_project: Path, monkeypatch: pytest.MonkeyPatch,
                                                failure: str) -> None:
    """tune's plain ONNX Runtime baseline: a bug is raised; the runtime's or the machine's failure is the lock's
    record of why there is no baseline."""
    from gpux.bench import rounds
    from gpux.bench.tune import baseline_entry
    from gpux.config.load import load_config

    monkeypatch.setattr(rounds, "plain_session", planted(rounds, failure))
    project = load_config(mlp_project)
    if failure == "bug":
        with pytest.raises(TypeError, match="NoneType"):
            baseline_entry(project, X, 1)
        return
    entry, record = baseline_entry(project, X, 1)
    said = "INVALID_PROTOBUF" if failure == "model" else "No space left on device"
    assert entry is None and "a plain ONNX Runtime session failed" in record["error"] and said in record["error"]
