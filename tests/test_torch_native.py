"""PyTorch run natively from the command line: `gpux run` compiling on first use (no `gpux build` before it),
compiling that fails on this machine running eager with one line saying why, `gpux tune` trying the torch
runtime's own options, and the torch_native example built from inside its folder and run by name."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpux.bench.tune import TuneRequest, candidates
from gpux.config.load import load_config
from gpux.plan.lock import LOCK_NAME

from .conftest import ROOT
from .conftest import gpux as cli
from .test_torch_runtime import with_providers
from .torch_projects import make_mlp_project, torch_outputs

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
COMPILED = "  cpu: {runtime: torch, torch: {compile: default}}\n"


def run_json(project: Path, x: np.ndarray, tmp_path: Path, env: dict[str, str]) -> tuple[dict, str]:
    """`gpux run PROJECT -p cpu --file x.npz --json` in a fresh process: its document and its stderr."""
    np.savez(tmp_path / "x.npz", x=x)
    ran = cli("run", str(project), "-p", "cpu", "--file", str(tmp_path / "x.npz"), "--json", env=env)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout), ran.stderr


@pytest.mark.slow
def test_run_compiles_on_first_use_at_sizes_other_than_the_build(tmp_path: Path) -> None:
    """No `gpux build` first: `run` builds the compiled artifact, then verifies it on the inputs in hand,
    whose batch differs from the sizes compiled at build, so Inductor compiles again in the same process.
    That compile once pointed at precompiled headers inside the build step's deleted scratch folder."""
    project = with_providers(make_mlp_project(tmp_path / "mlp", "first-use"), COMPILED)
    x = np.random.default_rng(3).standard_normal((5, 12)).astype(np.float32)
    doc, err = run_json(project, x, tmp_path, {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    assert doc["runs_on"] == "PyTorch cpu fp32 default", err
    assert "compile_failed" not in doc["runtime"] and "warning" not in err
    np.testing.assert_allclose(np.array(doc["outputs"]["probs"]["data"], dtype=np.float32), torch_outputs(project, x),
                               rtol=1e-4, atol=1e-6)


def test_compiling_that_fails_here_runs_eager_with_one_line(tmp_path: Path) -> None:
    """No working C++ compiler: the build says so in one warning line and the artifact runs (and is verified)
    eager; a later `run` does not try to compile again."""
    project = with_providers(make_mlp_project(tmp_path / "mlp", "no-compiler"), COMPILED)
    x = np.random.default_rng(4).standard_normal((2, 12)).astype(np.float32)
    env = {"CXX": str(tmp_path / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    doc, err = run_json(project, x, tmp_path, env)
    assert "Traceback" not in err
    [line] = [ln for ln in err.splitlines() if "torch.compile" in ln]
    assert line.startswith("warning: torch.compile (default) failed here, running eager instead: InductorError: "
                           "InvalidCxxCompiler: No working C++ compiler"), line
    assert doc["runs_on"] == "PyTorch cpu fp32 eager"
    assert doc["runtime"]["compile_failed"].startswith("InductorError: InvalidCxxCompiler")
    assert "compile_s" not in doc["phases"]
    np.testing.assert_allclose(np.array(doc["outputs"]["probs"]["data"], dtype=np.float32), torch_outputs(project, x),
                               rtol=1e-6, atol=1e-7)
    again, err = run_json(project, x, tmp_path, env)
    assert again["runs_on"] == "PyTorch cpu fp32 eager" and "torch.compile" not in err
    assert again["runtime"]["compile_failed"] == doc["runtime"]["compile_failed"]


@pytest.mark.slow
def test_tune_with_runtime_torch_tries_and_locks_torch_options_only(tmp_path: Path) -> None:
    """ONNX Runtime's optimization levels (an error with `runtime: torch`) are no candidates: the cpu row's torch
    variants are, and the lock holds one that `run` applies."""
    project = with_providers(make_mlp_project(tmp_path / "mlp", "tune-torch"), "  cpu: {runtime: torch}\n")
    rows = candidates(load_config(project), TuneRequest(target=str(project), providers=("cpu",)))
    assert [(o.precision, o.options) for o in rows] == [
        ("fp32", {"torch": {"compile": "off", "precision": "fp32"}}),
        ("fp32", {"torch": {"compile": "default", "precision": "fp32"}})]
    r = cli("tune", str(project), "--providers", "cpu", "--seconds", "0.2")
    assert r.returncode == 0, r.stderr
    assert "torch.compile=off, torch.precision=fp32" in r.stdout  # a nested block's fields, one by one
    lock = json.loads((project / LOCK_NAME).read_text())
    assert [(c["options"], c["status"]) for c in lock["candidates"]] == [(o.options, "ok") for o in rows]
    assert lock["choice"]["provider"] == "cpu" and lock["choice"]["options"] in [o.options for o in rows]
    mode = lock["choice"]["options"]["torch"]["compile"]
    x = {"x": np.linspace(-1, 1, 12, dtype=np.float32).reshape(1, 12).tolist()}
    ran = cli("run", str(project), "--input", json.dumps(x), "--json")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["request_source"] == LOCK_NAME
    assert doc["runs_on"] == f"PyTorch cpu fp32 {'eager' if mode == 'off' else mode}"  # the locked torch options


# ---- examples/torch_native --------------------------------------------------------------------------
@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of examples/torch_native with the model its make_model.py writes."""
    folder = tmp_path / "torch_native"
    shutil.copytree(ROOT / "examples" / "torch_native", folder)
    runpy.run_path(str(folder / "make_model.py"), run_name="torch_native_model")["make"](folder / "model.pt2")
    return folder


def build_and_run_example(folder: Path, build_target: str) -> dict:
    built = cli("build", build_target, "--json", cwd=folder)
    assert built.returncode == 0, built.stderr
    [t] = json.loads(built.stdout)["targets"]
    assert t["target"]["id"] == "torch-cpu-fp32-eager" and t["verification"]["passed"]  # PyTorch, no ONNX
    features = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    ran = cli("run", "torch-native", "--input", json.dumps({"features": features.tolist()}), "--json", cwd=folder)
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["runs_on"] == "PyTorch cpu fp32 eager"
    got = np.array(doc["outputs"]["probs"]["data"], dtype=np.float32)
    np.testing.assert_allclose(got, torch_outputs(folder, features), rtol=1e-6, atol=1e-7)
    return doc


def test_example_builds_by_path_and_runs_by_name(example: Path) -> None:
    doc = build_and_run_example(example, str(example))
    assert doc["outputs"]["probs"]["shape"] == [2, 3]


def test_example_builds_from_inside_its_folder(example: Path) -> None:
    build_and_run_example(example, ".")
