"""Verification a user can trust: trained models judged on real inputs held out of calibration, int8 on generated
data reported unverified (and refused under --strict, passed over by auto selection), metrics that see a block
of collapsed channels, class flips and broken distributions, and a verdict that no inputs in hand can change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpux.quality.metrics import Rule, compare, tolerances

from .conftest import gpux as cli
from .conftest import make_mlp, write
from .trained import imagenet_crops, letterboxed, mobilenet_v2_onnx, package_file


# ---- metrics ---------------------------------------------------------------------------------------------------
def detector_like(rng: np.random.Generator) -> np.ndarray:
    """[1, 4 + 6, 256]: box coordinates in pixels beside class scores in [0, 1], as YOLOv8 writes them."""
    boxes = rng.uniform(0, 320, (1, 4, 256))
    scores = rng.uniform(0, 1, (1, 6, 256)) ** 4
    return np.concatenate([boxes, scores], axis=1).astype(np.float32)


def test_collapsed_class_scores_fail_by_slice_though_the_whole_tensor_agrees() -> None:
    rng = np.random.default_rng(0)
    ref = [detector_like(rng) for _ in range(2)]
    got = [r.copy() for r in ref]
    for g in got:
        g[:, 4:] = 0.0  # every class score quantized to zero: it detects nothing
    v = compare(["out"], [[r] for r in ref], [[g] for g in got], "int8", tolerances("int8"))
    assert v.outputs["out"]["cosine"] > 0.99, "the whole-tensor cosine hides it"
    assert not v.passed and v.outputs["out"]["slice_axis"] == 1 and v.outputs["out"]["slices_below"] == 6
    assert "6 of 10 slices along axis 1" in v.failures[0] and "indices 4..9" in v.failures[0]
    healthy = [[r + rng.normal(0, 0.01, r.shape).astype(np.float32)] for r in ref]
    assert compare(["out"], [[r] for r in ref], healthy, "int8", tolerances("int8")).passed


def test_a_declared_axis_and_per_output_thresholds_override_the_defaults() -> None:
    rng = np.random.default_rng(1)
    ref = [rng.standard_normal((1, 64, 32)).astype(np.float32)]
    got = [ref[0].copy()]
    got[0][:, :, 3] *= -1  # one column along the last axis flipped
    loose = tolerances("int8")
    assert compare(["y"], [ref], [got], "int8", loose).outputs["y"]["slice_axis"] == 2
    v = compare(["y"], [ref], [got], "int8", loose, rules={"y": Rule(loose, axis=1)})
    assert v.outputs["y"]["slice_axis"] == 1
    ok = compare(["y"], [ref], [got], "int8", loose, rules={"y": Rule({**loose, "min_slice_cosine": -1.0,
                                                                          "min_cosine": 0.0})})
    assert ok.passed


def test_softmax_outputs_are_checked_as_distributions_and_class_scores_by_top_k() -> None:
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((32, 10)) * 3
    probs = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    ref = [[probs.astype(np.float32)]]
    v = compare(["p"], ref, [[(probs * 3.4).astype(np.float32)]], "int8", tolerances("int8"))
    assert v.outputs["p"]["kind"] == "distribution" and v.outputs["p"]["top1"] == 1.0
    assert not v.passed and any("sum to 1" in f for f in v.failures)
    shuffled = probs[:, rng.permutation(10)]  # same sums, other classes: top-1 and top-5 collapse
    v = compare(["p"], ref, [[shuffled.astype(np.float32)]], "int8", {**tolerances("int8"), "min_cosine": None,
                                                                     "min_top1": 0.9})
    assert {"top1", "top5", "top1_confident"} <= set(v.outputs["p"]) and v.outputs["p"]["top1"] < 0.5
    assert any("top-1 agreement" in f for f in v.failures) and any("top-5" in f for f in v.failures)
    dense = compare(["p"], [[logits.astype(np.float32)]], [[logits.astype(np.float32)]], "int8", tolerances("int8"))
    assert dense.outputs["p"]["kind"] == "dense" and "top1" not in dense.outputs["p"]


# ---- verdicts on generated data ----------------------------------------------------------------------------------
INT8_MLP = """\
name: mlp
model: {source: model.onnx}
outputs:
  probs: {dtype: float32, shape: [batch, 4]}
providers:
  cpu: {precision: int8, quantization: dynamic}
"""


def test_int8_on_generated_data_is_unverified_said_everywhere_and_refused_under_strict(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx", features=64, hidden=256)  # big enough for int8 to shrink it
    write(tmp_path / "gpux.yml", INT8_MLP)
    r = cli("build", str(tmp_path), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["targets"][-1]["verification"]
    assert v["status"] == "unverified" and v["data"] == "generated" and v["representative"] is False
    assert "unverified" in r.stderr and "verify.data" in r.stderr
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 0 and "unverified" in (r.stdout + r.stderr).lower()  # a cached one says it too
    r = cli("build", str(tmp_path), "-p", "cpu", "--strict")
    assert r.returncode == 1 and "unverified" in r.stderr and "--strict refuses" in r.stderr
    assert "Traceback" not in r.stderr
    feed = json.dumps({"x": [[0.5] * 64]})
    r = cli("run", str(tmp_path), "-p", "cpu", "--json", "--input", feed)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["verification"]["status"] == "unverified" and "unverified" in r.stderr
    r = cli("run", str(tmp_path), "-p", "cpu", "--strict", "--input", feed)
    assert r.returncode == 1 and "unverified" in r.stderr
    r = cli("inspect", str(tmp_path))
    assert "UNVERIFIED at int8" in r.stdout

    # real inputs declared: the same artifact kind is now verified, a new verdict for new data
    np.savez(tmp_path / "real.npz", x=np.random.default_rng(5).standard_normal((12, 1, 64)).astype(np.float32))
    write(tmp_path / "gpux.yml", INT8_MLP + "verify: {data: real.npz, min_top1: 0.5, min_top1_confident: 0.5}\n")
    r = cli("build", str(tmp_path), "-p", "cpu", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["targets"][-1]["verification"]
    assert v["status"] == "verified" and v["data"] == "verify.data" and len(v["data_digest"]) == 64


def test_auto_selection_passes_over_an_unverified_artifact_for_a_verified_one(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\nruntime: {backend: [openvino, cpu]}\n"
                                 "providers:\n  openvino: {precision: int8}\n")
    r = cli("run", str(tmp_path), "--json", "--input", json.dumps({"x": [[0.5] * 8]}))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "openvino", "a list the user wrote is an explicit order: the unverified one runs"
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\n"
                                 "providers:\n  openvino: {precision: int8}\n  cpu: {precision: fp32}\n")
    r = cli("run", str(tmp_path), "--json", "--input", json.dumps({"x": [[0.5] * 8]}))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu", doc
    assert any(a["provider"] == "openvino" and "unverified" in a["reason"] for a in doc["attempts"])


# ---- a verdict no input in hand can change ------------------------------------------------------------------------
def wide_int8_project(folder: Path) -> Path:
    """MatMul calibrated on N(0, 1), judged on real inputs 30x wider: int8 clips them, verification fails."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])], [w])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "model.onnx"))
    rng = np.random.default_rng(7)
    np.savez(folder / "calib.npz", x=rng.normal(0, 1, (16, 1, 64)).astype(np.float32))
    np.savez(folder / "real.npz", x=rng.normal(0, 30, (4, 1, 64)).astype(np.float32))
    write(folder / "gpux.yml", "name: wide\nmodel: {source: model.onnx}\nproviders:\n"
                               "  cpu: {precision: int8, quantization: static, calibration: calib.npz}\n"
                               "verify: {data: real.npz}\n")
    return folder


def test_run_with_a_file_in_hand_never_turns_a_failed_build_into_a_verified_one(tmp_path: Path) -> None:
    folder = wide_int8_project(tmp_path)
    r = cli("build", str(folder), "-p", "cpu")
    assert r.returncode == 1 and "verify.data" in r.stderr and "cosine" in r.stderr
    np.savez(tmp_path / "one.npz", x=np.zeros((1, 64), np.float32))  # an input int8 gets exactly right
    r = cli("run", str(folder), "-p", "cpu", "--strict", "--file", str(tmp_path / "one.npz"))
    assert r.returncode != 0 and "failed verification" in r.stderr, r.stderr
    r = cli("run", str(folder), "-p", "cpu", "--file", str(tmp_path / "one.npz"), "--json")
    assert r.returncode == 4, r.stderr  # fallback tried and exhausted, never the failed artifact
    assert not list((folder / ".gpux" / "wide").glob("onnx-int8-static-basic-*/manifest.json"))


def test_run_uses_an_artifact_built_with_no_verify_and_says_so(mlp_project: Path) -> None:
    assert cli("build", str(mlp_project), "--no-verify").returncode == 0
    feed = json.dumps({"x": [[0.5] * 8]})
    r = cli("run", str(mlp_project), "--json", "--input", feed)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verification"]["skipped"] == "--no-verify" and "--no-verify" in r.stderr
    r = cli("run", str(mlp_project), "--strict", "--input", feed)
    assert r.returncode == 1 and "--strict refuses" in r.stderr and "gpux build" in r.stderr
    assert cli("build", str(mlp_project)).returncode == 0, "build verifies it"
    r = cli("run", str(mlp_project), "--strict", "--json", "--input", feed)
    assert r.returncode == 0 and json.loads(r.stdout)["verification"]["status"] == "verified"


def test_declared_output_shapes_are_checked_against_what_the_model_returns(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\noutputs:\n"
                                 "  probs: {dtype: float32, shape: [batch, 4, 1]}\n")
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 3 and "outputs.probs.shape" in r.stderr and "Traceback" not in r.stderr


def test_verify_names_only_outputs_the_model_declares(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\noutputs:\n"
                                 "  probs: {dtype: float32, shape: [batch, 4]}\nverify:\n  outputs:\n"
                                 "    prob: {axis: 1}\n")
    r = cli("validate", str(tmp_path / "gpux.yml"))
    assert r.returncode == 3 and "gpux.yml:7:11 verify.outputs.prob: 'prob' is not an output" in r.stderr, r.stderr
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\nverify: {classifications: [logits]}\n")
    r = cli("build", str(tmp_path), "-p", "cpu")  # outputs read from the model: checked at verification
    assert r.returncode == 3 and "'logits'" in r.stderr and "outputs: probs" in r.stderr, r.stderr


def test_int8_passing_on_too_few_real_samples_is_unverified(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx", features=64, hidden=256)
    np.savez(tmp_path / "real.npz", x=np.random.default_rng(5).standard_normal((4, 1, 64)).astype(np.float32))
    write(tmp_path / "gpux.yml", INT8_MLP + "verify: {data: real.npz, min_cosine: 0.5, min_top1: 0.5, "
                                            "min_top1_confident: 0.5}\n")
    r = cli("build", str(tmp_path), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["targets"][-1]["verification"]
    assert v["status"] == "unverified" and v["representative"] and v["rows"] == 4
    # what 4 rows show of the loosened floor, how many more would show it, and the loosening beside the verdict
    assert "unverified: 4 judged rows (probs: " in r.stderr and "more are needed for the 50 % floor" in r.stderr
    assert "min_top1_confident 0.5 (default 0.99)" in v["loosened"], v["loosened"]
    rates = {w["metric"]: w for w in v["evidence"]["rates"]}
    assert rates["top1_confident"]["bound"] < 0.5 <= rates["top1_confident"]["observed"], rates


def test_calibration_and_verification_never_share_samples(tmp_path: Path) -> None:
    from gpux.quality.calibrate import calibration_samples, feed_digest, split

    samples = [{"x": np.full((1, 2), i, np.float32)} for i in range(10)]
    cal, held = split(samples)
    assert len(held) == 2 and not {feed_digest(s) for s in cal} & {feed_digest(s) for s in held}
    assert split(samples[:3])[1] == [samples[2]] and split(samples[:1]) == (samples[:1], [])
    assert calibration_samples  # the build's calibration uses the same split (tested end to end below)


# ---- trained models, real inputs ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mobilenet")
    mobilenet_v2_onnx(folder / "model.onnx")
    np.savez(folder / "crops.npz", x=imagenet_crops()[:, None])
    return folder


CLASSIFIER = """\
name: mobilenet-v2
model: {{source: model.onnx}}
inputs:
  x: {{dtype: float32, shape: [batch, 3, 224, 224]}}
outputs:
  logits: {{dtype: float32, shape: [batch, 1000]}}
{rest}
"""
INT8_CPU = "providers:\n  cpu: {precision: int8, quantization: static, calibration: crops.npz}\n" \
           "verify: {classifications: [logits]}"


@pytest.mark.slow
def test_trained_classifier_int8_that_flips_real_photos_fails_on_held_out_crops(mobilenet: Path) -> None:
    write(mobilenet / "gpux.yml", CLASSIFIER.format(rest=INT8_CPU))
    r = cli("build", str(mobilenet), "-p", "cpu", "--json")
    assert r.returncode == 1, r.stderr
    assert "calibration hold-out (11 of 44" in r.stderr, r.stderr
    assert "top-5 agreement" in r.stderr or "where the reference is confident" in r.stderr, r.stderr
    write(mobilenet / "gpux.yml", CLASSIFIER.format(rest="verify: {classifications: [logits], data: crops.npz}"))
    for provider in ("cpu", "openvino"):
        r = cli("build", str(mobilenet), "-p", provider, "--json")
        assert r.returncode == 0, r.stderr
        v = json.loads(r.stdout)["targets"][-1]["verification"]
        assert v["status"] == "verified" and v["representative"] and v["outputs"]["logits"]["top1"] == 1.0


@pytest.mark.slow
def test_trained_detector_whose_class_scores_collapse_under_int8_fails(tmp_path: Path) -> None:
    model = package_file("nudenet", "320n.onnx")
    (tmp_path / "model.onnx").write_bytes(model.read_bytes())
    np.savez(tmp_path / "photos.npz", images=letterboxed()[:, None])
    write(tmp_path / "gpux.yml", "name: yolov8n\nmodel: {source: model.onnx}\ninputs:\n"
                                 "  images: {dtype: float32, shape: [batch, 3, 320, 320]}\nproviders:\n"
                                 "  cpu: {precision: int8, quantization: static, calibration: photos.npz}\n")
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 1, r.stderr
    assert "slices along axis 1" in r.stderr and "indices 4..21" in r.stderr, r.stderr
    r = cli("build", str(tmp_path), "-p", "openvino", "--json")  # fp32 IR: every slice agrees
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["targets"][-1]["verification"]["outputs"]["output0"]
    assert out["slice_axis"] == 1 and out["slice_cosine"] > 0.999


# ---- edges ----------------------------------------------------------------------------------------------------------
def defaults(precision: str = "int8") -> Rule:
    return Rule(tolerances(precision))  # as verify.rules builds it when nothing is set: no user thresholds


def test_a_named_output_without_a_class_axis_is_judged_as_dense_values() -> None:
    rng = np.random.default_rng(3)
    p = rng.uniform(0, 1, (64, 1)).astype(np.float32)  # a binary sigmoid [batch, 1], declared a classification
    v = compare(["prob"], [[p]], [[1 - p]], "fp16", tolerances("fp16"), classes={"prob"}, rules={"prob": defaults()})
    assert v.outputs["prob"]["kind"] == "dense" and not v.passed and "cosine" in v.failures[0]


def test_samples_of_different_shapes_compare_without_crashing() -> None:
    rng = np.random.default_rng(4)
    ref = [[rng.standard_normal((1, n, 32)).astype(np.float32)] for n in (3, 5)]
    v = compare(["seq"], ref, [[r[0].copy()] for r in ref], "int8", tolerances("int8"), rules={"seq": defaults()})
    assert v.passed and "slice_axis" not in v.outputs["seq"]


def test_identical_non_finite_class_scores_agree() -> None:
    logits = np.array([[np.nan, 1, 2], [0, 5, 1], [np.inf, 1, 2]], np.float32)
    v = compare(["logits"], [[logits]], [[logits.copy()]], "int8", tolerances("int8"), classes={"logits"},
                rules={"logits": defaults()})
    assert v.passed and v.outputs["logits"]["top1"] == 1.0


def test_rows_count_the_batch_axis_only_where_the_model_has_one() -> None:
    from gpux.model.io import Tensor
    from gpux.quality.calibrate import _data

    batched = {"x": Tensor("x", "float32", ("batch", 3, 8, 8))}
    fixed = {"x": Tensor("x", "float32", (3, 8, 8))}
    assert _data([{"x": np.zeros((4, 3, 8, 8), np.float32)}] * 3, "verify.data", True, batched).rows == 12
    assert _data([{"x": np.zeros((3, 8, 8), np.float32)}] * 3, "verify.data", True, fixed).rows == 3


def test_labels_generated_ranges_and_answers_are_part_of_the_verdicts_key(mlp_project: Path) -> None:
    from gpux.artifacts.plan import keyed_targets
    from gpux.config.load import load_config
    from gpux.model.io import interface
    from gpux.plan.targets import resolve_shapes

    def key() -> str:
        project = load_config(mlp_project)
        inputs, _ = interface(project)
        return keyed_targets(project, "cpu", inputs, "src", resolve_shapes(project))[-1].key

    labeled = key()
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text().replace(", labels: [cat, dog, fox, owl]", ""))
    unlabeled = key()
    yml.write_text(yml.read_text().replace("x: {dtype: float32, shape: [batch, 8]}",
                                           "x: {dtype: float32, shape: [batch, 8], range: [0, 1]}"))
    ranged = key()
    yml.write_text(yml.read_text().replace("shape: [batch, 4]", "shape: [batch, 4], postprocess: {topk: 2}"))
    assert len({labeled, unlabeled, ranged, key()}) == 4  # answers compared: part of the verdict too
