"""The answer-kind plug-in point (gpux.config.kinds): a kind defined here alone — its config block, decode, judge
and compare, floors, fit check, picture and lines — registered once, works through `gpux run` (text, --json,
--save), `Session.predict`, `gpux serve` and a build's verification, which judges it and fails it under its floor;
a bad value in its block is a config error at its line. And the built-in kinds each have one row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, ConfigDict, Field

from gpux.cli.main import cli
from gpux.config.kinds import ANSWER_KINDS, AnswerKind, register
from gpux.config.steps import ADDED

from .conftest import write

HERE = "tests.test_answer_kinds"


class Bright(BaseModel):
    """The kind's block: `bright: {level: 0.5}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    level: float = Field(0.5, ge=0, le=1)


def decode(row: Any, how: Any) -> dict[str, Any]:
    """A row of channel means → the channels brighter than the level."""
    return {"channels": [int(i) for i in np.flatnonzero(np.asarray(row) > how.block.level)]}


def judge(row: Any, how: Any) -> tuple[int, ...]:
    return tuple(decode(row, how)["channels"])


def compare(reference: list[Any], got: list[Any]) -> dict[str, Any]:
    return {"rows": len(reference), "exact_match": sum(r == g for r, g in zip(reference, got, strict=True)) /
            max(len(reference), 1)}


def fit(project: Any, name: str, post: Any, real: Any) -> str | None:
    shape = real.outputs[name]
    return None if len(shape) == 2 else f"bright reads [batch, channels]; {name} returns {shape}"


def draw(canvas: Any, name: str, answer: dict[str, Any]) -> None:
    canvas.lines.append(f"{name}: bright {answer['channels']}")


def lines(name: str, answer: dict[str, Any]) -> list[str]:
    return [f"  {name}: bright channels {answer['channels']}"]


def text(record: dict[str, Any]) -> str:
    return f"bright exact {record['exact_match']:.0%}"


KIND = AnswerKind(key="bright", record="bright", rank=1, decode=f"{HERE}:decode", judge=f"{HERE}:judge",
                  compare=f"{HERE}:compare", floors=(("exact_match", "min_exact_match", "rows answering the same"),),
                  fit=f"{HERE}:fit", draw=f"{HERE}:draw", lines=f"{HERE}:lines", text=f"{HERE}:text", config=Bright)


@pytest.fixture(scope="module", autouse=True)
def registered() -> Any:
    register(KIND)
    yield KIND
    ANSWER_KINDS.pop("bright")
    ADDED.pop("bright")


def means_model(path: Path, scale: float = 1.0) -> Path:
    """[batch, 3, 8, 8] → the mean of each channel (x `scale`): [batch, 3]."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("ReduceMean", ["image"], ["m"], axes=[2, 3], keepdims=0),
             helper.make_node("Mul", ["m", "k"], ["means"])]
    graph = helper.make_graph(nodes, "means", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                                             ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("means", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor("k", TensorProto.FLOAT, [], [scale])])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


CONFIG = """\
name: bright
version: 1.0.0
model: {source: model.onnx}
inputs:
  image:
    dtype: float32
    shape: [batch, 3, 8, 8]
    preprocess:
      image: {resize: {exact: 8}, scale: 1/255}
outputs:
  means:
    dtype: float32
    shape: [batch, 3]
    postprocess:
      bright: {level: 0.5}
providers:
  cpu: {precision: fp32}
verify: {data: data.npz}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    folder = tmp_path_factory.mktemp("bright")
    means_model(folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    Image.new("RGB", (16, 12), (200, 40, 180)).save(folder / "pink.png")
    Image.new("RGB", (8, 8), (10, 220, 20)).save(folder / "green.png")
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (40, 1, 3, 8, 8)).astype(np.float32) ** rng.uniform(0.2, 5, (40, 1, 3, 1, 1))
    np.savez(folder / "data.npz", image=images.astype(np.float32))
    return folder


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_run_answers_saves_and_writes_the_kind(project: Path, tmp_path: Path) -> None:
    from PIL import Image

    store = str(project / "store")
    r = invoke("run", str(project), str(project / "pink.png"), str(project / "green.png"), "--store", store,
               "-p", "cpu", "--json", "--save", str(tmp_path / "saved"))
    assert r.exit_code == 0, r.output
    docs = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert [d["answers"]["means"] for d in docs] == [{"channels": [0, 2]}, {"channels": [1]}]
    saved = Image.open(docs[0]["saved"])
    assert saved.size[1] > 12  # the kind's caption band below the 16x12 picture
    shown = invoke("run", str(project), str(project / "pink.png"), "--store", store, "-p", "cpu")
    assert "means: bright channels [0, 2]" in shown.output


def test_predict_and_serve_answer_the_kind(project: Path) -> None:
    import base64

    import gpux as api

    from .serving import ServerThread, post

    with api.load(project, provider="cpu", strict=True, store_dir=project / "store") as session:
        want = [session.predict(str(project / n))["means"] for n in ("pink.png", "green.png")]
    assert want == [{"channels": [0, 2]}, {"channels": [1]}]
    data = [base64.b64encode((project / n).read_bytes()).decode() for n in ("pink.png", "green.png")]
    body = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2], "data": data}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/bright/infer", body)
    assert status == 200, reply
    out = json.loads(reply)["outputs"][0]
    assert out["datatype"] == "BYTES" and [json.loads(x) for x in out["data"]] == want


def test_verification_judges_the_kind_and_fails_it_under_its_floor(project: Path, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    r = invoke("build", str(project), "--store", store, "-p", "cpu", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    found = json.dumps(doc)
    assert '"kind": "bright"' in found and '"exact_match": 1.0' in found, found[:2000]
    # an artifact that answers other channels (its outputs scaled by 0.8) fails the kind's floor, saying which
    from gpux.config.load import load_config
    from gpux.documents import AnswersRecord
    from gpux.quality.agreement import Runs, add_answers
    from gpux.quality.metrics import Verification

    spec = load_config(project / "gpux.yml").config.outputs["means"].postprocess  # type: ignore[index,union-attr]
    rows = np.load(project / "data.npz")["image"].reshape(-1, 3, 8, 8).mean(axis=(2, 3))
    result = Verification(passed=True, precision="fp32", tolerances={"min_exact_match": 1.0}, outputs={"means": {}},
                          failures=[], samples=1)
    add_answers(result, {"means": spec}, Runs(["means"], [[rows]], [[rows * 0.8]]), {}, judged=True)
    record: AnswersRecord = result.outputs["means"]["answers"]
    assert record["kind"] == "bright" and record["exact_match"] < 1
    assert result.failures and "rows answering the same" in result.failures[0] and not result.passed


def test_a_bad_block_and_a_misfit_are_config_errors_at_their_line(project: Path, tmp_path: Path) -> None:
    write(tmp_path / "gpux.yml", CONFIG.replace("level: 0.5", "level: 2"))
    means_model(tmp_path / "model.onnx")
    r = invoke("validate", str(tmp_path))
    assert r.exit_code == 3 and "gpux.yml:15" in r.output and "postprocess.bright.level" in r.output, r.output
    write(tmp_path / "gpux.yml", CONFIG.replace("bright: {level: 0.5}", "bright: {level: 0.5}\n      topk: 1"))
    r = invoke("validate", str(tmp_path))
    assert r.exit_code == 3 and "topk and bright both set" in r.output, r.output


def test_every_built_in_kind_is_one_row_naming_code_that_exists() -> None:
    from gpux.config.kinds import step
    from gpux.config.steps import ANSWER_KEYS

    assert set(ANSWER_KEYS) <= set(ANSWER_KINDS)
    for kind in ANSWER_KINDS.values():
        for role in ("decode", "judge", "compare", "empty", "counts", "text", "fit", "shape", "draw", "lines",
                     "encode"):
            assert getattr(kind, role) is None or callable(step(kind, role)), (kind.key, role)
    with pytest.raises(ValueError, match="a key of its own"):
        register(ANSWER_KINDS["boxes"])


def test_init_proposes_the_kind_an_outputs_shape_matches(tmp_path: Path) -> None:
    from gpux.cli.init import render
    from gpux.model.tensor import Tensor

    image = Tensor("images", "float32", ("batch", 3, 640, 640))
    outputs = [Tensor("output0", "float32", ("batch", 84, 8400)), Tensor("pose", "float32", ("batch", 56, 8400)),
               Tensor("maps", "float32", ("batch", 1, 640, 640)), Tensor("logits", "float32", ("batch", 1000))]
    text = render(tmp_path / "model.onnx", [image], outputs, "onnx", [], ["cpu"])
    lines = text.splitlines()
    after = {line.split(":")[0].strip(): lines[i + 1] for i, line in enumerate(lines) if line.startswith("  ") and
             "dtype" in line}
    assert "boxes: {layout: yolov8}" in after["output0"] and "80 classes" in after["output0"]
    assert "keypoints: {points: 17, dims: 3}" in after["pose"] and "boxes" not in after["pose"]
    assert "text_boxes" in after["maps"] and "#   postprocess" not in after["logits"]
