"""Classic ML models as their users convert them: scikit-learn pipelines (skl2onnx) and LightGBM (onnxmltools),
trained on scikit-learn's bundled datasets with string class names. `gpux init` proposes their outputs with the
class names the model carries, they build, and `gpux run` answers what scikit-learn answers on held-out rows
(labels all equal, probabilities within 1e-4); skl2onnx's default ZipMap output builds, runs and serves."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from gpux.cli.main import cli

from .conftest import ROOT, gpux
from .serving import ServerThread, post

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning")  # SVC(probability),
# onnx's helper on the converters' attributes

OPSETS = {"": 17, "ai.onnx.ml": 3}
CLASSIFIERS = {  # name -> (bundled dataset, the estimator after a StandardScaler: "module:class", its options)
    "logistic_iris": ("iris", "sklearn.linear_model:LogisticRegression", {"max_iter": 500}),
    "forest_wine": ("wine", "sklearn.ensemble:RandomForestClassifier", {"n_estimators": 10, "max_depth": 4}),
    "boosting_cancer": ("breast_cancer", "sklearn.ensemble:GradientBoostingClassifier",
                        {"n_estimators": 10, "max_depth": 2}),
    "svc_iris": ("iris", "sklearn.svm:SVC", {"probability": True}),
    # scikit-learn's replacement for SVC(probability=True): probabilities averaged by plain ONNX ops, the class
    # names only in the constant the label is picked from
    "calibrated_wine": ("wine", "sklearn.calibration:CalibratedClassifierCV", {"estimator": "sklearn.svm:SVC",
                                                                               "ensemble": False}),
}


@functools.cache
def rows(dataset: str) -> tuple[Any, Any, Any, Any]:
    """A bundled dataset split 70/30 (seeded): train and held-out rows as float32, class names as strings."""
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    data = getattr(datasets, f"load_{dataset}")()
    x = data.data.astype(np.float32)
    y = np.asarray(data.target_names)[data.target] if hasattr(data, "target_names") else data.target
    return tuple(train_test_split(x, y, test_size=0.3, random_state=0))


@functools.cache
def fitted(name: str) -> Any:
    import pkgutil

    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    dataset, estimator, options = CLASSIFIERS[name]
    x_train, _, y_train, _ = rows(dataset)
    inner = {k: pkgutil.resolve_name(v)() for k, v in options.items() if k == "estimator"}
    seeded = {} if inner else {"random_state": 0}
    model = pkgutil.resolve_name(estimator)(**{**options, **inner, **seeded})
    return make_pipeline(StandardScaler(), model).fit(x_train, y_train)


def converted(name: str, zipmap: bool) -> bytes:
    from skl2onnx import to_onnx

    model = fitted(name)
    x_test = rows(CLASSIFIERS[name][0])[1]
    options = None if zipmap else {id(model): {"zipmap": False}}
    return to_onnx(model, x_test[:1], options=options, target_opset=OPSETS).SerializeToString()


def gpux_cli(*args: str) -> str:
    """The CLI in-process; its stdout (exit 0 asserted)."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def initialised(folder: Path, model: bytes) -> dict[str, Any]:
    """model.onnx in `folder`, `gpux init`'s gpux.yml beside it (returned parsed), built as it comes (no provider
    named: past a provider that cannot convert ai.onnx.ml operators) and verified."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(model)
    gpux_cli("init", str(folder / "model.onnx"))
    built = CliRunner().invoke(cli, ["build", str(folder)], catch_exceptions=False)
    assert built.exit_code == 0 and "verified at fp32" in built.output, built.output
    return yaml.safe_load((folder / "gpux.yml").read_text())


def answered(folder: Path, x: Any) -> dict[str, Any]:
    """`gpux run FOLDER --file rows.npz --json`: each output's data."""
    np.savez(folder / "rows.npz", **{next(iter(yaml.safe_load((folder / "gpux.yml").read_text())["inputs"])): x})
    doc = json.loads(gpux_cli("run", str(folder), "--file", str(folder / "rows.npz"), "--json"))
    assert doc["provider"] == "cpu", doc["attempts"]
    return {name: entry["data"] for name, entry in doc["outputs"].items()}


def same_answers(got: dict[str, Any], label: str, probabilities: str, model: Any, x: Any) -> None:
    assert got[label] == model.predict(x).tolist()  # every held-out row's class name
    np.testing.assert_allclose(np.asarray(got[probabilities]), model.predict_proba(x), atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", list(CLASSIFIERS))
def test_tensor_output_classifiers_answer_as_scikit_learn(name: str, tmp_path: Path) -> None:
    model, x_test = fitted(name), rows(CLASSIFIERS[name][0])[1]
    config = initialised(tmp_path / name, converted(name, zipmap=False))
    outputs = config["outputs"]
    assert outputs["label"] == {"dtype": "string", "shape": ["batch"]}
    assert outputs["probabilities"]["labels"] == model.classes_.tolist()  # named without typing them
    same_answers(answered(tmp_path / name, x_test), "label", "probabilities", model, x_test)


def test_a_zipmap_classifier_builds_runs_and_serves_with_its_class_names(tmp_path: Path) -> None:
    model, x_test = fitted("boosting_cancer"), rows("breast_cancer")[1]
    folder = tmp_path / "zipmap"
    config = initialised(folder, converted("boosting_cancer", zipmap=True))
    assert config["outputs"]["output_probability"] == {"dtype": "float32", "shape": ["batch", 2],
                                                       "labels": ["benign", "malignant"]}
    got = answered(folder, x_test)
    same_answers(got, "output_label", "output_probability", model, x_test)
    with ServerThread([folder], provider="cpu") as server:
        body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": list(x_test[:3].shape),
                            "data": x_test[:3].ravel().tolist()}],
                "outputs": [{"name": "output_label"}, {"name": "output_probability",
                                                       "parameters": {"classification": 1}}]}
        status, _, reply = post(server.http, "/v2/models/zipmap/infer", json.dumps(body),
                                {"Content-Type": "application/json"})
        assert status == 200, reply
        out = {o["name"]: o for o in json.loads(reply)["outputs"]}
        assert out["output_label"]["datatype"] == "BYTES"
        assert out["output_label"]["data"] == model.predict(x_test[:3]).tolist()
        best = [c.split(":")[2] for c in out["output_probability"]["data"]]  # score:index:label
        assert best == model.predict(x_test[:3]).tolist()
        status, _, reply = post(server.http, "/v2/models/zipmap", "", method="GET")
        shown = {o["name"]: o for o in json.loads(reply)["outputs"]}
        assert shown["output_probability"] == {"name": "output_probability", "datatype": "FP32", "shape": [-1, 2]}


def test_class_names_come_from_the_model_where_gpux_yml_names_none(tmp_path: Path) -> None:
    """A hand-written gpux.yml without labels: top-k answers, run's text and JSON name the model's classes."""
    import gpux

    model, x_test = fitted("logistic_iris"), rows("iris")[1]
    (tmp_path / "model.onnx").write_bytes(converted("logistic_iris", zipmap=True))
    (tmp_path / "gpux.yml").write_text(
        "name: iris\nversion: 1\nmodel: {source: model.onnx}\n"
        "inputs: {X: {dtype: float32, shape: [batch, 4]}}\n"
        "outputs:\n  output_label: {dtype: string, shape: [batch]}\n"
        "  output_probability: {dtype: float32, shape: [batch, 3], postprocess: {topk: 2}}\n"
        "runtime: {backend: cpu}\n")
    session = gpux.load(tmp_path, provider="cpu")
    answers = session.predict({"X": x_test[:4]})
    assert [a["output_probability"][0]["label"] for a in answers] == model.predict(x_test[:4]).tolist()
    assert [a["output_label"] for a in answers] == model.predict(x_test[:4]).tolist()
    doc = json.loads(gpux_cli("run", str(tmp_path), "--input", json.dumps({"X": x_test[:2].tolist()}), "--json"))
    top = doc["outputs"]["output_probability"]["top"]
    assert [row[0]["label"] for row in top] == model.predict(x_test[:2]).tolist()


def test_a_regressor_answers_as_scikit_learn(tmp_path: Path) -> None:
    from skl2onnx import to_onnx
    from sklearn.ensemble import HistGradientBoostingRegressor

    x_train, x_test, y_train, _ = rows("diabetes")
    model = HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(x_train, y_train)
    config = initialised(tmp_path / "hgb", to_onnx(model, x_test[:1], target_opset=OPSETS).SerializeToString())
    [(name, spec)] = config["outputs"].items()
    assert spec == {"dtype": "float32", "shape": ["batch", 1]}  # a value, not class scores: no labels
    got = np.asarray(answered(tmp_path / "hgb", x_test)[name])[:, 0]
    np.testing.assert_allclose(got, model.predict(x_test), rtol=1e-5)


@pytest.mark.parametrize("zipmap", [False, True])
def test_lightgbm_converted_by_onnxmltools_answers_as_lightgbm(zipmap: bool, tmp_path: Path) -> None:
    """onnxmltools writes the label output's shape as [1]; it returns a label per row, and gpux goes by that."""
    lightgbm = pytest.importorskip("lightgbm")
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType

    x_train, x_test, y_train, _ = rows("wine")
    model = lightgbm.LGBMClassifier(n_estimators=10, num_leaves=7, random_state=0, verbose=-1).fit(x_train, y_train)
    onx = onnxmltools.convert_lightgbm(model, initial_types=[("input", FloatTensorType([None, x_train.shape[1]]))],
                                       zipmap=zipmap, target_opset=15)
    assert onx.graph.output[0].type.tensor_type.shape.dim[0].dim_value == 1  # what the metadata says
    config = initialised(tmp_path / "lgbm", onx.SerializeToString())
    assert config["outputs"]["label"] == {"dtype": "string", "shape": ["batch"]}
    assert config["outputs"]["probabilities"]["labels"] == model.classes_.tolist()
    same_answers(answered(tmp_path / "lgbm", x_test), "label", "probabilities", model, x_test)


def test_a_sequence_output_gpux_cannot_answer_names_the_converters_option(tmp_path: Path) -> None:
    """A ZipMap's maps gathered into another sequence is not the probabilities: refused at build, with the fix."""
    import onnx
    from onnx import TensorProto, helper

    zipmap = helper.make_node("ZipMap", ["p"], ["maps"], domain="ai.onnx.ml", classlabels_strings=["a", "b"])
    first = helper.make_node("SequenceAt", ["maps", "zero"], ["m0"])
    again = helper.make_node("SequenceConstruct", ["m0"], ["out"])
    graph = helper.make_graph(
        [zipmap, first, again], "zipped", [helper.make_tensor_value_info("p", TensorProto.FLOAT, ["batch", 2])],
        [helper.make_value_info("out", helper.make_sequence_type_proto(helper.make_map_type_proto(
            TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, []))))],
        [helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    onnx.save(model, str(tmp_path / "model.onnx"))
    result = gpux("build", str(tmp_path / "model.onnx"), "-p", "cpu")
    assert result.returncode == 3, result.stderr
    [line] = result.stderr.splitlines()
    assert "output 'out' is not a tensor" in line
    assert "options={id(model): {'zipmap': False}}" in line and "zipmap=False" in line


def test_the_classic_ml_example_answers_as_its_estimator(tmp_path: Path) -> None:
    """examples/classic_ml as committed, with what its make_model.py writes: skl2onnx's defaults, class names
    from the model (its gpux.yml types none), the held-out rows answered as scikit-learn answers them."""
    import gpux
    from tests.trained import _example, example_project

    folder = example_project("classic_ml", tmp_path)
    model, x_test, _ = _example("classic_ml").train()
    gpux_cli("build", str(folder))
    doc = json.loads(gpux_cli("run", str(folder), "--file", str(folder / "held_out.npz"), "--json"))
    got = {name: entry["data"] for name, entry in doc["outputs"].items()}
    same_answers(got, "output_label", "output_probability", model, x_test)
    answers = gpux.load(folder).predict({"X": x_test[:3]})
    assert [[t["label"] for t in a["output_probability"]] for a in answers] == \
        [model.classes_[np.argsort(-p, kind="stable")[:2]].tolist() for p in model.predict_proba(x_test[:3])]



def test_the_docs_commands_run_as_printed(tmp_path: Path) -> None:
    """docs/classic-ml.md's shell block, line by line in a fresh copy of the example, prints what the page shows."""
    import os
    import re
    import subprocess
    import sys

    page = (ROOT / "docs" / "classic-ml.md").read_text()
    [commands] = re.findall(r"```bash\n(.*?)```", page, flags=re.S)
    [shown] = re.findall(r"```text\n(.*?)```", page, flags=re.S)
    shutil.copytree(ROOT / "examples" / "classic_ml", tmp_path / "examples" / "classic_ml",
                    ignore=shutil.ignore_patterns(".gpux", "*.onnx", "*.npz"))
    words = {"python": f'"{sys.executable}"', "gpux": f'"{sys.executable}" -m gpux'}
    lines = [line.split("  #")[0].strip() for line in commands.splitlines() if line.strip()]
    script = "set -e\n" + "".join(words[line.split()[0]] + line[len(line.split()[0]):] + "\n" for line in lines)
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=dict(os.environ), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "warning:" not in r.stderr, r.stderr
    assert all(line in r.stdout.splitlines() for line in shown.splitlines()), r.stdout


def test_a_zipmap_of_integer_classes_behind_an_identity_is_answered_with_their_names(tmp_path: Path) -> None:
    """Any graph ending in ZipMap maps (classes 3 and 7 here, an Identity after it): the probabilities it reads."""
    import onnx
    from onnx import TensorProto, helper

    import gpux

    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=1),
             helper.make_node("ZipMap", ["p"], ["maps"], domain="ai.onnx.ml", classlabels_int64s=[3, 7]),
             helper.make_node("Identity", ["maps"], ["scores"])]
    maps = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    graph = helper.make_graph(nodes, "ints", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
                              [helper.make_value_info("scores", maps)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("ai.onnx.ml", 3)]),
              str(tmp_path / "model.onnx"))
    session = gpux.load(tmp_path / "model.onnx", provider="cpu")
    x = np.array([[0.0, 1.0], [2.0, 0.0]], np.float32)
    got = session.run({"x": x})["scores"]
    np.testing.assert_allclose(got, np.exp(x) / np.exp(x).sum(1, keepdims=True), rtol=1e-6)
    assert session.project.labels_of("scores") == ["3", "7"]
