"""TensorRT: the engine plan, option mapping, engine compatibility checks; the GPU part runs where one is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gpux
from gpux import files
from gpux import providers as providers_mod
from gpux.artifacts import store
from gpux.artifacts.build import NeedsBuild, build
from gpux.artifacts.plan import keyed_targets
from gpux.config.load import load_config
from gpux.model.io import interface, load_checked, source_files
from gpux.plan.targets import resolve_shapes
from gpux.providers import Availability

from .conftest import gpux as cli

TRT = ("runtime:\n  backend: cpu\nproviders:\n"
       "  tensorrt: {precision: fp16, workspace: 1GB, profiles: {batch: {min: 1, opt: 4, max: 16}}}\n")


def trt_project(mlp_project: Path, pinned: bool = False) -> Path:
    p = mlp_project / "gpux.yml"
    p.write_text(p.read_text().replace("runtime:\n  backend: cpu\n", TRT))
    if pinned:  # runtime.build_on_run: false: run refuses what it would otherwise build on first use
        p.write_text(p.read_text().replace("  backend: cpu\n", "  backend: cpu\n  build_on_run: false\n", 1))
    return mlp_project


def base_only(project_dir: Path) -> None:
    """Build the ONNX model the engine is made from (the engine step itself fails without a GPU)."""
    from gpux.errors import BuildFailed

    with pytest.raises(BuildFailed):
        build(load_config(project_dir), "tensorrt")


def test_dry_run_shows_the_engine_target_with_profiles_and_precision(mlp_project: Path) -> None:
    r = cli("build", str(trt_project(mlp_project)), "--provider", "tensorrt", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    onnx, engine = doc["targets"]
    assert onnx["id"] == "onnx-fp32-basic" and engine["consumes"] == onnx["id"]
    assert engine["id"] == "tensorrt-engine-fp16" and engine["precision"] == "fp16"
    assert engine["options"]["profile_shapes"] == {
        "trt_profile_min_shapes": "x:1x8", "trt_profile_opt_shapes": "x:4x8", "trt_profile_max_shapes": "x:16x8"}
    assert engine["options"]["workspace"] == 1_000_000_000
    assert "gpu" in engine["key_parts"]["device"], "engines are keyed by the GPU"
    assert doc["available"]["status"] != "ok"


def test_int8_engine_is_built_from_the_calibrated_qdq_model(mlp_project: Path) -> None:
    p = trt_project(mlp_project) / "gpux.yml"
    p.write_text(p.read_text().replace("precision: fp16", "precision: int8"))
    r = cli("build", str(mlp_project), "--provider", "tensorrt", "--dry-run", "--json")
    onnx, engine = json.loads(r.stdout)["targets"]
    assert onnx["id"] == "onnx-int8-static-basic" and engine["options"]["precision"] == "int8"


def fake_engine(project_dir: Path, gpu: str, trt_version: str) -> store.Artifact:
    """Publish an engine artifact as another machine would have built it (no GPU needed to write one)."""
    project = load_config(project_dir)
    io = load_checked(project)
    inputs, _ = interface(project)
    digest = files.digest_files(source_files(project, io), project.root)
    planned = keyed_targets(project, "tensorrt", inputs, digest, resolve_shapes(project))[-1]
    target, parts = planned.target, planned.parts
    parts = {**parts, "device": {"gpu": gpu, "compute_capability": "8.0", "cuda_driver": "12.4"},
             "versions": {**parts["versions"], "tensorrt": trt_version}}
    work = store.new_workdir(project_dir / ".gpux", "fake")
    (work / "model_ctx.onnx").write_bytes(b"not a real engine")
    return store.publish(work, project_dir / ".gpux" / project.name / f"{target.id}-deadbeef0000",
                         {"schema": 1, "target": target.to_dict(), "key": "x", "key_parts": parts,
                          "main": "model_ctx.onnx", "built_at": "2026-01-01T00:00:00+00:00"})


def test_run_rebuilds_a_stale_engine_on_first_use_saying_why(mlp_project: Path) -> None:
    from gpux.errors import BuildFailed

    trt_project(mlp_project)
    fake_engine(mlp_project, "NVIDIA A100-SXM4-80GB", "10.3.0")
    said: list[str] = []
    with pytest.raises(BuildFailed, match="cannot build a TensorRT engine here"):  # no GPU here: the rebuild fails
        build(load_config(mlp_project), "tensorrt", for_run=True, log=said.append)
    line = next(m for m in said if m.startswith("building tensorrt-engine-fp16"))
    assert "does not fit this machine" in line and "gpu NVIDIA A100-SXM4-80GB (built)" in line
    assert "on first use; this can take minutes" in line


def test_pinned_run_refuses_an_engine_built_for_another_gpu_with_the_build_command(mlp_project: Path) -> None:
    trt_project(mlp_project, pinned=True)
    base_only(mlp_project)
    fake_engine(mlp_project, "NVIDIA A100-SXM4-80GB", "10.3.0")
    with pytest.raises(NeedsBuild) as info:
        build(load_config(mlp_project), "tensorrt", for_run=True)
    msg = info.value.message
    assert "does not fit this machine" in msg
    assert "gpu NVIDIA A100-SXM4-80GB (built) vs none (here)" in msg
    assert "tensorrt 10.3.0 (built) vs none (here)" in msg
    assert info.value.hint == f"gpux build {mlp_project} --provider tensorrt"


def test_session_reports_the_refusal_and_falls_back(mlp_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trt_project(mlp_project, pinned=True)
    base_only(mlp_project)
    build(load_config(mlp_project), "cpu")  # what it falls back to is built too: pinned runs build nothing
    fake_engine(mlp_project, "NVIDIA H100", "10.4.0")
    real = providers_mod.probe
    monkeypatch.setattr(providers_mod, "probe",
                        lambda n: Availability(n, "ok", "pretend") if n == "tensorrt" else real(n))
    with gpux.load(mlp_project, provider="tensorrt") as s:
        s.run({"x": np.zeros((1, 8), np.float32)})
        trt = s.attempts[0]
        assert (trt.provider, trt.stage, trt.ok) == ("tensorrt", "build", False)
        assert "NVIDIA H100" in trt.reason and trt.fix == f"gpux build {mlp_project} --provider tensorrt"
        assert s.provider in ("cuda", "cpu")


def test_engine_build_without_a_gpu_is_a_clear_build_failure(mlp_project: Path) -> None:
    from gpux.errors import BuildFailed

    trt_project(mlp_project)
    with pytest.raises(BuildFailed, match="cannot build a TensorRT engine here"):
        build(load_config(mlp_project), "tensorrt")


@pytest.mark.hardware("tensorrt")
def test_engine_is_built_by_gpux_build_and_runs(mlp_project: Path) -> None:
    trt_project(mlp_project)
    result = build(load_config(mlp_project), "tensorrt").final
    assert result.artifact.manifest["info"]["engines"], "an engine file was written at build time"
    assert result.artifact.manifest["key_parts"]["device"]["gpu"]
    with gpux.load(mlp_project, provider="tensorrt", strict=True) as s:
        out = s.run({"x": np.ones((4, 8), np.float32)})
        assert s.used == "TensorrtExecutionProvider" and out["probs"].shape == (4, 4)


@pytest.mark.hardware("cuda")
def test_cuda_runs_for_real(mlp_project: Path) -> None:
    with gpux.load(mlp_project, provider="cuda", strict=True) as s:
        s.run({"x": np.ones((2, 8), np.float32)})
        assert s.used == "CUDAExecutionProvider"


def test_io_binding_path_runs_with_bound_buffers(mlp_project: Path) -> None:
    """The CUDA IO-binding benchmark path, exercised here with host buffers (same code, device "cpu")."""
    from gpux.runtimes import onnxruntime as ort

    art = build(load_config(mlp_project), "cpu").final.artifact
    sess = ort.create_session(art.main, "CPUExecutionProvider", None, level=ort.ONLINE_LEVEL)
    feeds = {"x": np.ones((2, 8), np.float32)}
    [call] = ort.bind_device(sess, feeds, 1, ("cpu", 0))
    call()
    binding = call.args[0]
    [out] = binding.copy_outputs_to_cpu()
    np.testing.assert_allclose(out, sess.run(feeds)[0], rtol=1e-6)


@pytest.mark.hardware("cuda")
def test_cuda_io_binding_benchmark(mlp_project: Path) -> None:
    p = mlp_project / "gpux.yml"
    p.write_text(p.read_text().replace("backend: cpu", "backend: cuda\nproviders:\n  cuda: {io_binding: true}"))
    r = cli("run", str(mlp_project), "--benchmark", "--runs", "50", "--duration", "0", "--json", "--strict")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["runs_on"] == "CUDAExecutionProvider"
