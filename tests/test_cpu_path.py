"""The CPU path end to end on real ONNX Runtime: build → run → inspect, cache reuse, inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import gpux
from gpux.artifacts.build import build
from gpux.config.load import load_config
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
    assert m["target"]["kind"] == "optimize" and m["target"]["options"]["optimization"] == "basic"
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


# -- a new user's first hour: quiet success, honest selection ------------------------------------------------
def _auto(project: Path) -> None:
    yml = project / "gpux.yml"
    yml.write_text(yml.read_text().replace("backend: cpu", "backend: auto"))


def test_auto_build_and_run_on_this_machine_print_no_warning(mlp_project: Path) -> None:
    _auto(mlp_project)
    r = cli("build", str(mlp_project))
    assert r.returncode == 0, r.stderr
    assert "warning:" not in r.stderr
    [chosen] = [line for line in r.stderr.splitlines() if line.startswith("provider: auto → ")]
    assert "not on this machine: tensorrt, cuda" in chosen
    assert len(r.stdout.splitlines()) == 1, "one summary line per target, no progress lines"
    ran = cli("run", str(mlp_project), "--input", json.dumps({"x": [[0.5] * 8]}))
    assert ran.returncode == 0 and "warning:" not in ran.stderr and "skipped" not in ran.stderr, ran.stderr
    verbose = cli("build", str(mlp_project), "--force", "-v")
    assert "skipped tensorrt (probe)" in verbose.stderr and "warning:" not in verbose.stderr
    assert "verify " in verbose.stderr, "-v shows every progress line"


def test_a_provider_flag_is_not_remembered_by_the_next_command(mlp_project: Path) -> None:
    _auto(mlp_project)
    first = json.loads(cli("build", str(mlp_project), "--json").stdout)
    assert first["requested"]["source"] == "auto"
    other = "cpu" if first["provider"] != "cpu" else "openvino"
    assert cli("build", str(mlp_project), "--provider", other).returncode == 0
    x = json.dumps({"x": [[0.5] * 8]})
    assert json.loads(cli("run", str(mlp_project), "-p", other, "--input", x, "--json").stdout)["provider"] == other
    again = json.loads(cli("build", str(mlp_project), "--json").stdout)
    assert again["requested"]["source"] == "auto" and again["provider"] == first["provider"]
    run = json.loads(cli("run", str(mlp_project), "--input", x, "--json").stdout)
    assert run["request_source"] == "auto" and run["provider"] == first["provider"]


def test_small_things_a_new_user_meets(mlp_project: Path, tmp_path: Path) -> None:
    _auto(mlp_project)
    r = cli("build", str(mlp_project), "--debug")  # --debug after the subcommand, as well as before it
    assert r.returncode == 0, r.stderr
    big = json.dumps({"x": [[1e40] + [0.0] * 7]})
    r = cli("run", str(mlp_project), "-p", "cpu", "--input", big)
    assert r.returncode == 2 and "outside the range of float32" in r.stderr and "Warning" not in r.stderr
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "m.onnx").write_bytes((mlp_project / "model.onnx").read_bytes())
    r = cli("inspect", str(bare / "m.onnx"), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["config"] is None
    assert sorted(p.name for p in bare.iterdir()) == ["m.onnx"], "inspect only reads"
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text().replace("x: {dtype: float32", "x: {dtype: float"))
    assert cli("validate", str(yml), "--check-model").returncode == 0, "ONNX's name for float32"
    r = cli("schema", "--check", "-o", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "does not exist" in r.stderr


def test_unknown_name_lists_the_nearest_few(mlp_project: Path, tmp_path: Path) -> None:
    from gpux.config import known as index

    for i in range(30):
        index.remember(f"model-{i:02d}", mlp_project / "gpux.yml")
    index.remember("tiny-mlp", mlp_project / "gpux.yml")
    r = cli("run", "tiny-mpl", "--input", "{}", cwd=tmp_path)
    assert r.returncode == 3 and "of the 31 models built on this machine: tiny-mlp" in r.stderr
    assert "model-29" not in r.stderr


def test_prepared_path_checks_each_shape_once_and_matches_run(mlp_project: Path) -> None:
    with gpux.load(mlp_project, provider="cpu") as s:
        fast = s.prepared()
        for rows in (1, 3, 1):
            x = np.random.default_rng(rows).standard_normal((rows, 8)).astype(np.float32)
            [probs] = fast({"x": x})
            np.testing.assert_allclose(probs, s.run({"x": x})["probs"], rtol=1e-6)
        with pytest.raises(InputError, match="must already be a float32 array"):
            fast({"x": np.ones((2, 8))})  # float64: run(dict) would cast, the hot path does not
        with pytest.raises(InputError, match="dim 1 must be 8"):
            fast({"x": np.ones((2, 5), np.float32)})
        with pytest.raises(InputError, match="missing input x"):
            fast({})
