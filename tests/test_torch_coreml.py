"""PyTorch sources on real torch, ONNX Runtime, OpenVINO and coremltools: TorchScript and torch.export
programs exported to ONNX and verified against PyTorch, Core ML packages built from them (prediction needs
macOS), and the fallback when Core ML cannot run here."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import gpux
from gpux.artifacts.build import build
from gpux.config.load import load_config
from gpux.errors import BuildFailed, ExitCode

from .conftest import ROOT, write
from .conftest import gpux as cli
from .torch_projects import make_cnn_project, make_mlp_project, torch_outputs

torch = pytest.importorskip("torch")
pytest.importorskip("coremltools")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")  # the test writes TorchScript


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("torch")
    return {"mlp": make_mlp_project(base / "mlp"), "cnn": make_cnn_project(base / "cnn")}


INPUT = {"mlp": ("x", (3, 12)), "cnn": ("image", (3, 3, 32, 32))}


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_torchscript_exports_and_runs_on_cpu_and_openvino(projects: dict[str, Path], name: str) -> None:
    project = projects[name]
    for provider in ("cpu", "openvino"):
        result = build(load_config(project), provider)
        export, final = result.results[0], result.final
        assert export.target.kind == "torch-export" and final.target.provider != "torch"
        for r in result.results:
            assert r.artifact.manifest["verification"]["passed"] is True, r.target.id
    info = export.artifact.manifest["info"]
    assert info["exporter"] == "torchscript" and info["opset"] == 17 and info["external_data"] is False
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(export.artifact.main))
    assert model.opset_import[0].version == 17 and model.ir_version <= 10
    inp, out = INPUT[name][0], ("probs",)
    assert [i.name for i in model.graph.input] == [inp] and tuple(o.name for o in model.graph.output) == out
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert model.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    ort.InferenceSession(str(export.artifact.main), providers=["CPUExecutionProvider"])

    # a batch of 3, not the size the export traced at: the batch dim really is dynamic
    x = np.random.default_rng(7).standard_normal(INPUT[name][1]).astype(np.float32)
    expected = torch_outputs(project, x)
    # the example keeps OpenVINO's default inference precision: bf16 on CPUs that have it
    atol = {"cpu": 1e-5, "openvino": 1e-5 if name == "mlp" else 5e-3}
    for provider in ("cpu", "openvino"):
        with gpux.load(project, provider=provider) as session:
            got = session.run({inp: x})["probs"]
            assert session.provider == provider
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=atol[provider])


def test_torch_export_program_exports_and_converts(tmp_path: Path) -> None:
    project = make_mlp_project(tmp_path / "ep", "torch-ep", kind="torch_export")
    result = build(load_config(project), "cpu")
    assert [r.target.kind for r in result.results] == ["torch-export", "optimize"]
    assert all(r.artifact.manifest["verification"]["passed"] for r in result.results)
    x = np.random.default_rng(3).standard_normal((4, 12)).astype(np.float32)
    with gpux.load(project, provider="cpu") as session:
        got = session.run(x=x)["probs"]
    np.testing.assert_allclose(got, torch_outputs(project, x), rtol=1e-4, atol=1e-5)

    package = build(load_config(project), "coreml").final  # the ExportedProgram, lowered to ATen
    info = package.artifact.manifest["info"]
    assert package.artifact.main.name == "model.mlpackage" and package.artifact.main.is_dir()
    assert info["source_format"] == "torch_export" and info["precision"] == "fp32"
    assert [i["name"] for i in info["inputs"]] == ["x"] and [o["name"] for o in info["outputs"]] == ["probs"]
    assert info["inputs"][0]["ranges"][0] == [1, 256]  # the program's own bound on batch, not RANGE_MAX
    assert info["ranges"] == {"batch": [1, 1, 256]}


def mil_dtypes(package: Path) -> set[str]:
    """The dtypes the compute ops of a saved ML Program produce, read back from the package itself."""
    import coremltools as ct
    from coremltools.proto import MIL_pb2

    spec = ct.utils.load_spec(str(package))
    main = spec.mlProgram.functions["main"]
    ops = main.block_specializations[main.opset].operations
    return {MIL_pb2.DataType.Name(o.type.tensorType.dataType)
            for op in ops if op.type not in ("const", "cast") for o in op.outputs}


@pytest.mark.parametrize(("name", "precision"), [("mlp", "fp32"), ("cnn", "fp16")])
def test_coreml_package_from_cli_has_the_requested_precision(projects: dict[str, Path], name: str,
                                                             precision: str) -> None:
    project = projects[name]
    r = cli("build", str(project), "--provider", "coreml", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "coreml"
    assert (doc["cannot_run"] is not None) == (sys.platform != "darwin"), "off macOS the doc says it cannot run"
    [target] = doc["targets"]
    assert target["target"]["id"] == f"coreml-package-{precision}"
    package = Path(target["path"])
    assert package.name == "model.mlpackage" and (package / "Manifest.json").is_file()
    dtypes = mil_dtypes(package)
    assert dtypes == ({"FLOAT16"} if precision == "fp16" else {"FLOAT32"}), dtypes
    manifest = json.loads((package.parent / "manifest.json").read_text())
    info = manifest["info"]
    assert info["precision"] == precision and info["requested_precision"] == precision
    assert info["outputs"][0]["dtype"] == "FLOAT32"  # fp16 compute, float32 results as declared
    assert info["spec_target"] == "iOS16" and info["size"] == target["size"]
    if sys.platform != "darwin":
        assert manifest["verification"] == {"status": "skipped",
                                            "skipped": "Core ML prediction needs macOS; this is linux"}
        text = cli("build", str(project), "--provider", "coreml")
        assert text.returncode == 0 and "cannot run on this machine" in text.stderr
        assert f"coreml-package-{precision}: cached" in text.stdout


@pytest.mark.parametrize(("block", "ops", "target"), [
    ("{compression: palettize, compression_bits: 4}", {"constexpr_lut_to_dense"}, "iOS16"),
    ("{compression: linear_quantize}", {"constexpr_affine_dequantize"}, "iOS16"),
    ("{compression: linear_quantize, compression_bits: 4}", {"constexpr_blockwise_shift_scale"}, "iOS18"),
    ("{compression: prune}", {"constexpr_sparse_to_dense"}, "iOS16"),
])
def test_coreml_weight_compression(projects: dict[str, Path], tmp_path: Path, block: str, ops: set[str],
                                   target: str) -> None:
    """Weights of at least 2048 elements (conv2: 16x32x3x3) are compressed; with no deployment target the
    lowest one the compression needs is chosen."""
    shutil.copy(projects["cnn"] / "model.pt", tmp_path / "model.pt")
    yml = (projects["cnn"] / "gpux.yml").read_text()
    old = "coreml: {compute_units: all, compute_precision: fp16, minimum_deployment_target: iOS16}"
    assert old in yml
    (tmp_path / "gpux.yml").write_text(yml.replace(old, f"coreml: {block}"))
    info = build(load_config(tmp_path), "coreml").final.artifact.manifest["info"]
    assert set(info["compression_ops"]) == ops and info["minimum_deployment_target"] == target
    assert info["compression"]["method"] in block and info["precision"] == "fp16"


def test_coreml_shape_ranges_static_shapes_and_neuralnetwork(tmp_path: Path) -> None:
    """Ranges follow a declared TensorRT profile (opt = the default shape); static_shapes fixes the dim to
    its resolved size; neuralnetwork writes a .mlmodel whose fp16 is in the weights."""
    make_mlp_project(tmp_path)
    yml = (tmp_path / "gpux.yml").read_text()
    profile = yml + "  tensorrt: {profiles: {batch: {min: 2, opt: 4, max: 16}}}\n"
    (tmp_path / "gpux.yml").write_text(profile)
    info = build(load_config(tmp_path), "coreml").final.artifact.manifest["info"]
    assert info["ranges"] == {"batch": [2, 4, 16]} and info["static_shapes"] is False
    assert info["inputs"][0]["ranges"] == [[2, 16], [12, 12]] and info["inputs"][0]["shape"] == [4, 12]

    static = yml.replace("compute_precision: fp32", "static_shapes: true") + "benchmark: {batch: 8}\n"
    (tmp_path / "gpux.yml").write_text(static)
    info = build(load_config(tmp_path), "coreml").final.artifact.manifest["info"]
    assert info["inputs"][0]["shape"] == [8, 12] and "ranges" not in info["inputs"][0]
    assert info["precision"] == "fp16"

    nn = yml.replace("compute_precision: fp32, minimum_deployment_target: macOS13",
                     "model_format: neuralnetwork, minimum_deployment_target: iOS14")
    (tmp_path / "gpux.yml").write_text(nn)
    art = build(load_config(tmp_path), "coreml").final.artifact
    assert art.main.name == "model.mlmodel" and art.main.is_file()
    info = art.manifest["info"]
    assert info["format"] == "neuralnetwork" and info["precision"] == "fp16" and info["precision_of"] == "weights"


@pytest.mark.skipif(sys.platform == "darwin", reason="Core ML runs on macOS")
def test_run_on_coreml_falls_back_to_cpu_off_macos(projects: dict[str, Path]) -> None:
    project = projects["mlp"]
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(1, 12)
    feeds = json.dumps({"x": x.tolist()})
    r = cli("run", str(project), "--provider", "coreml", "--input", feeds, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["fell_back"] is True
    coreml = doc["attempts"][0]
    assert coreml["provider"] == "coreml" and not coreml["ok"] and "macOS" in coreml["reason"]
    np.testing.assert_allclose(np.asarray(doc["outputs"]["probs"]["data"], dtype=np.float32),
                               torch_outputs(project, x), rtol=1e-4, atol=1e-6)
    text = cli("run", str(project), "--provider", "coreml", "--input", feeds)
    assert text.returncode == 0 and "skipped coreml (probe)" in text.stderr

    strict = cli("run", str(project), "--provider", "coreml", "--strict", "--input", feeds)
    assert strict.returncode == ExitCode.UNAVAILABLE, strict.stderr
    assert "coreml unavailable" in strict.stderr and "Traceback" not in strict.stderr


def test_coreml_session_refuses_to_open_off_macos(projects: dict[str, Path]) -> None:
    if sys.platform == "darwin":
        pytest.skip("Core ML runs here")
    from gpux.errors import ProviderUnavailable
    from gpux.runtimes import coreml

    project = load_config(projects["mlp"])
    art = build(project, "coreml").final.artifact
    assert coreml.verify_runner(art.main, build(project, "coreml").final.target).startswith("Core ML prediction")
    with pytest.raises(ProviderUnavailable, match="cannot run here"):
        coreml.open_runner("coreml", project, art)


def test_pytorch_source_needs_declared_inputs(tmp_path: Path) -> None:
    make_mlp_project(tmp_path)
    write(tmp_path / "gpux.yml", "name: bare\nmodel: {source: model.pt}\n")
    r = cli("build", str(tmp_path), "--provider", "cpu")
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert "inputs" in r.stderr and "PyTorch source" in r.stderr and "Traceback" not in r.stderr


def test_declared_outputs_must_match_what_the_model_returns(tmp_path: Path) -> None:
    make_mlp_project(tmp_path)
    yml = (tmp_path / "gpux.yml").read_text()
    (tmp_path / "gpux.yml").write_text(yml.replace("outputs:\n", "outputs:\n  extra: {dtype: float32}\n"))
    with pytest.raises(BuildFailed, match=r"returns 1 output but gpux.yml declares 2 \(extra, probs\)"):
        build(load_config(tmp_path), "cpu")


def test_undeclared_outputs_are_numbered(tmp_path: Path) -> None:
    make_mlp_project(tmp_path)
    yml = (tmp_path / "gpux.yml").read_text()
    (tmp_path / "gpux.yml").write_text(yml.split("outputs:")[0])
    export = build(load_config(tmp_path), "cpu").results[0].artifact
    assert export.manifest["info"]["outputs"] == ["output_0"]
    assert export.manifest["verification"]["passed"] is True


def test_finish_lowers_ir_renames_outputs_and_writes_external_data(tmp_path: Path) -> None:
    """A model stamped with an IR version one newer than the installed ONNX Runtime reads, an output that is
    not named as declared, and a threshold of 0 bytes: one .data file beside model.onnx."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from gpux.model.io import Tensor
    from gpux.runtimes.torch_export import finish, ort_ir_limit

    weight = np.arange(3 * 512, dtype=np.float32).reshape(3, 512) / 512  # over onnx's 1 KB external minimum
    w = numpy_helper.from_array(weight, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["onnx::MatMul_3"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("onnx::MatMul_3", TensorProto.FLOAT, ["batch", 512])], [w])
    limit = ort_ir_limit()
    assert limit is not None
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=limit + 1)
    onnx.save(model, str(tmp_path / "raw.onnx"))
    tensors = {"x": Tensor("x", "float32", ("batch", 3)), "mask": Tensor("mask", "bool", ("batch",))}
    info = finish(tmp_path / "raw.onnx", tmp_path / "model.onnx", ["x", "mask"], ["y"], tensors, threshold=0)
    assert info["ir_version"] == limit and info["ir_version_exported"] == limit + 1
    assert info["renamed_outputs"] == {"onnx::MatMul_3": "y"} and info["unused_inputs"] == ["mask"]
    assert info["external_data"] is True and (tmp_path / "model.onnx.data").is_file()
    sess = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    x = np.ones((2, 3), np.float32)
    [y] = sess.run(["y"], {"x": x, "mask": np.ones(2, bool)})
    np.testing.assert_allclose(y, x @ weight, rtol=1e-6)


def test_example_model_is_small_torchscript(projects: dict[str, Path]) -> None:
    pt = projects["cnn"] / "model.pt"
    assert pt.stat().st_size < 1_000_000
    assert isinstance(torch.jit.load(str(pt)), torch.jit.ScriptModule)
    ignored = (ROOT / "examples" / "torch_cnn" / ".gitignore").read_text().split()
    assert {"*.pt", "*.pt2", ".gpux/"} <= set(ignored)
