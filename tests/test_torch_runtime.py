"""PyTorch as a runtime (`runtime: torch`) on real torch: TorchScript and .pt2 sources run eager and compiled on
the CPU, verified against eager FP32; the Inductor cache kept at build makes a later `run` a cache hit; a torch
runtime on cuda that this machine lacks falls back to cpu with the probe's reason."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import gpux
from gpux.artifacts.build import build
from gpux.artifacts.plan import keyed_targets
from gpux.config.load import load_config
from gpux.errors import ConfigError
from gpux.plan.targets import resolve_shapes
from gpux.providers import probe_torch
from gpux.runtimes import targets

from .conftest import gpux as cli
from .conftest import write
from .torch_projects import make_cnn_project, make_mlp_project, torch_outputs

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def with_providers(project: Path, block: str) -> Path:
    """The project's gpux.yml with its providers: section replaced by `block`."""
    cfg = project / "gpux.yml"
    text = cfg.read_text().split("providers:")[0].split("benchmark:")[0]
    cfg.write_text(text.rstrip() + "\nproviders:\n" + block)
    return project


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_cnn_project(tmp_path_factory.mktemp("trt") / "cnn")


@pytest.fixture(scope="module")
def pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mlp_project(tmp_path_factory.mktemp("trt") / "ep", "torch-ep", kind="torch_export")


def x_for(project: Path) -> tuple[str, np.ndarray]:
    shape = (2, 3, 32, 32) if (project / "model.pt").exists() else (2, 12)
    name = "image" if len(shape) == 4 else "x"
    return name, np.random.default_rng(5).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("which", ["cnn", "pt2"])
def test_eager_cpu_runs_the_source_in_pytorch(which: str, request: pytest.FixtureRequest) -> None:
    project = with_providers(request.getfixturevalue(which), "  cpu: {runtime: torch}\n")
    result = build(load_config(project), "cpu")
    [r] = result.results
    assert r.target.kind == "torch-module" and r.target.id == "torch-cpu-fp32-eager"  # no ONNX export
    assert r.artifact.manifest["verification"]["passed"]
    assert r.artifact.manifest["key_parts"]["device"] == {}  # eager artifacts do not depend on the CPU
    name, x = x_for(project)
    with gpux.load(project, provider="cpu") as session:
        got = session.run({name: x})
        assert session.used == "PyTorch cpu fp32 eager" and not session.fell_back
        assert "compile_s" not in session.timings
    np.testing.assert_allclose(next(iter(got.values())), torch_outputs(project, x), rtol=1e-6, atol=1e-7)


def test_bf16_casts_the_model_and_is_verified_at_its_precision(pt2: Path) -> None:
    project = with_providers(pt2, "  cpu: {runtime: torch, torch: {precision: bf16}}\n")
    [r] = build(load_config(project), "cpu").results
    assert r.target.id == "torch-cpu-bf16-eager"
    v = r.artifact.manifest["verification"]
    assert v["passed"] and v["precision"] == "bf16"
    name, x = x_for(project)
    with gpux.load(project, provider="cpu") as session:
        out = session.run({name: x})["probs"]
    assert out.dtype == np.float32  # outputs come back as float32
    ref = torch_outputs(project, x)
    assert not np.array_equal(out, ref)  # it really ran in bf16
    np.testing.assert_allclose(out, ref, atol=3e-2)


@pytest.mark.slow
def test_compiled_torchscript_build_then_run_is_a_cache_hit(cnn: Path, tmp_path: Path) -> None:
    project = with_providers(cnn, "  cpu: {runtime: torch, torch: {compile: default}}\n")
    empty = tmp_path / "inductor-elsewhere"  # neither process may find kernels outside the artifact
    env = {"TORCHINDUCTOR_CACHE_DIR": str(empty)}
    built = cli("build", str(project), "--provider", "cpu", "--json", env=env)
    assert built.returncode == 0, built.stderr
    [t] = json.loads(built.stdout)["targets"]
    assert t["target"]["id"] == "torch-cpu-fp32-default" and t["verification"]["passed"]
    manifest = json.loads((Path(t["path"]).parent / "manifest.json").read_text())
    assert manifest["info"]["compile_cache"]["misses"] >= 1  # compiled here, from nothing
    assert any(f.startswith("inductor/") and f.endswith(".so") for f in manifest["files"])  # kernels kept
    assert manifest["key_parts"]["device"]["cpu"]  # compiled kernels are keyed to this CPU
    name, x = x_for(project)
    np.savez(tmp_path / "in.npz", **{name: x})
    ran = cli("run", str(project), "-p", "cpu", "--file", str(tmp_path / "in.npz"), "--json",
              env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty2")})
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["runs_on"] == "PyTorch cpu fp32 default"
    assert doc["runtime"]["compile_cache"] == {"state": "hit", "hits": 1, "misses": 0}  # no recompilation
    assert doc["phases"]["compile_s"] > 0
    np.testing.assert_allclose(np.array(doc["outputs"]["probs"]["data"], dtype=np.float32),
                               torch_outputs(project, x), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_compiled_export_program_verified_and_warm_in_process(pt2: Path) -> None:
    project = with_providers(pt2, "  cpu: {runtime: torch, torch: {compile: max-autotune}}\n")
    [r] = build(load_config(project), "cpu", force=True).results
    assert r.artifact.manifest["verification"]["passed"]
    name, x = x_for(project)
    with gpux.load(project, provider="cpu") as session:
        got = session.run({name: x})["probs"]
        assert session.runner.details["compile_cache"]["state"] == "hit"
        assert (r.artifact.dir.parent / "cache" / r.artifact.dir.name / "inductor").is_dir()
    np.testing.assert_allclose(got, torch_outputs(project, x), rtol=1e-4, atol=1e-6)


def test_torch_cuda_falls_back_to_cpu_with_the_probe_reason(cnn: Path) -> None:
    avail = probe_torch("cuda")
    if avail.ok:
        pytest.skip("PyTorch has a CUDA device here")
    project = with_providers(cnn, "  cuda: {runtime: torch, torch: {precision: fp16}}\n  cpu: {runtime: torch}\n")
    with gpux.load(project, provider="cuda") as session:
        name, x = x_for(project)
        session.run({name: x})
        report = session.report()
    assert session.provider == "cpu" and report["fell_back"]
    first = report["attempts"][0]
    assert (first["provider"], first["stage"], first["ok"]) == ("cuda", "probe", False)
    assert first["reason"] == avail.reason and "PyTorch" in first["reason"]
    if avail.status == "not installed":  # a CPU-only PyTorch: the fix names the CUDA wheel index
        assert "download.pytorch.org/whl/cu" in (first["fix"] or "")


def test_compile_auto_is_eager_everywhere(cnn: Path) -> None:
    """Measured on an H200, torch.compile's default mode ran a small CNN at 0.5-0.6x eager (docs/benchmarks.md):
    compiling is asked for, or found by `gpux tune`, never the default."""
    project = load_config(with_providers(cnn, "  cuda: {runtime: torch}\n  rocm: {runtime: torch, device_id: 1}\n"
                                              "  cpu: {runtime: torch}\n  mps: {torch: {precision: fp16}}\n"))
    ids = {p: targets(project, p)[0] for p in ("cuda", "rocm", "cpu", "mps")}
    assert {p: t.id for p, t in ids.items()} == {
        "cuda": "torch-cuda-fp32-eager", "rocm": "torch-rocm-fp32-eager", "cpu": "torch-cpu-fp32-eager",
        "mps": "torch-mps-fp16-eager"}
    assert ids["rocm"].options["device_id"] == 1
    keys = keyed_targets(project, "cuda", {}, "x", resolve_shapes(project))
    assert keys[0].parts["versions"]["torch"] and "gpu" in keys[0].parts["device"]  # keyed by the GPU (none here)


@pytest.mark.parametrize(("hip", "arch", "capability"), [
    (None, "NVIDIA H200", "sm_90"),  # what a CUDA build's gcnArchName held on an H200: the name, not an arch
    ("6.4", "gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-"),
])
def test_gpu_artifacts_are_keyed_by_compute_capability_or_gfx_arch(
        cnn: Path, monkeypatch: pytest.MonkeyPatch, hip: str | None, arch: str, capability: str) -> None:
    from types import SimpleNamespace

    from gpux.runtimes.torch_module import device_identity

    props = SimpleNamespace(name="NVIDIA H200", major=9, minor=0, gcnArchName=arch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda _i: props)
    monkeypatch.setattr(torch.version, "hip", hip)
    project = load_config(with_providers(cnn, "  cuda: {runtime: torch}\n"))
    assert device_identity(targets(project, "cuda")[0]) == {"gpu": "NVIDIA H200", "capability": capability}


@pytest.mark.parametrize("which", ["cnn", "pt2"])
def test_compiled_module_drops_the_export_hooks_but_not_the_weights(which: str, request: pytest.FixtureRequest) -> None:
    """torch.compile gets the program's graph without `ExportedProgram.module()`'s per-call hooks (about 100 µs a
    call on an H200); the eager module, the fallback, keeps them."""
    from gpux.runtimes.torch_export import load_module
    from gpux.runtimes.torch_module import _to_program, _without_hooks

    project = request.getfixturevalue(which)
    _, x = x_for(project)
    if which == "cnn":
        module = _to_program(load_module(project / "model.pt", "torchscript"), (torch.from_numpy(x),))
    else:
        module = load_module(project / "model.pt2", "torch_export")
    assert module._forward_pre_hooks  # what torch.export attaches (the input-constraint check among them)
    bare = _without_hooks(module)
    assert not bare._forward_pre_hooks and not bare._forward_hooks and module._forward_pre_hooks
    assert {n: p.data_ptr() for n, p in bare.named_parameters()} == \
        {n: p.data_ptr() for n, p in module.named_parameters()}  # the same weights, not a copy
    with torch.inference_mode():
        assert torch.equal(bare(torch.from_numpy(x)), module(torch.from_numpy(x)))
    plain = torch.nn.Linear(2, 2)
    assert _without_hooks(plain) is plain


def test_onnx_source_with_runtime_torch_is_a_located_config_error(mlp_project: Path) -> None:
    write(mlp_project / "gpux.yml", (mlp_project / "gpux.yml").read_text() + "providers:\n  cpu:\n    runtime: torch\n")
    with pytest.raises(ConfigError) as exc:
        load_config(mlp_project)
    [problem] = exc.value.problems
    assert problem.field == "providers.cpu.runtime" and problem.line == 13
    assert "ONNX" in problem.message and "runtime: onnxruntime" in problem.message


@pytest.mark.parametrize(("block", "says"), [
    ("cuda: {runtime: torch, torch: {compile: reduce-overhead, cuda_graphs: true}}", "implied by compile"),
    ("cpu: {runtime: torch, torch: {compile: reduce-overhead}}", "only valid on cuda and rocm"),
    ("cpu: {torch: {compile: default}}", "torch is only valid with runtime: torch"),
    ("cpu: {runtime: torch, precision: int8}", "set torch.precision"),
    ("mps: {runtime: onnxruntime}", "runtime"),
])
def test_torch_option_mistakes_are_config_errors(mlp_project: Path, block: str, says: str) -> None:
    text = (mlp_project / "gpux.yml").read_text().replace("model.onnx", "model.pt")
    (mlp_project / "model.pt").write_bytes(b"")
    write(mlp_project / "gpux.yml", text + f"providers:\n  {block}\n")
    with pytest.raises(ConfigError) as exc:
        load_config(mlp_project)
    assert says in str(exc.value)


GPU_CASES = [pytest.param(device, opts, marks=pytest.mark.hardware(f"torch:{device}"), id=f"{device}-{opts}")
             for device, cases in {
                 "cuda": ["{compile: off}", "{compile: off, cuda_graphs: true}", "{compile: default}",
                          "{compile: default, cuda_graphs: true}", "{compile: reduce-overhead, precision: fp16}",
                          "{precision: bf16, channels_last: true}"],
                 "rocm": ["{compile: off}", "{compile: default, precision: fp16}"],
                 "mps": ["{compile: off}", "{precision: fp16}"]}.items() for opts in cases]


@pytest.mark.parametrize(("device", "opts"), GPU_CASES)
def test_torch_on_a_gpu(cnn: Path, device: str, opts: str) -> None:
    project = with_providers(cnn, f"  {device}: {{runtime: torch, torch: {opts}}}\n")
    [r] = build(load_config(project), device).results
    assert r.artifact.manifest["verification"]["passed"]
    name, x = x_for(project)
    with gpux.load(project, provider=device, strict=True) as session:
        got = session.run({name: x})["probs"]
        assert session.used.startswith(f"PyTorch {'cuda:0' if device != 'mps' else 'mps'}")
        compiled = any(f"compile: {mode}" in opts for mode in ("default", "reduce-overhead", "max-autotune"))
        if compiled and device != "mps":  # compile: auto (the default) is eager on every device
            assert session.runner.details["compile_cache"]["state"] == "hit"
        else:
            assert "compile_cache" not in session.runner.details
    np.testing.assert_allclose(got, torch_outputs(project, x), atol=2e-2)


def test_channels_last_on_cpu_is_verified(cnn: Path) -> None:
    project = with_providers(cnn, "  cpu: {runtime: torch, torch: {channels_last: true}}\n")
    [r] = build(load_config(project), "cpu").results
    assert r.artifact.manifest["verification"]["passed"]
    assert r.target.options["channels_last"] is True


def test_benchmark_all_adds_torch_rows_per_device(pt2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpux.bench import command as benchmark
    from gpux.bench import protocol as bench
    from gpux.providers import BUILTIN_ROWS

    cpu = BUILTIN_ROWS["cpu"]  # no compiles here: eager fp32 and bf16 rows
    monkeypatch.setitem(BUILTIN_ROWS, "cpu", dataclasses.replace(
        cpu, torch=dataclasses.replace(cpu.torch, variants=(("off", "fp32"), ("off", "bf16")))))
    project = load_config(pt2)
    protocol = bench.Protocol(warmup=1, warmup_seconds=0, runs=5, seconds=0, concurrency=1, batch=1)
    rows = benchmark.torch_rows(project, benchmark.Rows(protocol=protocol, shapes={}, log=lambda _m: None))
    by = {(r["provider"], r["precision"]): r for r in rows}
    assert by[("cpu", "fp32 (torch eager)")]["status"] == "ok"
    assert by[("cpu", "fp32 (torch eager)")]["runs_on"] == "PyTorch cpu fp32 eager"
    assert by[("cpu", "bf16 (torch eager)")]["accuracy"]["min_cosine"] > 0.99
    if not probe_torch("cuda").ok:
        assert by[("cuda", "torch")]["status"] == "unavailable" and by[("cuda", "torch")]["error"]


@pytest.mark.parametrize(("provider", "index", "reuse"), [("cpu", "cpu", True), ("cuda", "cu", False),
                                                          ("rocm", "rocm", False)])
def test_package_installs_torch_from_the_backend_wheel_index(cnn: Path, provider: str, index: str,
                                                             reuse: bool) -> None:
    from gpux.deploy.image import image_row, plan_image
    from gpux.deploy.package import host_key_parts

    project = load_config(with_providers(cnn, f"  {provider}: {{runtime: torch}}\n"))
    row = image_row(project, provider)
    parts = host_key_parts(project, row.host_build)
    plan = plan_image(project, provider, parts)
    text = plan.dockerfile()
    version = torch.__version__.split("+")[0]
    line = next(x for x in text.splitlines() if "--index-url" in x)
    assert f"https://download.pytorch.org/whl/{index}" in line and f"torch=={version}" in line
    assert not any(r.startswith("torch") or r.startswith("onnxruntime") for r in plan.requirements)
    assert plan.reuse == reuse and ("RUN gpux build /model --provider cpu" in text) == reuse
    assert (plan.run_line().startswith("docker run --rm --gpus all")) == (provider == "cuda")


def test_package_refuses_mps(cnn: Path) -> None:
    from gpux.deploy.image import choose_provider
    from gpux.errors import UsageError

    with pytest.raises(UsageError, match="macOS"):
        choose_provider(load_config(cnn), "mps")


def test_inspect_shows_the_torch_runtime_and_its_artifact(pt2: Path) -> None:
    project = with_providers(pt2, "  cpu: {runtime: torch}\n")
    build(load_config(project), "cpu")
    out = cli("inspect", str(project), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    cpu = next(p for p in doc["providers"] if p["provider"] == "cpu")
    assert cpu["runtime"] == "torch" and cpu["status"] == "ok" and "PyTorch" in cpu["reason"]
    mps = next(p for p in doc["providers"] if p["provider"] == "mps")
    assert mps["runtime"] == "torch" and (mps["status"] == "no device" or sys.platform == "darwin")
    art = next(a for a in doc["artifacts"] if a["id"] == "torch-cpu-fp32-eager")
    assert art["state"] == "current" and art["versions"]["torch"] == torch.__version__
