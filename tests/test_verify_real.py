"""Verification that checks what runs: per-output-kind metrics, NaN agreement, declared shapes and real
samples, int8 on real data, OpenVINO's execution precision, and no files outside the store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpux.artifacts.build import build
from gpux.config.load import load_config
from gpux.errors import VerificationFailed
from gpux.quality.metrics import compare, tolerances

from .conftest import gpux as cli
from .conftest import rewrite_in_place, write


def save(folder: Path, nodes: list, inputs: list, outputs: list, inits: list | None = None, yml: str = "") -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"))
    write(folder / "gpux.yml", "name: m\nmodel: {source: model.onnx}\n" + yml)
    return folder


def vi(name: str, shape: list, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_dense_outputs_are_not_judged_by_top1_and_classifications_are() -> None:
    rng = np.random.default_rng(0)
    ref = rng.random((1, 1, 48, 64)).astype(np.float32)  # a probability map: argmax along W is meaningless
    got = ref + rng.normal(0, 1e-6, ref.shape).astype(np.float32)
    tol = tolerances("fp32", load_config_stub())
    v = compare(["map"], [[ref]], [[got]], "fp32", tol)
    assert v.passed and v.outputs["map"].get("top1") is None and v.outputs["map"]["within"] == 1.0
    scores = np.array([[0.5, 0.52, 0.1]], np.float32)
    swapped = np.array([[0.52, 0.5, 0.1]], np.float32)
    v = compare(["probs"], [[scores]], [[swapped]], "fp32", tol, classes={"probs"})
    assert not v.passed and v.outputs["probs"]["top1"] == 0.0
    tied = np.array([[0.5, 0.5 + 1e-7, 0.1]], np.float32)  # a reference tie has no top-1 to agree with
    v = compare(["probs"], [[tied]], [[tied[:, [1, 0, 2]]]], "fp32", tol, classes={"probs"})
    assert v.passed and "top1" not in v.outputs["probs"]


def load_config_stub():
    from gpux.config.schema import Verify

    return Verify()


def test_nan_and_inf_in_the_same_places_agree() -> None:
    ref = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    tol = tolerances("fp32", load_config_stub())
    assert compare(["y"], [[ref]], [[ref.copy()]], "fp32", tol).passed
    other = np.array([np.nan, np.inf, np.inf, 1.0], np.float32)
    v = compare(["y"], [[ref]], [[other]], "fp32", tol)
    assert not v.passed and "NaN/inf in only one" in v.failures[0]


def test_log_of_random_negatives_builds_on_cpu_and_openvino(tmp_path: Path) -> None:
    save(tmp_path, [helper.make_node("Log", ["x"], ["y"])], [vi("x", ["n", 16])], [vi("y", ["n", 16])])
    for provider in ("cpu", "openvino"):
        r = cli("build", str(tmp_path), "-p", provider, "--json")
        assert r.returncode == 0, (provider, r.stderr)


def reshape_project(folder: Path, yml: str = "") -> Path:
    """Reshape to [2, -1]: valid only for an even number of rows, so batch=1 generated data fails."""
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    return save(folder, [helper.make_node("Reshape", ["x", "shape"], ["y"])], [vi("x", ["n", 3])],
                [vi("y", [2, "m"])], [shape], yml)


def test_shapes_declared_once_drive_verification_and_openvino(tmp_path: Path) -> None:
    folder = reshape_project(tmp_path / "a", "shapes:\n  n: {min: 2, opt: 4, max: 8}\n")
    for provider in ("cpu", "openvino"):
        r = cli("build", str(folder), "-p", provider, "--json")
        assert r.returncode == 0, (provider, r.stderr)
    doc = json.loads(r.stdout)
    manifest = json.loads((Path(doc["targets"][-1]["path"]).parent / "manifest.json").read_text())
    assert manifest["info"]["shapes"] == {"x": "[2..8,3]"}
    folder = reshape_project(tmp_path / "b")
    unsized = cli("build", str(folder), "-p", "cpu")  # fp32 runs what the model runs: built, said unverified
    assert unsized.returncode == 0 and "UNVERIFIED at fp32 (the model rejects generated inputs" in unsized.stdout
    assert cli("build", str(folder), "-p", "cpu", "--strict").returncode == 1
    r = cli("build", str(folder), "-p", "cpu", "--shape", "n=2")
    assert r.returncode == 0, r.stderr


def matmul_project(folder: Path, yml: str) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32), "w")
    return save(folder, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["batch", 64])],
                [vi("y", ["batch", 32])], [w], yml)


INT8 = "providers:\n  cpu: {precision: int8, quantization: static}\n"


def test_int8_verified_on_declared_real_samples_fails_where_random_data_passes(tmp_path: Path) -> None:
    # calibrated on N(0, 1) inputs; real inputs spread 30x wider are clipped by the int8 activation range
    folder = matmul_project(tmp_path, INT8)
    passed = build(load_config(folder), "cpu").final.artifact.manifest["verification"]
    assert passed["status"] == "unverified" and passed["data"] == "generated"  # int8 on generated data only
    real = np.random.default_rng(7).normal(0, 30, (4, 1, 64)).astype(np.float32)
    np.savez(folder / "real.npz", x=real)
    (folder / "gpux.yml").write_text((folder / "gpux.yml").read_text() + "verify: {data: real.npz}\n")
    with pytest.raises(VerificationFailed) as info:
        build(load_config(folder), "cpu")
    assert "cosine" in info.value.message


def test_int8_that_quantized_nothing_is_said_and_fails_under_strict(tmp_path: Path) -> None:
    folder = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 8])], [vi("y", [1, 8])],
                  yml="providers:\n  cpu: {precision: int8}\n")
    r = cli("build", str(folder), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # the fp32 artifact it makes is built instead, and said
    assert any("int8 did nothing useful" in w for w in doc["warnings"]), doc["warnings"]
    assert doc["targets"][0]["target"]["precision"] == "fp32"
    r = cli("build", str(folder), "-p", "cpu", "--strict", "--force")
    assert r.returncode != 0 and "no operator was quantized" in r.stderr and "Traceback" not in r.stderr


def test_no_files_outside_the_store(tmp_path: Path) -> None:
    folder = matmul_project(tmp_path / "p", INT8)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = cli("build", str(folder), "-p", "cpu", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in folder.iterdir()) == [".gpux", "gpux.yml", "model.onnx"]
    assert not list((folder / ".gpux" / ".tmp").glob("*/*")), "temp folders are removed"


def test_openvino_fp32_executes_f32_and_bf16_says_bf16_everywhere(tmp_path: Path) -> None:
    folder = matmul_project(tmp_path, "")
    x = np.random.default_rng(3).standard_normal((2, 64)).astype(np.float32)
    w = numpy_helper.to_array(onnx.load(str(folder / "model.onnx")).graph.initializer[0])
    feed = json.dumps({"x": x.tolist()})
    r = cli("run", str(folder), "-p", "openvino", "--strict", "--json", "--input", feed)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["precision"] == "fp32" and doc["execution_precision"] == "f32"
    np.testing.assert_allclose(np.array(doc["outputs"]["y"]["data"]), x @ w, rtol=1e-4, atol=1e-4)

    # bf16 of continuous values is judged on real rows (generated ones leave it unverified, which --strict refuses)
    np.savez(folder / "rows.npz", x=np.random.default_rng(4).standard_normal((300, 64)).astype(np.float32))
    (folder / "gpux.yml").write_text((folder / "gpux.yml").read_text() + "providers:\n  openvino: {precision: bf16}\n"
                                     "verify: {data: rows.npz}\n")
    r = cli("build", str(folder), "-p", "openvino", "--json")
    assert r.returncode == 0, r.stderr
    target = json.loads(r.stdout)["targets"][0]
    assert target["target"]["id"] == "openvino-ir-bf16" and target["verification"]["precision"] == "bf16"
    r = cli("run", str(folder), "-p", "openvino", "--strict", "--json", "--input", feed)
    doc = json.loads(r.stdout)
    import openvino as ov  # a CPU without bf16 units executes f32 whatever the hint: the report says so

    runs = "bf16" if "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES") else "f32"
    assert doc["precision"] == "bf16" and doc["execution_precision"] == runs
    r = cli("inspect", str(folder))
    assert "openvino-ir-bf16" in r.stdout and "at bf16" in r.stdout


def test_a_failed_conversion_is_remembered_for_this_model_and_runtime(tmp_path: Path) -> None:
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_int64s=[1, 2],
                            values_int64s=[10, 20], default_int64=-1)
    graph = helper.make_graph([node], "g", [vi("x", [3], TensorProto.INT64)], [vi("y", [3], TensorProto.INT64)])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17),
                                                                helper.make_opsetid("ai.onnx.ml", 2)])
    onnx.save(model, str(tmp_path / "model.onnx"))
    write(tmp_path / "gpux.yml", "name: enc\nmodel: {source: model.onnx}\n")
    first = cli("build", str(tmp_path), "-p", "openvino", "--strict")
    assert first.returncode == 1 and "OpenVINO cannot convert" in first.stderr, first.stderr
    again = cli("build", str(tmp_path), "-p", "openvino", "--strict")
    assert again.returncode == 1 and "remembered from an earlier build" in again.stderr
    assert "building openvino-ir" not in again.stderr
    forced = cli("build", str(tmp_path), "-p", "openvino", "--strict", "--force")
    assert forced.returncode == 1 and "remembered" not in forced.stderr
    r = cli("run", str(tmp_path), "-p", "openvino", "--json", "--input", json.dumps({"x": [1, 2, 3]}))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["outputs"]["y"]["data"] == [10, 20, -1]
    assert "remembered" in doc["attempts"][0]["reason"]


def conv_head(folder: Path, out_channels: int, scale: float, activation: str) -> Path:
    """A small conv net: images [1, 3, 32, 32] -> [1, C, 256] (a YOLO-style head of boxes and scores
    scaled to pixels) or [1, 1, 32, 32] probability map."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    w2 = numpy_helper.from_array(rng.standard_normal((out_channels, 16, 1, 1)).astype(np.float32) * 0.3, "w2")
    k = numpy_helper.from_array(np.array([scale], np.float32), "k")
    nodes = [helper.make_node("Conv", ["images", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["h"]),
             helper.make_node(activation, ["h"], ["a"]),
             helper.make_node("Mul", ["a", "k"], ["m"])]
    inits = [w, w2, k]
    if out_channels > 1:  # YOLO-style: [1, C, H*W]
        shape = numpy_helper.from_array(np.array([1, out_channels, -1], np.int64), "shape")
        inits.append(shape)
        nodes.append(helper.make_node("MaxPool", ["m"], ["p"], kernel_shape=[2, 2], strides=[2, 2]))
        nodes.append(helper.make_node("Reshape", ["p", "shape"], ["output0"]))
        out = vi("output0", [1, out_channels, 256])
    else:
        nodes.append(helper.make_node("Identity", ["m"], ["output0"]))
        out = vi("output0", [1, 1, 32, 32])
    return save(folder, nodes, [vi("images", [1, 3, 32, 32])], [out], inits)


@pytest.mark.parametrize("kind", ["detector", "dense-map"])
def test_detector_and_dense_map_build_and_run_with_a_default_config(kind: str, tmp_path: Path) -> None:
    folder = conv_head(tmp_path, 84, 640.0, "Sigmoid") if kind == "detector" else \
        conv_head(tmp_path, 1, 1.0, "Sigmoid")
    x = np.random.default_rng(2).random((1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "x.npz", images=x)
    results = {}
    for provider in ("cpu", "openvino"):
        r = cli("run", str(folder), "-p", provider, "--strict", "--json", "--file", str(tmp_path / "x.npz"))
        assert r.returncode == 0, (provider, r.stderr)
        results[provider] = np.array(json.loads(r.stdout)["outputs"]["output0"]["data"], np.float32)
        assert cli("build", str(folder), "-p", provider).returncode == 0  # generated data verifies too
    # OpenVINO at its default (fp32 declared -> f32 execution) matches ONNX Runtime within fp32 tolerance
    np.testing.assert_allclose(results["openvino"], results["cpu"], rtol=1e-4, atol=1e-3)


def test_shapes_ranges_make_tensorrt_profiles(tmp_path: Path) -> None:
    from gpux.model.io import Tensor
    from gpux.runtimes.tensorrt import trt_profiles

    save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["batch", "seq"])], [vi("y", ["batch", "seq"])],
         yml="shapes:\n  batch: {min: 1, opt: 4, max: 16}\n  seq: 128\n")
    project = load_config(tmp_path)
    got = trt_profiles(project, project.config.providers.tensorrt, {"x": Tensor("x", "float32", ("batch", "seq"))})
    assert got == {"trt_profile_min_shapes": "x:1x128", "trt_profile_opt_shapes": "x:4x128",
                   "trt_profile_max_shapes": "x:16x128"}


def test_fp16_of_an_already_quantized_model_names_the_conversion(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    matmul_project(tmp_path, "providers:\n  cpu: {precision: fp16}\n")
    (tmp_path / "model.onnx").rename(tmp_path / "fp32.onnx")
    quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "model.onnx"), weight_type=QuantType.QInt8)
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "fp16 conversion failed" in r.stderr and "keep precision: fp32" in r.stderr


def test_run_json_with_an_output_file_keeps_values_in_the_file(tmp_path: Path) -> None:
    folder = matmul_project(tmp_path, "")
    out = tmp_path / "out.npz"
    r = cli("run", str(folder), "-p", "cpu", "--json", "-o", str(out), "--input", json.dumps({"x": [[0.5] * 64]}))
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)["outputs"]["y"]
    assert entry == {"dtype": "float32", "shape": [1, 32], "file": str(out)}
    assert np.load(out)["y"].shape == (1, 32)


def test_openvino_int8_reports_what_it_quantized(tmp_path: Path) -> None:
    folder = matmul_project(tmp_path / "mm", "providers:\n  openvino: {precision: int8, int8_mode: weights}\n")
    r = cli("build", str(folder), "-p", "openvino", "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((Path(json.loads(r.stdout)["targets"][0]["path"]).parent / "manifest.json").read_text())
    assert manifest["info"]["quantized_ops"] > 0 and "int8_warning" not in manifest["info"]
    relu = save(tmp_path / "relu", [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 8])], [vi("y", [1, 8])],
                yml="providers:\n  openvino: {precision: int8, int8_mode: weights}\n")
    r = cli("build", str(relu), "-p", "openvino")
    assert r.returncode == 0 and "no operator was quantized" in r.stderr, r.stderr
    r = cli("build", str(relu), "-p", "openvino", "--strict", "--force")
    assert r.returncode == 1 and "no operator was quantized" in r.stderr


def test_a_gpux_bug_inside_a_build_is_exit_70_with_its_traceback_and_never_remembered(
        mlp_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A TypeError raised in gpux's own code while building is a bug: exit 70, its traceback (the original, not a
    wrapper), and the next build tries again instead of replaying it as the model's failure."""
    from gpux.cli.main import main
    from gpux.errors import raised_by_gpux
    from gpux.runtimes import onnxruntime as ort_runtime

    monkeypatch.setattr(ort_runtime, "has_external_data", None)  # calling it is a TypeError inside gpux's optimize()
    with pytest.raises(SystemExit) as done:
        main(["build", str(mlp_project), "-p", "cpu", "--force"])
    err = capsys.readouterr().err
    assert done.value.code == 70, err
    assert "TypeError: 'NoneType' object is not callable" in err and "in optimize" in err  # where gpux failed
    monkeypatch.undo()
    with pytest.raises(SystemExit) as again:
        main(["build", str(mlp_project), "-p", "cpu"])
    assert again.value.code == 0 and "remembered" not in capsys.readouterr().err
    try:
        import onnxruntime

        onnxruntime.InferenceSession(b"not a model")
    except Exception as exc:  # the runtime's own error is not gpux's
        assert not raised_by_gpux(exc)


def test_a_lossless_build_of_a_model_that_rejects_generated_inputs_is_built_unverified(tmp_path: Path) -> None:
    """silero VAD from its wheel (a symbolic sample count, an integer rate input): the reference cannot run the
    inputs gpux generates, so fp32 is built and said unverified (refused by --strict); a real input runs."""
    import shutil

    from .trained import package_file

    shutil.copy(package_file("silero_vad", "data", "silero_vad.onnx"), tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", "name: vad\nmodel: {source: model.onnx}\n")
    r = cli("build", str(tmp_path), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["targets"][-1]["verification"]
    assert v["status"] == "unverified" and "rejects the generated verification inputs" in v["unverified"]
    strict = cli("build", str(tmp_path), "-p", "cpu", "--strict")
    assert strict.returncode == 1 and "unverified" in strict.stderr
    np.savez(tmp_path / "real.npz", input=np.zeros((1, 512), np.float32), state=np.zeros((2, 1, 128), np.float32),
             sr=np.array(16000, np.int64))
    ran = cli("run", str(tmp_path), "-p", "cpu", "--file", str(tmp_path / "real.npz"), "--json")
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(ran.stdout)
    assert doc["verification"]["status"] == "unverified" and doc["outputs"]["output"]["shape"] == [1, 1]


@pytest.mark.parametrize("kept", [True, False])
def test_candidates_judged_on_the_same_rows_in_a_tune_run_the_reference_once(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             kept: bool) -> None:
    from contextlib import nullcontext

    from gpux.quality import references, verify

    calls: list[int] = []
    real = verify.reference_outputs
    monkeypatch.setattr(verify, "reference_outputs", lambda *a: calls.append(1) or real(*a))
    cache = references.References()
    monkeypatch.setattr(verify, "REFERENCES", cache)
    folder = matmul_project(tmp_path, "verify: {data: real.npz}\n")
    np.savez(folder / "real.npz", x=np.random.default_rng(7).normal(0, 1, (6, 1, 64)).astype(np.float32))
    yml = (folder / "gpux.yml").read_text()
    digests = set()
    with cache.kept() if kept else nullcontext():  # as tune's ladder runs; a build alone keeps nothing
        for precision in ("fp32", "fp16"):  # two artifacts, each verified on the same six rows
            (folder / "gpux.yml").write_text(yml + f"providers:\n  cpu: {{precision: {precision}}}\n")
            doc = build(load_config(folder), "cpu").final.artifact.manifest["verification"]
            assert doc["data"] == "verify.data" and doc["precision"] == precision and not doc["failures"], doc
            digests.add(doc["data_digest"])
        assert len(digests) == 1 and len(calls) == (1 if kept else 2)
        w = numpy_helper.from_array(np.full((64, 32), 1e4, np.float32), "w")  # another model of the same size
        other = save(tmp_path / "other", [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", ["batch", 64])],
                     [vi("y", ["batch", 32])], [w])
        rewrite_in_place(folder / "model.onnx", (other / "model.onnx").read_bytes())  # same size, same mtime
        build(load_config(folder), "cpu")
        assert len(calls) == (2 if kept else 3), "a model rewritten in place is judged against its own reference"
    assert cache.get(cache.key(folder / "model.onnx", doc["data_digest"])) is None, "nothing is kept after a tune"


def test_declared_data_that_does_not_fit_names_gpux_yml_the_field_and_the_file(mlp_project: Path) -> None:
    np.savez(mlp_project / "rows.npz", y=np.zeros((4, 8), np.float32))
    cfg = mlp_project / "gpux.yml"
    cfg.write_text(cfg.read_text() + "verify:\n  data: rows.npz\n")
    r = cli("build", str(mlp_project), "-p", "cpu")
    line = f"error: {cfg}: verify.data: {mlp_project / 'rows.npz'}: the model has no input 'y'; inputs: x"
    assert r.returncode == 3 and line in r.stderr and "Traceback" not in r.stderr, r.stderr
