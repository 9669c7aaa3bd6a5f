"""Provider selection and the three layers of ordered fallback (logic tested with fake providers)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import gpux
from gpux import providers as providers_mod
from gpux.cli.main import main
from gpux.config.load import load_config
from gpux.errors import ProviderUnavailable, UsageError
from gpux.plan.select import select
from gpux.providers import Availability, Runner
from gpux.run import fallback as fallback_mod
from gpux.runtimes import onnxruntime as ort_mod

X = {"x": np.zeros((1, 8), np.float32)}


def set_backend(project_dir: Path, backend: str, extra: str = "") -> None:
    p = project_dir / "gpux.yml"
    p.write_text(re.sub(r"backend: .*", f"backend: {backend}{extra}", p.read_text()))


# -- selection -------------------------------------------------------------------------------------
def test_selection_precedence(mlp_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    set_backend(mlp_project, "openvino")
    project = load_config(mlp_project)
    assert select(project).chain == ("openvino", "cpu") and select(project).source == "runtime.backend"
    monkeypatch.setenv("GPUX_PROVIDER", "cuda")
    assert select(project).chain == ("cuda", "cpu") and select(project).source == "GPUX_PROVIDER"
    assert select(project, "tensorrt").chain == ("tensorrt", "cuda", "cpu")
    assert select(project, "tensorrt").source == "--provider"
    monkeypatch.delenv("GPUX_PROVIDER")
    set_backend(mlp_project, "auto")
    project = load_config(mlp_project)
    assert select(project).chain == ("tensorrt", "cuda", "rocm", "coreml", "mps", "directml", "openvino", "cpu")
    assert select(project, "openvino,cpu").chain == ("openvino", "cpu")
    assert select(project, "openvino", strict=True).chain == ("openvino",)


def test_bad_provider_names_and_unsupported_requests(mlp_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = load_config(mlp_project)
    with pytest.raises(UsageError, match=r"unknown provider 'cdua' \(did you mean 'cuda'\?\)"):
        select(project, "cdua")
    set_backend(mlp_project, "auto", "\n  supported: [openvino, cpu]")
    project = load_config(mlp_project)
    assert select(project).chain == ("openvino", "cpu"), "auto keeps to runtime.supported"
    monkeypatch.setenv("GPUX_PROVIDER", "tensorrt")
    with pytest.raises(UsageError, match="GPUX_PROVIDER: tensorrt is not supported by model 'tiny-mlp'"):
        select(project)


# -- fallback layers, with fake providers ----------------------------------------------------------
class Fakes:
    """Scripted behaviour per provider: probe result, session error, silent drop, first-inference error."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.probe: dict[str, Availability] = {}
        self.session_error: dict[str, Exception] = {}
        self.dropped: dict[str, str] = {}
        self.infer_error: dict[str, Exception] = {}
        real_probe, real_open = providers_mod.probe, fallback_mod.open_runner

        def probe(name: str) -> Availability:
            return self.probe.get(name) or Availability(name, "ok", "fake ok")

        def open_runner(provider: str, project, artifact) -> Runner:
            if provider in self.session_error:
                raise self.session_error[provider]
            runner = ort_mod.open_runner("cpu", project, artifact)
            runner.dropped = self.dropped.get(provider)
            if provider in self.infer_error:
                err = self.infer_error[provider]

                def fail(_feeds: dict) -> list:
                    raise err
                runner.run = fail
            runner.used = f"fake-{provider}"
            return runner

        monkeypatch.setattr(providers_mod, "probe", probe)  # what the session's probe_for asks
        monkeypatch.setattr(fallback_mod, "open_runner", open_runner)
        self.real = (real_probe, real_open)


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


def script_all_layers(fakes: Fakes) -> None:
    fakes.probe["tensorrt"] = Availability("tensorrt", "not installed", "TensorrtExecutionProvider missing",
                                           "pip install 'gpux-ml[tensorrt]'")
    fakes.session_error["cuda"] = RuntimeError("CUDA failure 100: no CUDA-capable device is detected")
    fakes.dropped["rocm"] = "ONNX Runtime did not take MIGraphXExecutionProvider (it would run on CPU)"
    fakes.infer_error["coreml"] = RuntimeError("Non-zero status code returned while running node")
    fakes.probe["directml"] = Availability("directml", "unsupported platform", "directml runs on win32", None)


def test_fallback_walks_every_layer_in_order(mlp_project: Path, fakes: Fakes) -> None:
    script_all_layers(fakes)
    with gpux.load(mlp_project, provider="tensorrt,cuda,rocm,coreml,directml,openvino,cpu") as s:
        out = s.run(X)
        assert out["probs"].shape == (1, 4)
        assert s.provider == "openvino" or s.provider == "cpu"
        stages = [(a.provider, a.stage, a.ok) for a in s.attempts]
    assert stages[:5] == [("tensorrt", "probe", False), ("cuda", "session", False), ("rocm", "session", False),
                          ("coreml", "first-inference", False), ("directml", "probe", False)]
    assert stages[-1][2] is True
    reasons = {a.provider: a.reason for a in s.attempts}
    assert "no CUDA-capable device" in reasons["cuda"] and "did not take" in reasons["rocm"]


def test_strict_turns_the_first_fallback_into_exit_4(mlp_project: Path, fakes: Fakes,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    script_all_layers(fakes)
    with pytest.raises(ProviderUnavailable, match="cuda unavailable \\(session\\): RuntimeError: CUDA failure"):
        gpux.load(mlp_project, provider="cuda", strict=True)
    set_backend(mlp_project, "coreml", "\n  fallback: false")
    with pytest.raises(SystemExit) as code:
        main(["run", str(mlp_project), "--input", json.dumps({"x": [[0.0] * 8]})])
    assert code.value.code == 4
    err = capsys.readouterr().err
    assert "coreml unavailable (first-inference)" in err and "fallback is off" in err


def test_cli_reports_requested_used_and_every_skip(mlp_project: Path, fakes: Fakes,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    script_all_layers(fakes)
    with pytest.raises(SystemExit) as code:
        main(["run", str(mlp_project), "--provider", "tensorrt", "--input", json.dumps({"x": [[0.0] * 8]})])
    assert code.value.code == 0
    err = capsys.readouterr().err
    assert "skipped tensorrt (probe): TensorrtExecutionProvider missing → pip install 'gpux-ml[tensorrt]'" in err
    assert "skipped cuda (session): RuntimeError: CUDA failure 100" in err
    assert "provider: requested tensorrt (--provider) → ran cpu [fake-cpu]" in err
    with pytest.raises(SystemExit):
        main(["run", str(mlp_project), "-p", "tensorrt", "--json", "--input", json.dumps({"x": [[0.0] * 8]})])
    doc = json.loads(capsys.readouterr().out)
    assert doc["provider"] == "cpu" and doc["fell_back"] is True
    assert [(a["provider"], a["stage"], a["ok"]) for a in doc["attempts"]] == [
        ("tensorrt", "probe", False), ("cuda", "session", False), ("cpu", "ok", True)]


def test_every_provider_failing_exits_4(mlp_project: Path, fakes: Fakes) -> None:
    for name in ("cpu",):
        fakes.session_error[name] = RuntimeError("broken")
    with pytest.raises(ProviderUnavailable, match="no provider could run 'tiny-mlp'"):
        gpux.load(mlp_project, provider="cpu")


def test_build_falls_back_and_says_so(mlp_project: Path) -> None:
    from .conftest import gpux as cli

    r = cli("build", str(mlp_project), "--provider", "tensorrt")
    assert r.returncode == 0, r.stderr
    assert "skipped tensorrt (probe)" in r.stderr and "built for cpu instead of tensorrt" in r.stderr
    strict = cli("build", str(mlp_project), "--provider", "tensorrt", "--strict")
    assert strict.returncode == 4 and "tensorrt unavailable" in strict.stderr


# -- placement ----------------------------------------------------------------------------------------
def test_placement_is_measured_from_onnx_runtime_profile(mlp_project: Path) -> None:
    from .conftest import gpux as cli

    r = cli("run", str(mlp_project), "--placement", "--json", "--input", json.dumps({"x": [[0.0] * 8]}))
    assert r.returncode == 0, r.stderr
    pl = json.loads(r.stdout)["placement"]
    assert pl["ep"] == "CPUExecutionProvider" and pl["coverage"] == 1.0
    assert pl["nodes"]["CPUExecutionProvider"] == pl["total"] >= 3


def test_placement_summary_counts_partitions() -> None:
    order = ["CUDAExecutionProvider"] * 3 + ["CPUExecutionProvider"] * 2 + ["CUDAExecutionProvider"] * 5
    s = ort_mod.placement_summary(order, "CUDAExecutionProvider")
    assert s["nodes"] == {"CUDAExecutionProvider": 8, "CPUExecutionProvider": 2}
    assert s["partitions"] == 2 and s["coverage"] == 0.8


def test_min_coverage_below_the_floor_falls_back(mlp_project: Path, fakes: Fakes,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    set_backend(mlp_project, "[cuda, cpu]", "\n  min_coverage: 0.9")
    low = ort_mod.placement_summary(["CUDAExecutionProvider", "CPUExecutionProvider"], "CPUExecutionProvider")
    calls = []

    def fake_placement(model, ep, ep_opts, feeds, level):
        calls.append(ep)
        assert level == "all"  # profiled as the session opened it
        return low if len(calls) == 1 else ort_mod.placement_summary(["CPUExecutionProvider"], ep)
    monkeypatch.setattr(ort_mod, "placement", fake_placement)
    with gpux.load(mlp_project) as s:
        s.run(X)
        [cuda] = [a for a in s.attempts if a.provider == "cuda"]
        assert cuda.stage == "placement" and "below runtime.min_coverage 90%" in cuda.reason
        assert s.provider == "cpu" and s.placement["coverage"] == 1.0


# -- the first inference: a runtime's failure, a rejection of the inputs, a gpux bug ----------------------
def test_a_gpux_bug_at_the_first_inference_is_raised_not_fallen_back(mlp_project: Path) -> None:
    """A TypeError raised in gpux's own code is a bug: raised as it is, never a provider's failure."""
    namespace: dict[str, object] = {}
    # a function of gpux's runner (its code is in gpux/runtimes/onnxruntime.py) with a bug in it
    exec(compile("def run(feeds):\n    return len(None)\n", ort_mod.__file__, "exec"), namespace)
    with gpux.load(mlp_project, provider="cpu") as s:
        first = s.provider
        s.runner.run = namespace["run"]
        with pytest.raises(TypeError, match="NoneType"):
            s.run(X)
        assert s.provider == first, "no fallback"
        assert all(a.ok for a in s.attempts if a.provider == first) and \
            not [a for a in s.attempts if a.stage == "first-inference"], "no attempt recorded as its failure"


def test_a_runtime_rejecting_the_inputs_is_an_input_error_and_its_failure_falls_back(mlp_project: Path,
                                                                                     fakes: Fakes) -> None:
    from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument

    from gpux.errors import InputError

    fakes.infer_error["cuda"] = RuntimeError("Exception from src/inference/src/infer_request.cpp")
    with gpux.load(mlp_project, provider="cuda,cpu") as s:
        assert s.run(X)["probs"].shape == (1, 4) and s.provider == "cpu"
        assert (s.attempts[0].provider, s.attempts[0].stage) == ("cuda", "first-inference")
    fakes.infer_error["cuda"] = InvalidArgument("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dims")
    with gpux.load(mlp_project, provider="cuda,cpu") as s:
        with pytest.raises(InputError, match=r"the model rejected the inputs: .*Got invalid dims") as raised:
            s.run(X)
        assert isinstance(raised.value.__cause__, InvalidArgument), "the runtime's error is the cause"
        assert s.provider == "cuda" and not [a for a in s.attempts if a.stage == "first-inference"]
