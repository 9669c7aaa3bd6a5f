"""Continuous outputs (values no postprocess decodes) are judged by what a user reads off them: the share of rows whose
values stay within 1 % of the output's scale, under its one-sided bound, on real rows only below fp32. Models
trained on scikit-learn's diabetes dataset, converted with skl2onnx, compared with scikit-learn's own predictions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from gpux.artifacts.build import build
from gpux.config.load import load_config
from gpux.documents import VerificationDoc
from gpux.errors import VerificationFailed
from gpux.quality.metrics import compare, tolerances
from gpux.quality.values import judge_values, row_moves, tree_ensembles

from .conftest import write

pytest.importorskip("skl2onnx")


@dataclass(frozen=True)
class Trained:
    hgb: bytes  # a HistGradientBoostingRegressor (ai.onnx.ml TreeEnsembleRegressor)
    mlp: bytes  # an MLPRegressor (MatMul, Add, Relu)
    x: np.ndarray  # every row of the dataset, float32
    held: np.ndarray  # the held-out rows
    hgb_pred: np.ndarray  # scikit-learn's own predictions on the held-out rows
    mlp_pred: np.ndarray  # scikit-learn's on every row


@pytest.fixture(scope="module")
def trained() -> Trained:
    from skl2onnx import to_onnx
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPRegressor

    x, y = load_diabetes(return_X_y=True)
    x = (x * 20).astype(np.float32)  # features of unit spread (the dataset's are scaled to norm 1 per column)
    train, held, y_train, _ = train_test_split(x, y, test_size=0.3, random_state=0)
    hgb = HistGradientBoostingRegressor(random_state=0).fit(train, y_train)
    mlp = MLPRegressor(hidden_layer_sizes=(32,), learning_rate_init=0.05, max_iter=400, random_state=0)
    mlp.fit(train, y_train)
    opsets = {"": 17, "ai.onnx.ml": 3}
    return Trained(to_onnx(hgb, train[:1], target_opset=opsets).SerializeToString(),
                   to_onnx(mlp, train[:1], target_opset=opsets).SerializeToString(), x, held,
                   hgb.predict(held), mlp.predict(x))


def project(folder: Path, model: bytes, yml: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model)
    write(folder / "gpux.yml", "name: reg\nmodel: {source: model.onnx}\n" + yml)
    return folder


def rows(folder: Path, x: np.ndarray) -> None:
    np.savez(folder / "rows.npz", X=x[:, None, :])  # one sample per row


FP16 = "providers:\n  cpu: {precision: fp16}\n"


def verification(folder: Path) -> VerificationDoc:
    """The verdict of the cpu build: the manifest's, or the one a failure remembers."""
    try:
        return build(load_config(folder), "cpu").final.artifact.manifest["verification"]
    except VerificationFailed as failed:
        return failed.verification


def predictions(folder: Path, held: np.ndarray) -> np.ndarray:
    """The built artifact's predictions, run in ONNX Runtime as sessions run it."""
    import onnxruntime as ort

    (model,) = folder.glob(".gpux/*/onnx-*/model.onnx")
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": held})[0].ravel()


def test_the_tree_regressor_at_fp16_is_never_verified_while_a_held_out_prediction_moves(trained: Trained,
                                                                                       tmp_path: Path) -> None:
    fp32 = project(tmp_path / "fp32", trained.hgb, "verify: {data: rows.npz}\n")
    rows(fp32, trained.held)
    v = verification(fp32)
    assert v["status"] == "verified" and v["outputs"]["variable"]["values"]["rows_within"] == 1.0
    reference = predictions(fp32, trained.held)
    assert np.mean(np.abs(reference - trained.hgb_pred) < 1e-3) > 0.9  # scikit-learn's answers (float32 thresholds)

    # fp16 of a tree ensemble: its trees have no float16 kernels and stay fp32, so a "fp16" artifact would only round
    # the features and the predictions around them. That rounding moves held-out predictions by more than 1 % of the
    # scale (measured here with an fp16 conversion made independently), so gpux builds the fp32 artifact instead and
    # says so: never "verified at fp16".
    half = project(tmp_path / "fp16", trained.hgb, FP16 + "verify: {data: rows.npz}\n")
    rows(half, trained.held)
    result = build(load_config(half), "cpu")
    manifest = result.final.artifact.manifest
    assert manifest["key_parts"]["precision"] == "fp32" and manifest["verification"]["precision"] == "fp32"
    assert any("built as fp32 instead" in line for line in result.instead)
    assert np.array_equal(predictions(half, trained.held), reference)
    scale = np.percentile(reference, 99) - np.percentile(reference, 1)
    rounded = fp16_predictions(tmp_path / "fp16" / "model.onnx", trained.held)
    moves = np.abs(rounded - reference)
    assert np.sum(moves > 0.01 * scale) > 0  # what the rounding would have done

    # Judged on these real rows, the rounded model fails: the rule that judges any lossy continuous output.
    judged = compare(["variable"], [[reference[:, None]]], [[rounded[:, None]]], "fp16", tolerances("fp16"))
    problems = judge_values(judged.outputs, {"variable": 0.99}, judged=True)
    values = judged.outputs["variable"]["values"]
    assert problems and "rows move by more than 1 %" in problems[0]
    assert values["moved"] == int(np.sum(moves > 0.01 * scale))
    assert values["max_rel"] == pytest.approx(moves.max() / scale, rel=1e-3)

def fp16_predictions(model: Path, x: np.ndarray) -> np.ndarray:
    """The model converted to fp16 by ONNX Runtime's converter (inputs and outputs kept float32), run."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.transformers.float16 import convert_float_to_float16

    half = convert_float_to_float16(onnx.load(str(model)), keep_io_types=True)
    session = ort.InferenceSession(half.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"X": x})[0].ravel()


def test_generated_inputs_leave_fp16_of_continuous_outputs_unverified(trained: Trained, tmp_path: Path) -> None:
    v = verification(project(tmp_path / "mlp", trained.mlp, FP16))
    assert v["status"] == "unverified" and v["data"] == "generated", v
    assert "variable is a continuous output" in v["unverified"] and "verify.data" in v["unverified"]
    assert v["outputs"]["variable"]["values"]["judged"] is False
    # the tree ensemble's fp16 converts nothing: the fp32 artifact is built instead, exact, so verified at fp32
    v = verification(project(tmp_path / "hgb", trained.hgb, FP16))
    assert v["status"] == "verified" and v["precision"] == "fp32", v
    assert verification(project(tmp_path / "fp32", trained.hgb, ""))["status"] == "verified"  # fp32: unchanged
    assert tree_ensembles(tmp_path / "hgb" / "model.onnx") == ["TreeEnsembleRegressor"]
    assert tree_ensembles(tmp_path / "mlp" / "model.onnx") == [] and tree_ensembles(tmp_path / "mlp" / "gpux.yml") == []


def test_an_fp16_safe_regressor_is_verified_on_real_rows(trained: Trained, tmp_path: Path) -> None:
    """442 rows, none moved: the bound shows 99 % (268 would); its answers are scikit-learn's."""
    folder = project(tmp_path / "mlp", trained.mlp, FP16 + "verify: {data: rows.npz}\n")
    rows(folder, trained.x)
    v = verification(folder)
    assert v["status"] == "verified", v.get("failures") or v.get("unverified")
    values = v["outputs"]["variable"]["values"]
    assert values["rows"] == 442 and values["rows_within"] == 1.0 and values["max_rel"] < 0.01 and values["judged"]
    (rate,) = [r for r in v["evidence"]["rates"] if r["metric"] == "rows_within"]
    assert rate["shown"] and rate["bound"] >= 0.99
    np.testing.assert_allclose(predictions(folder, trained.x), trained.mlp_pred, rtol=0.01, atol=0.5)
    few = project(tmp_path / "few", trained.mlp, FP16 + "verify: {data: rows.npz}\n")
    rows(few, trained.held)  # 133 clean rows show at most 98 %: unverified, saying how many more
    v = verification(few)
    assert v["status"] == "unverified" and "values within tolerance" in v["unverified"] and "more" in v["unverified"]


def test_verify_outputs_sets_the_tolerance_and_floor(trained: Trained, tmp_path: Path) -> None:
    yml = FP16 + "verify:\n  data: rows.npz\n  outputs:\n    variable: {row_tolerance: 0.1, min_rows_within: 0.9}\n"
    folder = project(tmp_path / "loose", trained.mlp, yml)
    rows(folder, trained.held)
    v = verification(folder)
    values = v["outputs"]["variable"]["values"]
    assert values["tolerance"] == 0.1 and values["max_rel"] < 0.1
    assert v["status"] == "verified" and sorted(v["loosened"]) == ["min_rows_within 0.9 (default 0.99)",
                                                                  "row_tolerance 0.1 (default 0.01)"]
    strict = project(tmp_path / "strict", trained.mlp, FP16 + "verify: {data: rows.npz, row_tolerance: 1e-6}\n")
    rows(strict, trained.x)  # every row moves by more than a millionth of the scale at fp16
    v = verification(strict)
    assert v["status"] == "failed" and v["outputs"]["variable"]["values"]["rows_within"] < 0.99


def test_rows_and_scale() -> None:
    ref = [np.array([[0.0, 1.0], [2.0, 3.0]]), np.array([[4.0, 5.0]])]
    out = [np.array([[0.0, 1.5], [2.0, 3.0]]), np.array([[4.0, 5.2]])]
    moves, scale = row_moves(ref, out)
    assert moves.tolist() == pytest.approx([0.5, 0.0, 0.2]) and scale == pytest.approx(4.9)  # p99 - p1 of 0..5
    _, constant = row_moves([np.full((3, 1), 7.0)], [np.full((3, 1), 7.0)])
    assert constant == 7.0  # no spread: its magnitude
    empty = [np.zeros((0, 6), np.float32)]  # a dynamic output empty on every sample: no rows to judge
    assert "values" not in compare(["d"], [empty], [empty], "fp16", tolerances("fp16")).outputs["d"]
    tol = tolerances("fp16")
    v = compare(["y"], [[np.linspace(0, 1, 50)[:, None]]], [[np.linspace(0, 1, 50)[:, None] + 0.02]], "fp16", tol)
    assert v.outputs["y"]["values"]["rows_within"] == 0.0 and v.outputs["y"]["values"]["moved"] == 50
    labels = compare(["p"], [[np.array([[0.2, 0.8]])]], [[np.array([[0.21, 0.79]])]], "fp16", tol)
    assert "values" not in labels.outputs["p"]  # a distribution is judged as classes


@pytest.mark.parametrize(("field", "value", "says"), [("row_tolerance", "-1", "must be >= 0.0, got -1"),
                                                      ("min_rows_within", "2", "must be <= 1.0, got 2")])
def test_verify_outputs_fields_are_validated_at_their_line(tmp_path: Path, field: str, value: str, says: str) -> None:
    from gpux.errors import ConfigError

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"placeholder")
    write(folder / "gpux.yml", "name: reg\nmodel: {source: model.onnx}\nverify:\n  outputs:\n"
          f"    y: {{{field}: {value}}}\n")
    with pytest.raises(ConfigError) as info:
        load_config(folder, require_model=False)
    (line,) = info.value.lines()
    assert "gpux.yml:5:" in line and f"verify.outputs.y.{field}: " in line and says in line, line


def test_classifiers_keep_their_verdict_and_a_tree_classifier_needs_real_rows(tmp_path: Path) -> None:
    """Labels and probabilities are not continuous values; ai.onnx.ml's LinearClassifier and TreeEnsembleClassifier
    have no float16 kernels, so fp16 converts nothing of either and the fp32 artifact is built and verified."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    for name, estimator, precision in (("lr", LogisticRegression(max_iter=500), "fp32"),
                                       ("rf", RandomForestClassifier(n_estimators=10, random_state=0), "fp32")):
        estimator.fit(x, y)
        model = to_onnx(estimator, x[:1], options={id(estimator): {"zipmap": False}},
                        target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()
        v = verification(project(tmp_path / name, model, FP16))
        assert v["status"] == "verified" and v["precision"] == precision, v
        assert v["outputs"]["probabilities"]["kind"] == "distribution" and not any(
            "values" in o for o in v["outputs"].values())


def test_tune_does_not_rank_a_candidate_whose_rows_do_not_show_the_floor() -> None:
    from gpux.bench.candidates import Outcome
    from gpux.bench.tune import pick_best
    from gpux.quality.evidence import weigh

    def outcome(precision: str, p50: float, rows: int) -> Outcome:
        record = {"y": {"values": {"rows_within": 1.0, "rows": rows, "judged": True}}}
        rates = weigh(record, {"y": {"min_rows_within": 0.99}})  # type: ignore[dict-item]
        return Outcome(provider="cpu", precision=precision, options={}, status="ok",
                       row={"stats": {"p50": p50, "throughput": 1 / p50}, "verification_status": "verified",
                            "accuracy": {"evidence": rates}})

    few, fp32 = outcome("fp16", 0.001, 133), outcome("fp32", 0.004, 133)
    fp32.row["accuracy"] = {"evidence": []}
    assert pick_best([few, fp32], "latency") is fp32
    assert few.status == "unverified" and "133 judged rows (y: values within tolerance) show at most 98 %" in few.why
    assert pick_best([outcome("fp16", 0.001, 442)], "latency") is not None
