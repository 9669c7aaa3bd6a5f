"""Declared outputs and steps against what the model really returns (gpux.model.probe, gpux.model.fit): PP-OCRv4's
trained recognizer from the rapidocr_onnxruntime wheel made time-major ([time, batch, classes], a Transpose added
with onnx.helper), and with metadata that misstates its output; a detector whose output is a raw anchor grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpux.quality.agreement import degenerate

from .conftest import gpux
from .test_answers_outputs import paddle_reading, photo
from .trained import ROOT, ppocr_recognizer_files

SHAPE = "    shape: [1, 120, 6625]            # [batch, time steps (width / 8), blank + 6623 characters + space]\n"
OUT = "softmax_11.tmp_0"


def time_major(source: Path, target: Path, lie: bool = False) -> Path:
    """The recognizer with its output transposed to [time, batch, classes]; `lie`: its metadata says [1, seqlen]."""
    import onnx
    from onnx import helper

    model = onnx.load(str(source))
    out = model.graph.output[0]
    for node in model.graph.node:
        node.output[:] = [f"{o}_ntc" if o == out.name else o for o in node.output]
    model.graph.node.append(helper.make_node("Transpose", [f"{out.name}_ntc"], [out.name], perm=[1, 0, 2]))
    dims = out.type.tensor_type.shape.dim
    if lie:
        del dims[:]
        dims.add().dim_value = 1
        dims.add().dim_param = "seqlen"
    else:
        first, second = dims[0].SerializeToString(), dims[1].SerializeToString()
        dims[0].ParseFromString(second)
        dims[1].ParseFromString(first)
    onnx.save(model, str(target))
    return target


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ppocr_recognizer_files(tmp_path_factory.mktemp("ppocr"))


def example_yml() -> str:
    """The recognizer example's gpux.yml without its verify block (its lines of text are not made here)."""
    return (ROOT / "examples" / "ppocr_recognizer" / "gpux.yml").read_text().split("\nverify:")[0] + "\n"


def project(recognizer: Path, folder: Path, shape: str | None, ctc: str = "", lie: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    time_major(recognizer / "model.onnx", folder / "model.onnx", lie)
    shutil.copy(recognizer / "charset.txt", folder)
    text = example_yml()
    assert SHAPE in text
    text = text.replace(SHAPE, f"    shape: {shape}\n" if shape else "").replace("space: true}", f"space: true{ctc}}}")
    (folder / "gpux.yml").write_text(text)
    return folder


def test_a_time_major_recognizer_reads_what_paddleocr_reads(recognizer: Path, tmp_path: Path) -> None:
    from PIL import Image

    folder = project(recognizer, tmp_path / "tm", "[time, batch, 6625]")
    r = gpux("validate", "--check-model", str(folder / "gpux.yml"))
    assert r.returncode == 3, r.stderr
    line = next(n for n, x in enumerate((folder / "gpux.yml").read_text().splitlines(), 1) if "ctc:" in x)
    assert f"gpux.yml:{line}:" in r.stderr and "postprocess.ctc: ctc reads softmax_11.tmp_0 as [batch, time, " \
        "classes], but softmax_11.tmp_0 returns [120, 1, 6625] for a batch of 1 and [120, 2, 6625] for 2: its batch " \
        "is axis 1; declare ctc: {time_major: true}" in r.stderr, r.stderr
    r = gpux("run", str(folder), str(recognizer / "heading.png"), "-p", "cpu")
    assert r.returncode == 3 and not (folder / ".gpux").exists(), r.stderr  # refused before anything is built

    folder = project(recognizer, tmp_path / "declared", "[time, batch, 6625]", ", time_major: true")
    r = gpux("run", str(folder), str(recognizer / "heading.png"), "-p", "cpu", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    ours = json.loads(r.stdout)["answers"][OUT]
    _, (text, score) = paddle_reading(recognizer / "model.onnx", Image.open(recognizer / "heading.png"))
    assert ours["text"] == text == "Region-based segmentation" and abs(ours["score"] - score) < 0.01


def test_metadata_that_misstates_the_output_gives_way_to_what_it_returns(recognizer: Path, tmp_path: Path) -> None:
    folder = project(recognizer, tmp_path / "declared", "[time, batch, 6625]", ", time_major: true", lie=True)
    said = "the model's metadata says softmax_11.tmp_0 is [1, seqlen] but it returns [120, 1, 6625] on a sample"
    r = gpux("validate", "--check-model", str(folder / "gpux.yml"))
    assert r.returncode == 0 and said in r.stderr, r.stderr
    r = gpux("validate", str(folder / "gpux.yml"))  # without running it: a warning, not a refusal
    assert r.returncode == 0 and "declared rank 3 but the model has rank 2 [1, seqlen] in its metadata" in r.stderr
    for name, shape in (("declared", "[time, batch, 6625]"), ("left-out", None)):
        folder = project(recognizer, tmp_path / name, shape, ", time_major: true", lie=True)
        r = gpux("run", str(folder), str(recognizer / "heading.png"), "-p", "cpu")
        assert r.returncode == 0 and said in r.stderr, r.stderr
        assert '"Region-based segmentation"' in r.stdout, r.stdout
    folder = project(recognizer, tmp_path / "wrong", "[time, batch, 6624]", ", time_major: true", lie=True)
    r = gpux("validate", "--check-model", str(folder / "gpux.yml"))
    assert r.returncode == 3 and "outputs.softmax_11.tmp_0.shape.2: dim 2 is 6624 but the model fixes it to 6625 " \
        "[?, batch, 6625]" in r.stderr, r.stderr


def raw_grid(folder: Path, anchors: int = 40) -> Path:
    """A detector whose output0 [1, anchors, 5 + 2] is a raw YOLOX grid before its decoding: per anchor xy offsets
    in [0, 1], log w/h in [-2, 1], objectness and class logits in [-6, 2]."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    grid = np.concatenate([rng.uniform(0, 1, (anchors, 2)), rng.uniform(-2, 1, (anchors, 2)),
                           rng.uniform(-6, 2, (anchors, 3))], axis=1)[None].astype(np.float32)
    nodes = [helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
             helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
             helper.make_node("Add", ["grid", "nothing"], ["output0"])]
    graph = helper.make_graph(
        nodes, "raw", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 64, 64])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(grid.shape))],
        [numpy_helper.from_array(grid, "grid"), numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "model.onnx"))
    (folder / "gpux.yml").write_text(
        "name: raw\nmodel: {source: model.onnx}\ninputs:\n  images:\n    dtype: float32\n    shape: [1, 3, 64, 64]\n"
        "    preprocess:\n      image: {resize: {letterbox: 64}}\noutputs:\n  output0:\n    dtype: float32\n"
        "    labels: [a, b]\n    postprocess:\n      boxes: {layout: yolox}\n")
    return folder


def test_a_raw_anchor_grid_declared_as_decoded_boxes_is_refused_at_its_line(tmp_path: Path) -> None:
    folder = raw_grid(tmp_path / "raw")
    for args in (("validate", "--check-model", str(folder / "gpux.yml")),
                 ("run", str(folder), str(photo("astronaut.png")), "-p", "cpu")):
        r = gpux(*args)
        assert r.returncode == 3, r.stderr
        assert "gpux.yml:14:14 outputs.output0.postprocess.boxes: output0 cannot hold yolox boxes" in r.stderr, \
            r.stderr
        assert "its widths and heights span [-1.97, 0.944]" in r.stderr and "raw anchor grid" in r.stderr
    text = (folder / "gpux.yml").read_text()
    (folder / "gpux.yml").write_text(text.replace("boxes: {layout: yolox}", "boxes: {layout: yolov8}"))
    r = gpux("validate", "--check-model", str(folder / "gpux.yml"))  # [1, 40, 7] read as [1, 4 + classes, anchors]
    assert r.returncode == 3 and "output0 cannot hold yolov8 boxes" in r.stderr, r.stderr


def test_answers_that_say_nothing_on_every_sample_are_degenerate() -> None:
    assert degenerate("text", ["", "", ""]) == "every text the reference reads is empty"
    assert degenerate("text", ["", "a"]) is None
    zero = (np.array([[5.0, 5, 5, 9], [1, 1, 1, 1]]), np.ones(2), np.zeros(2))
    assert degenerate("boxes", [zero, zero]) == "every box the reference finds is zero-sized"
    some = (np.array([[5.0, 5, 6, 9]]), np.ones(1), np.zeros(1))
    assert degenerate("boxes", [zero, some]) is None
    none = (np.zeros((0, 4)), np.zeros(0), np.zeros(0))
    assert degenerate("boxes", [none]) is None  # nothing found is an answer


KEEP_ASPECT = """name: lines
model: {source: model.onnx}
inputs:
  x:
    dtype: float32
    shape: [batch, 3, 48, width]
    preprocess:                  # height 48, the width following the aspect ratio
      image: {resize: {shorter: 48}, color: bgr, scale: 1/255, mean: [0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}
outputs:
  softmax_11.tmp_0:
    dtype: float32
    postprocess:
      ctc: {charset: charset.txt, blank: 0, space: true}
"""


@pytest.fixture(scope="module")
def lines(recognizer: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recognizer fed lines of any width (keep-aspect to height 48), and two lines of the page of different
    widths."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("lines")
    for name in ("model.onnx", "charset.txt", "heading.png"):
        shutil.copy(recognizer / name, folder)
    Image.open(photo("page.png")).crop((0, 58, 384, 82)).save(folder / "body.png")
    (folder / "gpux.yml").write_text(KEEP_ASPECT)
    return folder


def test_a_file_whose_tensor_cannot_fit_the_input_is_refused_before_any_provider(lines: Path, tmp_path: Path) -> None:
    from PIL import Image

    Image.open(lines / "heading.png").rotate(90, expand=True).save(tmp_path / "tall.png")  # 30 x 300: taller
    r = gpux("run", str(lines), str(tmp_path / "tall.png"), "-p", "cpu", "-v")
    assert r.returncode == 2, r.stderr
    assert f"{tmp_path / 'tall.png'}: input 'x' has shape [1, 3, 480, 48] but dim 2 must be 48 [batch, 3, 48, width]" \
        in r.stderr, r.stderr
    assert "first-inference" not in r.stderr and "Traceback" not in r.stderr


@pytest.fixture(scope="module")
def time_major_lines(lines: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same, the model time-major: [time, batch, classes]."""
    folder = tmp_path_factory.mktemp("tm_lines")
    time_major(lines / "model.onnx", folder / "model.onnx")
    for name in ("charset.txt", "heading.png", "body.png"):
        shutil.copy(lines / name, folder)
    (folder / "gpux.yml").write_text(KEEP_ASPECT.replace("name: lines", "name: tm-lines")
                                     .replace("space: true}", "space: true, time_major: true}"))
    return folder


@pytest.mark.parametrize("major", ["batch", "time"])
def test_serve_answers_every_file_of_a_request_of_different_widths(lines: Path, time_major_lines: Path,
                                                                   major: str) -> None:
    """Two files of one width run as one batch (split into rows on the batch axis, axis 1 when time-major), the
    other alone; every answer in request order."""
    import base64

    import gpux as api

    from .serving import ServerThread, error_of, post

    lines, name = (lines, "lines") if major == "batch" else (time_major_lines, "tm-lines")
    sent = ("heading.png", "body.png", "heading.png")
    with api.load(lines, provider="cpu", strict=True) as session:
        want = [session.predict(str(lines / n))[OUT] for n in sent]
    assert [w["text"] for w in want[:2]] == ["Region-based segmentation",
                                              "background.These markers are pixels that we can label"]
    data = [base64.b64encode((lines / n).read_bytes()).decode() for n in sent]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [3], "data": data}]})
    with ServerThread([lines], provider="cpu") as server:
        status, _, reply = post(server.http, f"/v2/models/{name}/infer", body)
        assert status == 200, reply
        got = [json.loads(x) for x in json.loads(reply)["outputs"][0]["data"]]
        tensors = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [3], "data": data}],
                              "parameters": {"answers": False}})
        status, _, reply = post(server.http, f"/v2/models/{name}/infer", tensors)
    assert [g["text"] for g in got] == [w["text"] for w in want]  # in request order, each file's own
    np.testing.assert_allclose([g["score"] for g in got], [w["score"] for w in want], atol=1e-4)
    assert status == 400 and "output 'softmax_11.tmp_0' has shapes" in error_of(reply), reply


def test_inputs_every_runtime_rejects_are_the_inputs_fault_with_the_whole_message(tmp_path: Path) -> None:
    """x [1, n] reshaped to [1, 3, 4]: only n = 12 runs; other sizes pass gpux's checks (n is dynamic) and each
    runtime rejects them."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "to"], ["y"])], "reshape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])],
        [numpy_helper.from_array(np.array([1, 3, 4], np.int64), "to")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "model.onnx"))
    (tmp_path / "gpux.yml").write_text("name: reshape\nmodel: {source: model.onnx}\nshapes: {n: 12}\n")
    ok = gpux("run", str(tmp_path), "--input", json.dumps({"x": [list(range(12))]}), "-p", "cpu")
    assert ok.returncode == 0, ok.stderr
    for strict in ((), ("--strict",)):
        r = gpux("run", str(tmp_path), "--input", json.dumps({"x": [[1.0, 2.0, 3.0]]}), "-p", "cpu", *strict)
        assert r.returncode == 2, r.stderr
        assert "cpu rejected the inputs, and so does the model on ONNX Runtime" in r.stderr, r.stderr
        assert "first-inference" not in r.stderr
        assert "The input tensor cannot be reshaped to the requested shape. Input shape:{1,3}, requested " \
            "shape:{1,3,4}" in r.stderr, r.stderr  # the runtime's message, past its first line's index


def test_validate_check_model_refuses_what_run_refuses(recognizer: Path, tmp_path: Path) -> None:
    shutil.copy(recognizer / "model.onnx", tmp_path)
    lines = (recognizer / "charset.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "charset.txt").write_text("".join(lines[:-1]), encoding="utf-8")
    text = example_yml().replace(SHAPE, "")
    (tmp_path / "gpux.yml").write_text(text)
    said = "postprocess.ctc.charset: 6622 charset entries and the blank and the space make 6624 classes, not 6625"
    for args in (("validate", "--check-model", str(tmp_path / "gpux.yml")),
                 ("run", str(tmp_path), str(recognizer / "heading.png"), "-p", "cpu")):
        r = gpux(*args)
        assert r.returncode == 3 and said in r.stderr, r.stderr
