"""The first build works wherever a provider here can run the model: scikit-learn estimators trained on its bundled
datasets and converted with skl2onnx (ai.onnx.ml operators, which OpenVINO cannot convert) build with a config
`gpux init` writes, passing openvino over as `run` does and saying why; what is remembered decides what `inspect` and
`--dry-run` say; a lossy ONNX target that converts nothing is the fp32 artifact and says so."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux

pytest.importorskip("skl2onnx")


@dataclass(frozen=True)
class Trained:
    """A converted estimator, held-out rows and scikit-learn's own answers on them."""

    onnx: bytes
    rows: np.ndarray
    labels: np.ndarray | None  # a classifier's predicted classes
    values: np.ndarray  # class probabilities, or a regressor's predictions


def train(name: str, seed: int = 0) -> Trained:
    """Small estimators (few, shallow trees: seconds to train and convert)."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris
    from sklearn.ensemble import GradientBoostingClassifier, HistGradientBoostingRegressor, RandomForestClassifier
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    data, estimator = {
        "rf-iris": (load_iris, lambda: RandomForestClassifier(n_estimators=5, max_depth=3, random_state=seed)),
        "gb-cancer": (load_breast_cancer, lambda: make_pipeline(StandardScaler(), GradientBoostingClassifier(
            n_estimators=5, max_depth=2, random_state=seed))),
        "hgb-diabetes": (load_diabetes, lambda: HistGradientBoostingRegressor(max_iter=10, random_state=seed)),
    }[name]
    x, y = data(return_X_y=True)
    x_train, x_test, y_train, _ = train_test_split(x.astype(np.float32), y, test_size=0.25, random_state=0)
    model = estimator().fit(x_train, y_train)
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    classifier = hasattr(final, "predict_proba")
    options = {id(final): {"zipmap": False}} if classifier else None
    onx = to_onnx(model, x_train[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    return Trained(onnx=onx.SerializeToString(), rows=x_test,
                   labels=model.predict(x_test) if classifier else None,
                   values=model.predict_proba(x_test) if classifier else model.predict(x_test))


@pytest.fixture(scope="session")
def trained() -> dict[str, Trained]:
    return {name: train(name) for name in ("rf-iris", "gb-cancer", "hgb-diabetes")}


def project(tmp_path: Path, model: Trained, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model.onnx").write_bytes(model.onnx)
    np.savez(folder / "rows.npz", X=model.rows)
    r = gpux("init", "model.onnx", cwd=folder)
    assert r.returncode == 0, r.stderr
    return folder


def json_of(r: Any) -> Any:
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("name", ["rf-iris", "gb-cancer", "hgb-diabetes"])
def test_init_then_build_passes_openvino_over_and_runs_what_sklearn_predicts(
        name: str, trained: dict[str, Trained], tmp_path: Path) -> None:
    model = trained[name]
    folder = project(tmp_path, model, name)
    assert "openvino" in (folder / "gpux.yml").read_text(), "the config init writes lists openvino first"
    r = gpux("build", ".", cwd=folder)
    assert r.returncode == 0, r.stderr
    [skipped] = [line for line in r.stderr.splitlines() if "skipped openvino (build)" in line]
    assert "OpenVINO cannot convert" in skipped and "ai.onnx.ml" in skipped, skipped
    assert "built for cpu instead of openvino" in r.stderr and "Traceback" not in r.stderr
    doc = json_of(gpux("inspect", ".", "--json", cwd=folder))
    assert doc["would_run_on"] == "cpu", doc["would_run_on"]
    assert [a["provider"] for a in doc["passed_over"] if a["stage"] == "build"] == ["openvino"]
    out = json_of(gpux("run", ".", "--json", "--file", "rows.npz", cwd=folder))
    assert out["provider"] == "cpu"
    got = out["outputs"]
    if model.labels is not None:
        assert np.array_equal(np.array(got["label"]["data"]), model.labels), "every label as scikit-learn's"
        np.testing.assert_allclose(np.array(got["probabilities"]["data"]), model.values, atol=1e-4)
    else:
        [values] = got.values()
        np.testing.assert_allclose(np.array(values["data"]).ravel(), model.values, rtol=1e-4, atol=1e-3)


def test_a_requested_provider_falls_back_unless_strict_and_its_failure_is_remembered_per_model(
        trained: dict[str, Trained], tmp_path: Path) -> None:
    folder = project(tmp_path, trained["rf-iris"], "rf")
    first = json_of(gpux("build", ".", "-p", "openvino", "--json", cwd=folder))
    assert first["provider"] == "cpu" and "built for cpu instead of openvino" in first["warnings"]
    [attempt] = first["attempts"]
    assert (attempt["provider"], attempt["stage"]) == ("openvino", "build")
    assert "remembered" not in attempt["reason"], "the first build tried it"

    strict = gpux("build", ".", "-p", "openvino", "--strict", cwd=folder)
    assert strict.returncode == 1 and "OpenVINO cannot convert" in strict.stderr, strict.stderr
    assert "Traceback" not in strict.stderr
    import gpux as api
    from gpux.errors import ProviderUnavailable

    with pytest.raises(ProviderUnavailable, match=r"^openvino could not build the model: OpenVINO cannot convert"):
        api.load(folder, provider="openvino", strict=True)  # OpenVINO is here: the model is what it cannot take

    planned = json_of(gpux("build", ".", "--dry-run", "--json", cwd=folder))
    assert planned["provider"] == "cpu", "a dry run plans what the build builds on"
    assert [a["provider"] for a in planned["skipped"] if a["stage"] == "build"] == ["openvino"]

    again = gpux("-v", "build", ".", "--json", cwd=folder)  # auto: another request, a full build
    doc = json_of(again)
    assert doc["provider"] == "cpu" and "building openvino-ir" not in again.stderr, "not re-tried"
    assert "remembered" in doc["attempts"][-1]["reason"]

    (folder / "model.onnx").write_bytes(train("rf-iris", seed=1).onnx)  # retrained: another model
    changed = gpux("-v", "build", ".", "--json", cwd=folder)
    doc = json_of(changed)
    assert "building openvino-ir" in changed.stderr, "a changed model is tried again"
    assert doc["provider"] == "cpu" and "remembered" not in doc["attempts"][-1]["reason"]


def test_lossy_targets_that_convert_nothing_are_the_fp32_artifact_and_say_so(
        trained: dict[str, Trained], tmp_path: Path) -> None:
    folder = project(tmp_path, trained["gb-cancer"], "gb")
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("cpu: {precision: fp32}", "cpu: {precision: int8}"))
    doc = json_of(gpux("build", ".", "-p", "cpu", "--json", cwd=folder))
    [target] = doc["targets"]
    assert (target["target"]["id"], target["target"]["precision"]) == ("onnx-fp32-basic", "fp32")
    assert target["verification"]["status"] == "verified"
    assert any("no operator was quantized; built as fp32 instead (onnx-fp32-basic)" in w for w in doc["warnings"])
    fp32_key = target["key"]
    ran = json_of(gpux("run", ".", "-p", "cpu", "--json", "--file", "rows.npz", cwd=folder))
    assert ran["precision"] == "fp32", "no int8 claimed where nothing was quantized"
    strict = gpux("build", ".", "-p", "cpu", "--strict", cwd=folder)
    assert strict.returncode == 1 and "--strict refuses" in strict.stderr, strict.stderr

    yml.write_text(yml.read_text().replace("cpu: {precision: int8}", "cpu: {precision: fp16}"))
    doc = json_of(gpux("build", ".", "-p", "cpu", "--json", cwd=folder))
    [target] = doc["targets"]
    assert target["key"] == fp32_key, "the same fp32 artifact, keyed as fp32"
    [said] = [w for w in doc["warnings"] if "fp16 converts nothing" in w]
    assert "TreeEnsembleClassifier" in said and "already-quantized" not in said and "quantized" not in said


def test_fp16_keeps_ai_onnx_ml_operators_in_fp32_and_converts_the_rest(tmp_path: Path) -> None:
    """A scaler (ai.onnx.ml) before a small MLP (MatMul, Add, Relu, Softmax): the MLP runs at fp16, the scaler
    stays fp32, and the labels agree with scikit-learn's."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_iris(return_X_y=True)
    x = x.astype(np.float32)
    mlp = MLPClassifier(hidden_layer_sizes=(8,), max_iter=300, random_state=0)
    model = make_pipeline(StandardScaler(), mlp).fit(x, y)
    onx = to_onnx(model, x[:1], options={id(mlp): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    folder = project(tmp_path, Trained(onx.SerializeToString(), x, model.predict(x), model.predict_proba(x)), "mlp")
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("cpu: {precision: fp32}", "cpu: {precision: fp16}"))
    doc = json_of(gpux("build", ".", "-p", "cpu", "--json", cwd=folder))
    [target] = doc["targets"]
    assert target["target"]["id"] == "onnx-fp16-basic"
    info = json.loads((Path(target["path"]).parent / "manifest.json").read_text())["info"]
    assert "Scaler" in info["kept_fp32"] and info["fp16_ops"] >= 4, info
    ran = json_of(gpux("run", ".", "-p", "cpu", "--json", "--file", "rows.npz", cwd=folder))
    assert ran["precision"] == "fp16"
    agree = np.mean(np.array(ran["outputs"]["label"]["data"]) == model.predict(x))
    assert agree >= 0.98, agree


def test_fp16_of_lightgbm_keeps_what_computes_after_its_trees_in_fp32(tmp_path: Path) -> None:
    """onnxmltools' LightGBM classifier: a TreeEnsembleClassifier (ai.onnx.ml) then a Mul on its scores; ONNX
    Runtime's converter would join the fp32 trees to an fp16 Mul that ONNX Runtime does not load. The Mul stays fp32
    with the trees, nothing is left to convert, and the fp32 artifact is built instead and says so."""
    lightgbm = pytest.importorskip("lightgbm")
    pytest.importorskip("onnxmltools")
    from onnxmltools import convert_lightgbm
    from onnxmltools.convert.common.data_types import FloatTensorType
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    x = x.astype(np.float32)
    model = lightgbm.LGBMClassifier(n_estimators=5, num_leaves=7, verbose=-1).fit(x, y)
    onx = convert_lightgbm(model, initial_types=[("X", FloatTensorType([None, x.shape[1]]))], zipmap=False,
                           target_opset=15)
    folder = project(tmp_path, Trained(onx.SerializeToString(), x[:40], model.predict(x[:40]),
                                       model.predict_proba(x[:40])), "lgbm")
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("cpu: {precision: fp32}", "cpu: {precision: fp16}"))
    doc = json_of(gpux("build", ".", "-p", "cpu", "--json", cwd=folder))
    assert doc["targets"][0]["target"]["id"] == "onnx-fp32-basic"
    assert any("so does what computes on their outputs; built as fp32 instead" in w for w in doc["warnings"])
    ran = json_of(gpux("run", ".", "-p", "cpu", "--json", "--file", "rows.npz", cwd=folder))
    assert ran["precision"] == "fp32"
    assert np.array_equal(np.array(ran["outputs"]["label"]["data"]), model.predict(x[:40]))
