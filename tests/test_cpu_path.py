"""The CPU path end to end on real ONNX Runtime: build → run → inspect, cache reuse, inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import gpux
from gpux.build import build
from gpux.config import load_config
from gpux.errors import InputError, UsageError

from .conftest import gpux as cli
from .conftest import make_two_inputs, write


def reference(model: Path, feeds: dict) -> list:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_build_writes_optimized_onnx_and_manifest(mlp_project: Path) -> None:
    project = load_config(mlp_project)
    result = build(project, "cpu")
    art = result.final.artifact
    assert art.main.name == "model.onnx" and art.main.is_file()
    assert art.dir.parent == mlp_project / ".gpux" / "tiny-mlp"
    m = json.loads((art.dir / "manifest.json").read_text())
    assert m["target"]["step"] == "optimize" and m["target"]["options"]["optimization"] == "basic"
    assert m["files"]["model.onnx"]["size"] == art.main.stat().st_size
    assert m["key_parts"]["versions"]["onnxruntime"].startswith("onnxruntime ")
    assert m["verification"]["passed"] is True
    assert not result.final.cached
    again = build(load_config(mlp_project), "cpu")
    assert again.final.cached and again.final.artifact.dir == art.dir


def test_run_float32_from_json_cli(mlp_project: Path) -> None:
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    assert cli("build", str(mlp_project)).returncode == 0
    r = cli("run", "tiny-mlp", "--input", json.dumps({"x": x.tolist()}), "--json", cwd=mlp_project)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["runs_on"] == "CPUExecutionProvider"
    got = np.asarray(doc["outputs"]["probs"]["data"], dtype=np.float32)
    np.testing.assert_allclose(got, reference(mlp_project / "model.onnx", {"x": x})[0], rtol=1e-5)
    assert doc["outputs"]["probs"]["top"][0][0]["label"] in {"cat", "dog", "fox", "owl"}
    text = cli("run", str(mlp_project), "--input", json.dumps({"x": x.tolist()}))
    assert text.returncode == 0 and "probs: float32 [1, 4]" in text.stdout
    assert "ran cpu [CPUExecutionProvider]" in text.stderr


def test_run_by_name_from_anywhere_after_build(mlp_project: Path, tmp_path_factory) -> None:
    assert cli("build", str(mlp_project)).returncode == 0
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    r = cli("run", "tiny-mlp", "--input", json.dumps({"x": [[0.5] * 8, [1.0] * 8]}), "--json", cwd=elsewhere)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"]["probs"]["shape"] == [2, 4]
    unknown = cli("run", "tiny-mpl", "--input", "{}", cwd=elsewhere)
    assert unknown.returncode == 3
    assert "no model named 'tiny-mpl' (did you mean 'tiny-mlp'?)" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_outputs_to_npz_and_inputs_from_npz(mlp_project: Path) -> None:
    x = np.ones((3, 8), dtype=np.float64)  # cast to float32 by gpux
    np.savez(mlp_project / "in.npz", x=x)
    r = cli("run", str(mlp_project), "--file", str(mlp_project / "in.npz"), "--output",
            str(mlp_project / "out.npz"))
    assert r.returncode == 0, r.stderr
    out = np.load(mlp_project / "out.npz")["probs"]
    np.testing.assert_allclose(out, reference(mlp_project / "model.onnx", {"x": x.astype(np.float32)})[0],
                               rtol=1e-5)


def test_multi_input_int64_dynamic_dims(tmp_path: Path) -> None:
    make_two_inputs(tmp_path / "m.onnx")
    write(tmp_path / "gpux.yml", """\
        name: two
        model: {source: m.onnx}
        inputs:
          ids: {dtype: int64, shape: [batch, seq], range: [0, 10]}
          scale: {dtype: float32, shape: [batch, 1]}
        """)
    with gpux.load(tmp_path, provider="cpu") as s:
        out = s.run({"ids": [[1, 2, 3], [4, 5, 6]], "scale": [[1.0], [2.0]]})
        assert s.provider == "cpu" and s.used == "CPUExecutionProvider"
    ids = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    ref = reference(tmp_path / "m.onnx", {"ids": ids, "scale": np.array([[1.0], [2.0]], np.float32)})
    np.testing.assert_allclose(out["out"], ref[0], rtol=1e-6)


def test_bare_onnx_file_runs_without_config(tmp_path: Path) -> None:
    from .conftest import make_mlp

    make_mlp(tmp_path / "net.onnx")
    r = cli("run", str(tmp_path / "net.onnx"), "--provider", "cpu", "--input",
            json.dumps({"x": [[0.0] * 8]}), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"]["probs"]["shape"] == [1, 4]


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"y": [[1.0] * 8]}, "the model has no input 'y'"),
        ({}, "missing input x"),
        ({"x": [1.0] * 8}, "expects rank 2"),
        ({"x": [[1.0] * 7]}, "dim 1 must be 8"),
        ({"x": [["a"] * 8]}, "cannot be read as float32"),
    ],
)
def test_bad_inputs_are_clear(mlp_project: Path, inputs: dict, message: str) -> None:
    with gpux.load(mlp_project) as s, pytest.raises(InputError, match=message):
        s.run(inputs)


def test_bad_inputs_from_cli_exit_2_without_traceback(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--input", "{not json")
    assert r.returncode == 2 and "not valid JSON" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", str(mlp_project))
    assert r.returncode == 2 and "no inputs given" in r.stderr


def test_inspect_json_lists_io_providers_and_artifacts(mlp_project: Path) -> None:
    assert cli("build", str(mlp_project)).returncode == 0
    r = cli("inspect", str(mlp_project), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["inputs"] == [{"name": "x", "dtype": "float32", "shape": ["batch", 8]}]
    assert doc["opset"] == 17
    assert [p["provider"] for p in doc["providers"]] == \
        ["tensorrt", "cuda", "rocm", "coreml", "mps", "directml", "openvino", "cpu"]
    cpu = next(p for p in doc["providers"] if p["provider"] == "cpu")
    assert cpu["status"] == "ok"
    tensorrt = next(p for p in doc["providers"] if p["provider"] == "tensorrt")
    assert tensorrt["status"] != "ok" and tensorrt["fix"]
    assert doc["artifacts"][0]["state"] == "current"
    text = cli("inspect", str(mlp_project))
    assert "onnx-fp32-basic" in text.stdout and "current" in text.stdout


def test_unsupported_provider_request_is_rejected(mlp_project: Path) -> None:
    p = mlp_project / "gpux.yml"
    p.write_text(p.read_text().replace("backend: cpu", "backend: cpu\n  supported: [cpu, openvino]"))
    with pytest.raises(UsageError, match="not supported by model 'tiny-mlp'"):
        gpux.load(mlp_project, provider="cuda")


def test_external_data_models_build_run_and_missing_data_is_a_config_error(tmp_path: Path) -> None:
    import onnx

    from .conftest import make_mlp

    make_mlp(tmp_path / "src.onnx", features=64, hidden=64, classes=4)
    model = onnx.load(str(tmp_path / "src.onnx"))
    onnx.save_model(model, str(tmp_path / "model.onnx"), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)
    write(tmp_path / "gpux.yml", "name: ext\nmodel: {source: model.onnx}\n")
    x = json.dumps({"x": [[0.1] * 64]})
    r = cli("run", str(tmp_path), "-p", "cpu", "--input", x, "--json")
    assert r.returncode == 0, r.stderr
    ref = reference(tmp_path / "src.onnx", {"x": np.full((1, 64), 0.1, np.float32)})[0]
    np.testing.assert_allclose(json.loads(r.stdout)["outputs"]["probs"]["data"], ref, rtol=1e-5)
    (tmp_path / "weights.bin").rename(tmp_path / "moved.bin")
    for args in (("validate", "--check-model", str(tmp_path)), ("build", str(tmp_path), "-p", "cpu")):
        r = cli(*args)
        assert r.returncode == 3 and "external data file not found beside the model: weights.bin" in r.stderr + r.stdout
