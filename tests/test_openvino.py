"""OpenVINO provider on the real runtime (CPU): IR builds per precision, precompiled caches, sessions,
output order, concurrency helpers, and fallback when a device or an operator is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")
ort = pytest.importorskip("onnxruntime")

import gpux  # noqa: E402
from gpux.artifacts import store  # noqa: E402
from gpux.artifacts.build import BuildResult, build  # noqa: E402
from gpux.config.load import load_config  # noqa: E402
from gpux.runtimes import openvino as ovp  # noqa: E402
from gpux.runtimes import openvino_options as ovo  # noqa: E402

WIDE = 256  # wide enough that weight compression shows in the file size
PRECISIONS = {
    "fp32": "{precision: fp32, inference_precision: f32}",
    "fp16": "{precision: fp16}",
    "int8-quantize": "{precision: int8, int8_mode: quantize, calibration_samples: 8}",
    "int8-weights": "{precision: int8, int8_mode: weights}",
}


# ---- models, made with onnx.helper ----

def _save(path: Path, nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any]) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, path.stem, inputs, outputs, inits)
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def wide_mlp(path: Path) -> Path:
    """x float32 [batch, 256] -> Gemm 256x256, Relu, MatMul 256x256 -> two outputs (probs, logits),
    declared in the order probs, logits."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w1 = (rng.standard_normal((WIDE, WIDE)) / np.sqrt(WIDE)).astype(np.float32)
    w2 = (rng.standard_normal((WIDE, WIDE)) / np.sqrt(WIDE)).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(np.zeros(WIDE, np.float32) + 0.01, "b1"),
             numpy_helper.from_array(w2, "w2")]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    vi = helper.make_tensor_value_info
    return _save(path, nodes, [vi("x", TensorProto.FLOAT, ["batch", WIDE])],
                 [vi("probs", TensorProto.FLOAT, ["batch", WIDE]), vi("logits", TensorProto.FLOAT, ["batch", WIDE])],
                 inits)


def two_inputs(path: Path) -> Path:
    """ids int64 [batch, seq] + scale float32 [batch, 1] -> out float32 [batch, 4]."""
    from onnx import TensorProto, helper, numpy_helper

    emb = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4) / 10, "emb")
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["g"]),
             helper.make_node("ReduceMean", ["g"], ["m"], axes=[1], keepdims=0),
             helper.make_node("Mul", ["m", "scale"], ["out"])]
    vi = helper.make_tensor_value_info
    inputs = [vi("ids", TensorProto.INT64, ["batch", "seq"]), vi("scale", TensorProto.FLOAT, ["batch", 1])]
    return _save(path, nodes, inputs, [vi("out", TensorProto.FLOAT, ["batch", 4])], [emb])


def determinant(path: Path) -> Path:
    """Det (opset 11): ONNX Runtime runs it, OpenVINO's ONNX frontend has no conversion rule for it."""
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    return _save(path, [helper.make_node("Det", ["m"], ["det"])], [vi("m", TensorProto.FLOAT, ["batch", 3, 3])],
                 [vi("det", TensorProto.FLOAT, ["batch"])], [])


def small_mlp(path: Path) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "w")
    vi = helper.make_tensor_value_info
    return _save(path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", TensorProto.FLOAT, ["batch", 8])],
                 [vi("y", TensorProto.FLOAT, ["batch", 4])], [w])


def project(folder: Path, make: Any, inputs: str, openvino: str = "{}") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    make(folder / "model.onnx")
    (folder / "gpux.yml").write_text(
        f"name: {folder.name}\nversion: 1.0.0\nmodel:\n  source: model.onnx\ninputs:\n{inputs}"
        f"runtime:\n  backend: openvino\nproviders:\n  openvino: {openvino}\n")
    return folder


WIDE_INPUTS = f"  x: {{dtype: float32, shape: [batch, {WIDE}]}}\n"
TWO_INPUTS = ("  ids: {dtype: int64, shape: [batch, seq], range: [0, 10]}\n"
              "  scale: {dtype: float32, shape: [batch, 1]}\n")


def reference(folder: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpux", *args], cwd=cwd, text=True, capture_output=True,
                          timeout=300, env={**os.environ, "GPUX_HOME": str(cwd / ".home")})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, BuildResult]:
    """The wide MLP built once per precision."""
    root = tmp_path_factory.mktemp("ov")
    return {label: build(load_config(project(root / f"wide-{label}", wide_mlp, WIDE_INPUTS, opts)), "openvino")
            for label, opts in PRECISIONS.items()}


# ---- build ----

@pytest.mark.parametrize("label", list(PRECISIONS))
def test_ir_is_built_verified_and_precompiled(built: dict[str, BuildResult], label: str) -> None:
    art = built[label].final.artifact
    m = art.manifest
    assert m["target"]["id"] == f"openvino-ir-{label}", "the int8 variants have ids of their own"
    assert art.main.name == "model.xml" and (art.dir / "model.bin").is_file()
    assert m["verification"]["passed"] is True, m["verification"]
    info = m["info"]
    assert info["outputs"] == ["probs", "logits"]
    assert info["shapes"] == {"x": f"[?,{WIDE}]"}  # the symbolic batch stays dynamic
    assert info["precompiled"] == "ov_cache" and info["execution_devices"] == ["CPU"]
    assert info["compile_seconds"] > 0 and info["cached_compile_seconds"] > 0
    blobs = [f for f in m["files"] if f.startswith("ov_cache/") and f.endswith(".blob")]
    assert blobs, m["files"]  # the blob is part of the artifact and its manifest
    assert store.check(art, full=True) is None


def test_compressed_precisions_are_smaller(built: dict[str, BuildResult]) -> None:
    size = {k: r.final.artifact.manifest["files"]["model.bin"]["size"] for k, r in built.items()}
    assert size["fp16"] < 0.6 * size["fp32"]
    assert size["int8-quantize"] < 0.35 * size["fp32"]
    assert size["int8-weights"] < 0.35 * size["fp32"]
    assert built["int8-quantize"].final.artifact.manifest["info"]["calibration_samples"] == 8


def test_rebuild_is_a_cache_hit(built: dict[str, BuildResult]) -> None:
    first = built["fp16"]
    again = build(first.project, "openvino")
    assert again.final.cached and again.final.artifact.dir == first.final.artifact.dir


# ---- sessions ----

def test_session_uses_precompiled_blob_and_matches_onnxruntime(built: dict[str, BuildResult]) -> None:
    folder = built["fp32"].project.root
    x = np.random.default_rng(1).standard_normal((3, WIDE)).astype(np.float32)
    with gpux.load(folder, provider="openvino") as s:
        out = s.run(x=x)
        details = s.runner.details
        assert s.provider == "openvino" and s.used == "OpenVINO CPU"
        assert s.output_names == ["probs", "logits"]
        assert details["execution_devices"] == ["CPU"] and details["inference_precision"] == "f32"
        assert details["cache"] == "loaded"  # the artifact's blob, copied beside it, was taken as is
    ref = reference(folder, {"x": x})
    np.testing.assert_allclose(out["probs"], ref[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["logits"], ref[1], rtol=1e-4, atol=1e-5)
    art = built["fp32"].final.artifact
    cache = art.dir.parent / "cache" / "openvino"
    assert {p.name for p in cache.glob("*.blob")} >= {p.name for p in (art.dir / "ov_cache").glob("*.blob")}
    assert store.check(art, full=True) is None


def test_sessions_never_write_into_the_artifact(built: dict[str, BuildResult]) -> None:
    """CACHE_DIR is the model's runtime cache beside the artifacts, re-seeded from the artifact's blobs."""
    art = built["fp16"].final.artifact
    yml = built["fp16"].project.path
    threads = yml.with_name("threads.yml")  # same project and store, one intra-op thread
    threads.write_text(yml.read_text().replace("runtime:\n", "runtime:\n  threads: {intra_op: 1}\n"))
    proj = load_config(threads)
    cache = art.dir.parent / "cache" / "openvino"
    for blob in cache.glob("*.blob"):
        blob.unlink()
    runner = ovp.open_runner("openvino", proj, art)
    props = runner.details["properties"]
    assert props["INFERENCE_NUM_THREADS"] == "1"  # runtime.threads.intra_op, threads unset
    assert Path(props["CACHE_DIR"]) == cache.resolve() and not Path(props["CACHE_DIR"]).is_relative_to(art.dir)
    assert runner.details["cache"] == "loaded"  # the precompiled blob was copied over and taken
    assert runner.run({"x": np.ones((1, WIDE), np.float32)})[0].shape == (1, WIDE)
    runner.close()
    assert store.check(art, full=True) is None


def test_two_inputs_int64_dynamic_shapes_and_kept_outputs(tmp_path: Path) -> None:
    folder = project(tmp_path / "two", two_inputs, TWO_INPUTS, "{inference_precision: f32}")
    rng = np.random.default_rng(3)
    with gpux.load(folder, provider="openvino") as s:
        assert s.provider == "openvino"
        results = []
        for batch, seq in ((2, 3), (5, 7), (1, 1)):
            feeds = {"ids": rng.integers(0, 10, (batch, seq)), "scale": rng.random((batch, 1), np.float32)}
            results.append((feeds, s.run(feeds)["out"]))
        for feeds, got in results:  # earlier outputs are not overwritten by later runs
            np.testing.assert_allclose(got, reference(folder, feeds)[0], rtol=1e-5, atol=1e-6)
            assert got.shape == (feeds["ids"].shape[0], 4)


def test_requests_of_one_compiled_model_match_sequential(built: dict[str, BuildResult]) -> None:
    """InferRequests sharing one compiled model (a runner's, the benchmark's bound ones) return what
    sequential runs return, and none writes into the caller's inputs."""
    runner = ovp.open_runner("openvino", built["fp32"].project, built["fp32"].final.artifact)
    rng = np.random.default_rng(5)
    feeds = [{"x": rng.standard_normal((2, WIDE)).astype(np.float32)} for _ in range(6)]
    originals = [f["x"].copy() for f in feeds]
    expected = [runner.run(f) for f in feeds]
    workers = [ovp.Requests(runner.native, runner.details["output_order"]).run for _ in range(2)]
    for i, f in enumerate(feeds):
        for g, w in zip(workers[i % 2](f), expected[i], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    for call in runner.bind(feeds[0], 2):
        call()
    np.testing.assert_allclose(runner.run(feeds[1])[1], expected[1][1], rtol=1e-6)
    for f, x in zip(feeds, originals, strict=True):  # no request ever writes into the caller's inputs
        np.testing.assert_array_equal(f["x"], x)


# ---- devices and fallback ----

def test_device_resolution() -> None:
    assert ovo.resolve_device("AUTO:GPU,CPU", ["CPU"]) == "AUTO:CPU"
    assert ovo.resolve_device("AUTO", ["CPU"]) == "AUTO"
    assert ovo.resolve_device("GPU.0", ["CPU", "GPU"]) == "GPU.0"
    with pytest.raises(ovo.DeviceMissing, match="GPU is not available"):
        ovo.resolve_device("GPU", ["CPU"])
    assert ovo.dropped("GPU", ["CPU"]) is not None
    assert ovo.dropped("AUTO:GPU,CPU", ["CPU"]) is None
    assert ovo.dropped("CPU", ["CPU"]) is None


def test_missing_gpu_builds_then_falls_back_to_cpu_and_strict_exits_4(tmp_path: Path) -> None:
    """`device: GPU` on a GPU-less machine: the IR builds (int8, NNCF quiet on stdout) and verifies on CPU
    without a precompiled blob; the session records why OpenVINO was skipped and runs on cpu."""
    import openvino

    if any(d.startswith("GPU") for d in openvino.Core().available_devices):
        pytest.skip("this machine has an OpenVINO GPU")
    folder = project(tmp_path / "gpu", small_mlp, "  x: {dtype: float32, shape: [batch, 8]}\n",
                     "{device: GPU, precision: int8, calibration: calib.npz}")
    np.savez(folder / "calib.npz", x=np.random.default_rng(0).standard_normal((40, 1, 8)).astype(np.float32))
    with (folder / "gpux.yml").open("a") as f:  # a random-weight MLP: int8's accuracy is not what this tests
        f.write("verify: {min_cosine: 0.5, min_rows_within: 0}\n")
    built_doc = cli("build", ".", "--provider", "openvino", "--json", cwd=folder)
    assert built_doc.returncode == 0, built_doc.stderr
    (target,) = json.loads(built_doc.stdout)["targets"]  # one JSON document despite NNCF's progress bars
    assert target["target"]["id"] == "openvino-ir-int8-quantize" and target["verification"]["status"] == "verified"
    info = store.read_manifest(Path(folder, target["path"]).parent).manifest["info"]  # type: ignore[union-attr]
    assert info["precompiled"] is None and "GPU is not available" in info["precompile_skipped"]

    data = json.dumps({"x": [[0.5] * 8]})
    res = cli("run", ".", "--provider", "openvino", "--json", "-i", data, cwd=folder)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["provider"] == "cpu" and doc["fell_back"] is True
    first = doc["attempts"][0]
    assert first["provider"] == "openvino" and first["stage"] == "session" and not first["ok"]
    assert "GPU" in first["reason"] and "not available" in first["reason"]
    strict = cli("run", ".", "--provider", "openvino", "--strict", "-i", data, cwd=folder)
    assert strict.returncode == 4, strict.stderr
    assert "GPU" in strict.stderr


def test_operator_openvino_cannot_convert_falls_back_to_onnxruntime(tmp_path: Path) -> None:
    folder = project(tmp_path / "det", determinant, "  m: {dtype: float32, shape: [batch, 3, 3]}\n")
    m = np.random.default_rng(2).standard_normal((4, 3, 3)).astype(np.float32)
    with gpux.load(folder, provider="openvino") as s:
        out = s.run(m=m)["det"]
        report = s.report()
    assert s.provider == "cpu" and report["runs_on"] == "CPUExecutionProvider"
    first = report["attempts"][0]
    assert (first["provider"], first["stage"], first["ok"]) == ("openvino", "build", False)
    assert "Det" in first["reason"]
    np.testing.assert_allclose(out, np.linalg.det(m), rtol=1e-4, atol=1e-5)
