"""Declared post-processing beyond classes and YOLOv8 boxes: the YOLOv5 and YOLOX box layouts (generated ONNX models
whose constant outputs hold known boxes, mapped back through a letterbox), greedy CTC decoding (PP-OCRv4's trained
recognizer from the rapidocr_onnxruntime wheel reading a line of skimage's photo of a printed page, compared with
PaddleOCR's own decoder), and `gpux run NAME FILES --save DIR` on the trained YOLOv8 detector."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest

from gpux.answers.post import ctc_greedy, decode_boxes, softmax
from gpux.config.steps import BOX_LAYOUTS, Boxes, BoxLayoutName, Ctc

from .conftest import gpux
from .trained import ROOT, package_file, ppocr_recognizer_files, yolov8_detector_example

LABELS = ["person", "cat", "dog"]
# Boxes in the original 640 x 480 image (x1, y1, x2, y2); letterboxed into 320 x 320 they are halved and moved
# 40 px down. Rows: box, objectness, class scores. Expected (score = objectness x class score, best first):
# the dog 0.855, the person 0.72, the cat on the person's box 0.45 (other class: not suppressed); the person's
# shifted twin (0.54) is suppressed, the confident class of a low objectness (0.2 x 0.99) is under 0.25.
ROWS = [((380, 100, 620, 400), 0.95, (0.0, 0.05, 0.9)),
        ((100, 60, 300, 260), 0.9, (0.8, 0.1, 0.0)),
        ((110, 70, 310, 270), 0.9, (0.6, 0.0, 0.1)),
        ((100, 60, 300, 260), 0.9, (0.1, 0.5, 0.0)),
        ((0, 0, 60, 60), 0.2, (0.99, 0.0, 0.0))]
WANT = [("dog", 0.855, (380, 100, 620, 400)), ("person", 0.72, (100, 60, 300, 260)),
        ("cat", 0.45, (100, 60, 300, 260))]
DETECTOR_YML = """\
name: {layout}-detector
model: {{source: model.onnx}}
inputs:
  images:
    dtype: float32
    shape: [1, 3, 320, 320]
    preprocess:
      image: {{resize: {{letterbox: 320}}, scale: 1/255}}
outputs:
  output0:
    dtype: float32
    shape: {shape}
    labels: [person, cat, dog]
    postprocess:
      boxes: {{layout: {layout}, score: 0.25, iou: 0.45}}
"""


def photo(name: str) -> Path:
    return package_file("skimage", "data", name)


def layout_output(layout: str) -> Any:
    """ROWS in the layout's output, [1, 4 + 3, 5] or [1, 5, 5 + 3], boxes as cx, cy, w, h in tensor pixels."""
    rows = []
    for (x1, y1, x2, y2), obj, classes in ROWS:
        t = np.array([x1, y1, x2, y2], np.float32) / 2 + [0, 40, 0, 40]
        box = [(t[0] + t[2]) / 2, (t[1] + t[3]) / 2, t[2] - t[0], t[3] - t[1]]
        scores = [obj, *classes] if BOX_LAYOUTS[layout].objectness else [obj * c for c in classes]
        rows.append([*box, *scores])
    out = np.array(rows, np.float32)
    return (out.T if BOX_LAYOUTS[layout].channels_axis == 1 else out)[None]


def constant_detector(folder: Path, layout: str) -> Path:
    """A model whose output0 is `layout_output(layout)` whatever the image (+ 0 x its mean, so the input is used)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    out = layout_output(layout)
    nodes = [helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
             helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
             helper.make_node("Add", ["boxes", "nothing"], ["output0"])]
    graph = helper.make_graph(
        nodes, layout, [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 320, 320])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(out.shape))],
        [numpy_helper.from_array(out, "boxes"), numpy_helper.from_array(np.zeros((), np.float32), "zero")])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "model.onnx"))
    (folder / "gpux.yml").write_text(DETECTOR_YML.format(layout=layout, shape=list(out.shape)))
    return folder


def test_the_layouts_table_is_what_the_schema_offers() -> None:
    assert get_args(BoxLayoutName) == tuple(BOX_LAYOUTS)
    schema = json.loads((ROOT / "schemas" / "gpux.schema.json").read_text())
    assert schema["$defs"]["Boxes"]["properties"]["layout"]["enum"] == list(BOX_LAYOUTS)


@pytest.mark.parametrize("layout", [n for n, x in BOX_LAYOUTS.items() if not x.grid and not x.angle and not x.heads])
# grids: test_answers_grid; oriented boxes: test_obb; one output per stride: test_box_heads
def test_each_layout_answers_its_known_boxes_in_the_original_image(layout: str, tmp_path: Path) -> None:
    from PIL import Image

    import gpux as api

    folder = constant_detector(tmp_path / layout, layout)
    with api.load(folder, provider="cpu") as session:
        answers = session.predict(Image.new("RGB", (640, 480), (90, 120, 150)))["output0"]
    assert [a["label"] for a in answers] == [w[0] for w in WANT], answers
    assert [a["index"] for a in answers] == [2, 0, 1]
    np.testing.assert_allclose([a["score"] for a in answers], [w[1] for w in WANT], atol=1e-5)
    np.testing.assert_allclose([a["box"] for a in answers], [w[2] for w in WANT], atol=0.01)


def test_objectness_is_activated_with_sigmoid_and_a_lone_low_score_is_dropped() -> None:
    logit = math.log(0.9 / 0.1)  # sigmoid: 0.9
    row = np.array([[50, 50, 20, 20, logit, logit, -logit]], np.float32)  # [anchors, 5 + 2] (yolov5)
    boxes, scores, classes = decode_boxes(row, Boxes(layout="yolov5"), (False, True))
    np.testing.assert_allclose(scores, [0.81], atol=1e-6)  # 0.9 x 0.9
    np.testing.assert_allclose(boxes, [[40, 40, 60, 60]])
    assert classes.tolist() == [0]
    assert decode_boxes(row, Boxes(layout="yolov5", score=0.85), (False, True))[0].shape == (0, 4)


def steps(*classes: int, n: int = 5, p: float = 0.9) -> Any:
    """[time, n] probabilities: `p` on each step's class, the rest spread evenly."""
    out = np.full((len(classes), n), (1 - p) / (n - 1), np.float32)
    out[np.arange(len(classes)), classes] = p
    return out


def test_ctc_collapses_repeats_drops_blanks_and_scores_the_kept_steps() -> None:
    ctc = Ctc(charset=["h", "e", "l", "o"])  # blank 0: classes 1..4 are h e l o
    texts = ctc.texts(["h", "e", "l", "o"])
    assert texts == ["", "h", "e", "l", "o"]
    probs = steps(1, 1, 2, 0, 3, 3, 0, 3, 4, 0)  # h h e _ l l _ l o _ -> hello (the blank splits the double l)
    probs[1, 1] = 0.5  # a repeated step is not kept: it does not count in the score
    assert ctc_greedy(probs, texts, 0, -1, (False, False)) == {"text": "hello", "score": pytest.approx(0.9)}
    assert ctc_greedy(steps(0, 0, 0), texts, 0, -1, (False, False)) == {"text": "", "score": 0.0}
    assert Ctc(charset=[0, 1, 2]).texts(Ctc(charset=[0, 1, 2]).charset) == ["", "0", "1", "2"]  # YAML's bare digits
    # the blank last (-1), a space appended after the charset, [classes, time] (axis 1), logits through softmax
    last = Ctc(charset=["a", "b"], blank=-1, space=True, axis=1)
    texts = last.texts(["a", "b"])
    assert texts == ["a", "b", " ", ""]
    logits = np.log(steps(0, 3, 2, 1, 1, 3, n=4)).T * 3
    answer = ctc_greedy(logits, texts, -1, 1, (True, False))
    assert answer["text"] == "a b"
    assert answer["score"] == pytest.approx(float(softmax(np.log(steps(0, n=4)) * 3).max()), abs=1e-6)


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ppocr_recognizer example as committed, with the model, charset, heading and lines make_model.py writes,
    verified on 100 rows rather than its 400: its fp32 build is lossless, the tests check what it reads (and how an
    int8 build fails), and the example's 400 rows cost a build of about a minute."""
    folder = ppocr_recognizer_files(tmp_path_factory.mktemp("ppocr_recognizer"), lines=True)
    text = (ROOT / "examples" / "ppocr_recognizer" / "gpux.yml").read_text()
    assert "derive: {rows: 400, mirror: false}" in text
    (folder / "gpux.yml").write_text(text.replace("derive: {rows: 400,", "derive: {rows: 100,"))
    return folder


def paddle_reading(model: Path, crop: Any) -> tuple[Any, tuple[str, float]]:
    """What PaddleOCR's recognizer reads: rapidocr's own resize rule (height 48, width ceil(48 w / h), at least
    320, zero padding after normalizing; cv2's resize done with Pillow, as rapidocr needs cv2, absent here) and
    rapidocr's own CTCLabelDecode (numpy only, loaded by its path). Returns the model's output and (text, score)."""
    import onnxruntime as ort
    from PIL import Image

    spec = importlib.util.spec_from_file_location(
        "rapidocr_ctc", package_file("rapidocr_onnxruntime", "ch_ppocr_rec", "utils.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    decoder = module.CTCLabelDecode(character=session.get_modelmeta().custom_metadata_map["character"].splitlines())
    w, h = crop.size
    width = int(48 * max(320 / 48, w / h))
    resized = min(width, math.ceil(48 * w / h))
    bgr = np.asarray(crop.convert("RGB").resize((resized, 48), Image.Resampling.BILINEAR), np.float32)[:, :, ::-1]
    x = np.zeros((1, 3, 48, width), np.float32)
    x[0, :, :, :resized] = (bgr.transpose(2, 0, 1) / 255 - 0.5) / 0.5
    out = session.run(None, {"x": x})[0]
    return out, decoder(out)[0]


@pytest.mark.slow
def test_ocr_int8_that_changes_confident_texts_fails_with_what_its_rows_show(recognizer: Path,
                                                                            tmp_path: Path) -> None:
    """Static int8 calibrated on the page's lines, judged on every 4th line held out and the rows derived from
    them: the texts the FP32 model reads confidently change, and the failure says how often and what the rows show
    (on the fixture's 100 rows, not the example's 400: a failure this far below its floor shows on a quarter)."""
    for name in ("model.onnx", "charset.txt", "lines.npz"):
        shutil.copy(recognizer / name, tmp_path / name)
    text = (recognizer / "gpux.yml").read_text()
    (tmp_path / "gpux.yml").write_text(text.replace("\nverify:", "\nproviders:\n  cpu: {precision: int8, quantization: "
                                                                "static, calibration: lines.npz}\nverify:", 1))
    r = gpux("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 1, r.stderr
    assert "calibration hold-out (7 of 28 samples, not calibrated on) + 93 derived from them" in r.stderr, r.stderr
    assert re.search(r"exact matches of the texts the reference reads confidently 0(\.0\d*)? <", r.stderr), r.stderr
    assert "< min_exact_match 0.99 (" in r.stderr and "rows read confidently)" in r.stderr, r.stderr
    assert "confident texts read the same " in r.stderr and "the rows show at most " in r.stderr, r.stderr


@pytest.mark.slow
def test_the_ocr_recognizer_reads_a_printed_heading(recognizer: Path) -> None:
    from PIL import Image

    import gpux as api

    r = gpux("run", str(recognizer), str(recognizer / "heading.png"), "-p", "cpu", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)["answers"]["softmax_11.tmp_0"]
    assert answer["text"] == "Region-based segmentation" and 0.9 < answer["score"] <= 1, answer
    text = gpux("run", str(recognizer), str(recognizer / "heading.png"), "-p", "cpu")
    assert '"Region-based segmentation"' in text.stdout, text.stderr
    # a line of body text too, and PaddleOCR's reading of both (its resize, its decoder) agrees
    page = Image.open(photo("page.png"))
    body = page.crop((0, 58, 384, 82))
    with api.load(recognizer, provider="cpu") as session:
        read = session.predict(body)["softmax_11.tmp_0"]
    assert read["text"] == "background.These markers are pixels that we can label", read
    for crop, ours in ((Image.open(recognizer / "heading.png"), answer), (body, read)):
        out, (paddle_text, paddle_score) = paddle_reading(recognizer / "model.onnx", crop)
        assert ours["text"] == paddle_text and abs(ours["score"] - paddle_score) < 0.01
        mine = ctc_greedy(out[0], Ctc(charset=[], space=True).texts(charset(recognizer)), 0, -1, (False, False))
        assert mine == {"text": paddle_text, "score": pytest.approx(paddle_score, abs=1e-6)}  # the same decoding


def charset(folder: Path) -> list[str]:
    return (folder / "charset.txt").read_text(encoding="utf-8").removesuffix("\n").split("\n")


def test_a_charset_that_does_not_fit_the_classes_is_an_error_at_its_line(recognizer: Path, tmp_path: Path) -> None:
    shutil.copy(recognizer / "model.onnx", tmp_path / "model.onnx")
    shutil.copy(recognizer / "lines.npz", tmp_path / "lines.npz")
    text = (recognizer / "gpux.yml").read_text()
    (tmp_path / "charset.txt").write_text("".join(f"{c}\n" for c in charset(recognizer)[:-1]), encoding="utf-8")
    (tmp_path / "gpux.yml").write_text(text.replace("    shape: [1, 120, 6625]", ""))  # read from the model
    r = gpux("run", str(tmp_path), str(recognizer / "heading.png"), "-p", "cpu")
    assert r.returncode == 3, r.stderr
    line = next(n for n, x in enumerate(text.replace("    shape: [1, 120, 6625]\n", "").splitlines(), 1)
                if "charset:" in x)
    assert f"gpux.yml:{line}:" in r.stderr and "postprocess.ctc.charset: 6622 charset entries and the blank and " \
        "the space make 6624 classes, not 6625 (softmax_11.tmp_0 has 6625 on its last axis in the model)" \
        in r.stderr, r.stderr
    assert not (tmp_path / ".gpux").exists()  # found before anything is built


@pytest.mark.parametrize(("old", "new", "said"), [
    ("ctc: {charset: charset.txt,", "ctc: {charset: [a, b, c],",
     "postprocess.ctc.charset: 3 charset entries and the blank and the space make 5 classes, not 6625 "
     "(shape [1, 120, 6625])"),
    ("ctc: {charset: charset.txt, blank: 0,", "ctc: {charset: [a, b], blank: 4,",
     "postprocess.ctc.blank: blank 4 is not a class index: the charset makes 4 classes"),
    ("    postprocess:", "    labels: [a, b]\n    postprocess:",
     "labels: ctc reads its classes' text from postprocess.ctc.charset; drop labels"),
    ("ctc: {", "topk: 3\n      ctc: {",
     "postprocess.ctc: topk and ctc both set; an output answers classes, boxes, text or what its python step "
     "returns"),
    ("space: true}", "space: true, axis: 0}", "postprocess.ctc.axis: "),
    ("charset: charset.txt", "charset: missing.txt", "postprocess.ctc.charset: file not found: missing.txt"),
])
def test_misdeclared_ctc_is_an_error_at_its_line(tmp_path: Path, old: str, new: str, said: str) -> None:
    text = (ROOT / "examples" / "ppocr_recognizer" / "gpux.yml").read_text()
    assert old in text
    (tmp_path / "gpux.yml").write_text(text.replace(old, new))
    r = gpux("validate", "--check-model", str(tmp_path / "gpux.yml")) if "missing" in new else \
        gpux("validate", str(tmp_path / "gpux.yml"))
    assert r.returncode == 3 and said in r.stderr, r.stderr
    assert "gpux.yml:" in r.stderr and "Traceback" not in r.stderr


def test_box_labels_and_rank_are_checked_per_layout(tmp_path: Path) -> None:
    folder = constant_detector(tmp_path / "v5", "yolov5")
    text = (folder / "gpux.yml").read_text()
    (folder / "gpux.yml").write_text(text.replace("labels: [person, cat, dog]", "labels: [person, cat]"))
    r = gpux("validate", str(folder / "gpux.yml"))
    assert r.returncode == 3 and "2 labels for 3 classes (shape [1, 5, 8])" in r.stderr, r.stderr
    (folder / "gpux.yml").write_text(text.replace("    shape: [1, 5, 8]\n", "").replace("cat, dog", "cat"))
    r = gpux("run", str(folder), str(photo("astronaut.png")), "-p", "cpu")
    assert r.returncode == 3, r.stderr
    assert "2 labels for 3 classes (output0 has 8 on axis 2, less 4 box coordinates and the objectness, in the " \
        "model)" in r.stderr, r.stderr
    (folder / "gpux.yml").write_text(text.replace("yolov5", "yolov8"))  # [1, 4 + 3, 5] read as [1, 5, 8]
    r = gpux("validate", str(folder / "gpux.yml"))
    assert r.returncode == 3 and "3 labels for 1 classes (shape [1, 5, 8])" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return yolov8_detector_example(tmp_path_factory.mktemp("yolov8_detector"))


def test_save_draws_the_detectors_boxes_on_a_copy_of_each_photo(detector: Path, tmp_path: Path) -> None:
    from PIL import Image

    photos = tmp_path / "photos"
    photos.mkdir()
    Image.open(photo("astronaut.png")).convert("RGB").save(photos / "astronaut.jpg", quality=95)
    out = tmp_path / "drawn"
    r = gpux("run", str(detector), str(photo("astronaut.png")), str(photos), "--save", str(out), "-p", "cpu",
             "--json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["saved"] for x in lines] == [str(out / "astronaut.png"), str(out / "astronaut.jpg")]
    assert Image.open(out / "astronaut.jpg").format == "JPEG"
    before = np.asarray(Image.open(photo("astronaut.png")).convert("RGB"), np.int16)
    after = np.asarray(Image.open(out / "astronaut.png"), np.int16)
    assert after.shape == before.shape  # boxes only: no caption band
    (face,) = [a for a in lines[0]["answers"]["output0"] if a["label"] == "FACE_FEMALE"]
    x1, y1, x2, y2 = (round(v) for v in face["box"])
    changed = np.abs(after - before).sum(axis=2) > 0
    assert changed[y1:y2, x1].mean() > 0.9 and changed[y1:y2, x2 - 1].mean() > 0.9  # the box's left and right edges
    assert changed[y1 - 2].any()  # its label, above it
    inside = changed[y1 + 6:y2 - 6, x1 + 6:x2 - 6]
    assert not inside.any()  # the face itself is left as it was
    assert changed.mean() < 0.05 and not changed[300:, :].any()  # nothing drawn away from the box
    text = gpux("run", str(detector), str(photo("astronaut.png")), "--save", str(out), "-p", "cpu")
    assert f"saved: {out / 'astronaut.png'}" in text.stdout, text.stderr


def test_save_writes_text_and_classes_in_a_band_below(recognizer: Path, tmp_path: Path) -> None:
    from PIL import Image

    r = gpux("run", str(recognizer), str(recognizer / "heading.png"), "--save", str(tmp_path), "-p", "cpu")
    assert r.returncode == 0, r.stderr
    line = Image.open(recognizer / "heading.png").convert("RGB")
    drawn = Image.open(tmp_path / "heading.png")
    assert drawn.height > line.height and drawn.width >= line.width
    np.testing.assert_array_equal(np.asarray(drawn)[:line.height, :line.width], np.asarray(line))
    assert (np.asarray(drawn)[line.height:] < 128).any()  # the text, written below


@pytest.mark.parametrize(("args", "said"), [
    (("--save", "OUT"), "draws the answers of image files; pass FILES"),
    (("PHOTO", "--save", "PHOTOS"), "would replace the input"),
    (("PHOTO", "OTHER", "--save", "OUT"), "would both be written as"),
])
def test_save_refusals_are_one_line(detector: Path, tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(photo("astronaut.png"), tmp_path / folder / "astronaut.png")
    named = {"OUT": str(tmp_path / "out"), "PHOTO": str(tmp_path / "a" / "astronaut.png"),
             "PHOTOS": str(tmp_path / "a"), "OTHER": str(tmp_path / "b" / "astronaut.png")}
    r = gpux("run", str(detector), *(named.get(a, a) for a in args), "-p", "cpu")
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_save_refuses_a_model_without_postprocess(detector: Path, tmp_path: Path) -> None:
    shutil.copy(detector / "model.onnx", tmp_path / "model.onnx")
    text = (detector / "gpux.yml").read_text()
    (tmp_path / "gpux.yml").write_text(text[:text.index("outputs:")])
    r = gpux("run", str(tmp_path), str(photo("astronaut.png")), "--save", str(tmp_path / "out"), "-p", "cpu")
    assert r.returncode == 2 and "declares no postprocess for its outputs, so there is nothing to draw" in r.stderr
    assert not (tmp_path / ".gpux").exists()
