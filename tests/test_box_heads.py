"""Boxes read from one output per stride: `boxes: {layout: picodet}` (PP-PicoDet's class scores and distribution
focal box outputs per stride) and `boxes: {layout: yolov5_heads}` (YOLOv5's Detect layer undecoded, per stride),
each declared on one output and naming the others. The heads are built in the test to the published layouts
(seeded values, a few confident boxes planted); the answers of `gpux run`, `Session.predict` and `gpux serve` are
compared with decodings written here from the layouts' descriptions, a build verifies them as boxes, and a head
that is missing or of the wrong shape is refused at the field that names it. The trained PicoDet: test_picodet.py."""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux, write

SIDE = 64
PICO_STRIDES = (8, 16, 32, 64)
V5_STRIDES = (8, 16, 32)
V5_ANCHORS = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))  # YOLOv5's P3-P5
CLASSES, BINS = 3, 8  # picodet: reg_max 7


def picodet_heads() -> dict[str, Any]:
    """Scores (probabilities, as the export's sigmoid gives them) low everywhere but a few planted ones: two
    overlapping cells of class 0, one cell confident in two classes, one of class 2 at stride 32; box
    distributions seeded logits."""
    rng = np.random.default_rng(5)
    out = {}
    for s in PICO_STRIDES:
        n = math.ceil(SIDE / s) ** 2
        out[f"score{s}"] = rng.uniform(0, 0.05, (1, n, CLASSES)).astype(np.float32)
        small = np.tile(-0.7 * np.arange(BINS), 4)  # sides of a few strides at most
        out[f"dist{s}"] = (rng.normal(0, 1.5, (1, n, 4 * BINS)) + small).astype(np.float32)
    out["score8"][0, 34, 0], out["score8"][0, 35, 0] = 0.9, 0.8
    out["score16"][0, 9, 1], out["score16"][0, 9, 2] = 0.7, 0.6
    out["score32"][0, 3, 2] = 0.95
    return out


def v5_heads() -> dict[str, Any]:
    """Logits [1, 3, H, W, 5 + 2]: objectness low everywhere but four planted anchors."""
    rng = np.random.default_rng(6)
    out = {}
    for s in V5_STRIDES:
        g = SIDE // s
        h = rng.normal(0, 1, (1, 3, g, g, 7)).astype(np.float32)
        h[..., 4] = -8
        out[f"p{s}"] = h
    out["p8"][0, 0, 4, 3, 4:7] = [4, 3, -2]
    out["p8"][0, 1, 4, 3, 4:7] = [3, 2.5, -2]
    out["p16"][0, 2, 2, 1, 4:7] = [2, -3, 2]
    out["p32"][0, 2, 1, 0, 4:7] = [5, -1, 4]
    return out


def softmax(v: Any) -> Any:
    e = np.exp(v - v.max())
    return e / e.sum()


def sigmoid(v: Any) -> Any:
    return 1 / (1 + np.exp(-np.asarray(v, np.float64)))


def greedy(candidates: list[tuple[list[float], float, int]], iou: float) -> list[tuple[list[float], float, int]]:
    """Class-aware greedy NMS, best score first."""
    def overlap(a: list[float], b: list[float]) -> float:
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
        return w * h / union if union > 0 else 0.0

    kept: list[tuple[list[float], float, int]] = []
    for c in sorted(candidates, key=lambda c: -c[1]):
        if all(k[2] != c[2] or overlap(k[0], c[0]) <= iou for k in kept):
            kept.append(c)
    return kept


def picodet_reference(heads: dict[str, Any], score: float = 0.25, iou: float = 0.45) -> list[Any]:
    """Each cell of each stride, row-major: centre ((x + 0.5) s, (y + 0.5) s), each side the expectation of the
    softmax over its bins times s (left, top, right, bottom); every class at the threshold or over a candidate."""
    candidates = []
    for s in PICO_STRIDES:
        columns = math.ceil(SIDE / s)
        for i, (scores, dist) in enumerate(zip(heads[f"score{s}"][0], heads[f"dist{s}"][0], strict=True)):
            cx, cy = (i % columns + 0.5) * s, (i // columns + 0.5) * s
            left, top, right, bottom = (float(softmax(dist[k * BINS:(k + 1) * BINS]) @ np.arange(BINS)) * s
                                        for k in range(4))
            candidates += [([cx - left, cy - top, cx + right, cy + bottom], float(p), c)
                           for c, p in enumerate(scores) if p >= score]
    return greedy(candidates, iou)


def v5_reference(heads: dict[str, Any], score: float = 0.25, iou: float = 0.45) -> list[Any]:
    """YOLOv5's Detect: sigmoid; x = (2 sx - 0.5 + column) stride, w = (2 sw)^2 anchor width; score objectness x the
    best class."""
    candidates = []
    for level, s in enumerate(V5_STRIDES):
        h = heads[f"p{s}"][0]
        for a, y, x in np.ndindex(*h.shape[:3]):
            v = sigmoid(h[a, y, x])
            bx, by = (v[0] * 2 - 0.5 + x) * s, (v[1] * 2 - 0.5 + y) * s
            bw, bh = (v[2] * 2) ** 2 * V5_ANCHORS[level][2 * a], (v[3] * 2) ** 2 * V5_ANCHORS[level][2 * a + 1]
            c = int(np.argmax(v[5:]))
            if v[4] * v[5 + c] >= score:
                candidates.append(([bx - bw / 2, by - bh / 2, bx + bw / 2, by + bh / 2], float(v[4] * v[5 + c]), c))
    return greedy(candidates, iou)


def to_wide(found: list[Any]) -> list[Any]:
    """A 128x64 image letterboxed into 64x64: scale 1/2, 16 rows of padding above; boxes back, clipped."""
    return [([min(max(b[0] * 2, 0), 128), min(max((b[1] - 16) * 2, 0), 64), min(max(b[2] * 2, 0), 128),
              min(max((b[3] - 16) * 2, 0), 64)], p, c) for b, p, c in found]


def make_model(folder: Path, heads: dict[str, Any]) -> None:
    """A model whose outputs are the heads (plus a thousandth of the input's mean, so that they follow it)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Mul", ["m", "tiny"], ["s"])]
    inits = [numpy_helper.from_array(np.array(1e-3, np.float32), "tiny")]
    outputs = []
    for name, value in heads.items():
        nodes += [helper.make_node("Reshape", ["s", f"{name}_rank"], [f"{name}_s"]),
                  helper.make_node("Add", [f"{name}_c", f"{name}_s"], [name])]
        inits += [numpy_helper.from_array(value, f"{name}_c"),
                  numpy_helper.from_array(np.array([-1] + [1] * (value.ndim - 1), np.int64), f"{name}_rank")]
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", *value.shape[1:]]))
    graph = helper.make_graph(nodes, "heads", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                             ["batch", 3, SIDE, SIDE])], outputs, inits)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")


def config(name: str, block: str) -> str:
    return f"""\
name: {name}
version: 1.0.0
model: {{source: model.onnx}}
inputs:
  images:
    dtype: float32
    shape: [batch, 3, {SIDE}, {SIDE}]
    preprocess:
      image: {{resize: {{letterbox: {SIDE}}}, scale: 1/255}}
outputs:
  {block}
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


PICO = config("pico", """score8:
    dtype: float32
    labels: [a, b, c]
    postprocess:
      boxes:
        layout: picodet
        heads: [score8, score16, score32, score64]
        distributions: [dist8, dist16, dist32, dist64]""")
V5 = config("v5heads", """p8:
    dtype: float32
    labels: [a, b]
    postprocess:
      boxes: {layout: yolov5_heads, heads: [p8, p16, p32]}""")


def make_project(folder: Path, yml: str, heads: dict[str, Any]) -> Path:
    from PIL import Image

    make_model(folder, heads)
    write(folder / "gpux.yml", yml)
    Image.new("RGB", (128, 64), (0, 0, 0)).save(folder / "wide.png")
    np.savez(folder / "data.npz", images=np.random.default_rng(2).uniform(0, 1, (6, 1, 3, SIDE, SIDE))
             .astype(np.float32))
    return folder


@pytest.fixture(scope="module")
def pico(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("pico"), PICO, picodet_heads())


@pytest.fixture(scope="module")
def v5(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("v5"), V5, v5_heads())


def assert_same(answer: list[dict[str, Any]], want: list[Any], labels: str) -> None:
    """The same boxes, each within 1 px, the same labels and scores (in any order; the model adds up to a
    thousandth to every value)."""
    assert len(answer) == len(want) >= 3, (answer, want)
    for a, (box, p, c) in zip(sorted(answer, key=lambda a: -a["score"]), sorted(want, key=lambda w: -w[1]),
                              strict=True):
        assert a["label"] == labels[c] and a["score"] == pytest.approx(p, abs=1e-3), (a, box, p, c)
        assert np.abs(np.subtract(a["box"], box)).max() <= 1.0, (a, box)


def test_picodet_heads_answer_as_the_layout_describes_through_run_predict_and_serve(pico: Path) -> None:
    import gpux as api

    from .serving import ServerThread, post

    want = to_wide(picodet_reference(picodet_heads()))
    assert any(c == 1 for *_, c in want) and any(c == 2 for *_, c in want)  # the cell of two classes gives both
    r = gpux("run", str(pico), str(pico / "wide.png"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)["answers"]
    assert list(answers) == ["score8"], list(answers)  # the heads only the step reads are not answers of their own
    assert_same(answers["score8"], want, "abc")
    with api.load(pico, provider="cpu", strict=True) as session:
        assert session.predict(str(pico / "wide.png"))["score8"] == answers["score8"]
    body = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((pico / "wide.png").read_bytes()).decode()]}],
                       "outputs": [{"name": "score8"}]})
    with ServerThread([pico], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/pico/infer", body)
    assert status == 200 and json.loads(json.loads(reply)["outputs"][0]["data"][0]) == answers["score8"], reply


def test_yolov5_heads_answer_as_its_detect_layer_decodes(v5: Path) -> None:
    import gpux as api

    want = to_wide(v5_reference(v5_heads()))
    with api.load(v5, provider="cpu", strict=True) as session:
        got = session.predict(str(v5 / "wide.png"))
        tensors = session.predict({"images": np.zeros((2, 3, SIDE, SIDE), np.float32)})
    assert list(got) == ["p8"]
    assert_same(got["p8"], want, "ab")
    assert len(tensors) == 2 and tensors[0]["p8"] == tensors[1]["p8"]  # rows of a batch, in input pixels
    assert_same(tensors[0]["p8"], v5_reference(v5_heads()), "ab")


@pytest.mark.parametrize("which", ["pico", "v5"])
def test_builds_verify_boxes_read_from_every_head(which: str, request: pytest.FixtureRequest) -> None:
    project = request.getfixturevalue(which)
    r = gpux("build", str(project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert '"kind": "boxes"' in r.stdout and '"f1": 1.0' in r.stdout and '"judged": true' in r.stdout, r.stdout[:3000]
    assert '"reference_boxes": 0' not in r.stdout, r.stdout[:3000]


@pytest.mark.parametrize(("old", "new", "field", "said"), [
    ("dist64]", "dist65]", "score8.postprocess.boxes.distributions", "'dist65' is not an output of the model"),
    ("heads: [score8, score16,", "heads: [score8, dist16,", "score8.postprocess.boxes.heads", "dist16 is [1, 16, 32]"),
    ("layout: picodet\n", "layout: picodet\n        strides: [4, 16, 32, 64]\n", "score8.postprocess.boxes.strides",
     "stride 4 over the 64x64 input makes 256 cells, but score8 has 64"),
    ("  score8:\n", "  dist8:\n", "dist8.postprocess.boxes.heads",
     "the output that declares the step, 'dist8', is not one of its heads"),
])
def test_a_head_missing_or_of_another_shape_is_refused_at_its_field(pico: Path, tmp_path: Path, old: str, new: str,
                                                                    field: str, said: str) -> None:
    (tmp_path / "model.onnx").write_bytes((pico / "model.onnx").read_bytes())
    write(tmp_path / "gpux.yml", PICO.replace(old, new).replace("verify: {data: data.npz}", ""))
    r = gpux("run", str(tmp_path), str(pico / "wide.png"), "-p", "cpu")
    lines = [line for line in r.stderr.splitlines() if line.startswith("error")]
    assert r.returncode == 3 and len(lines) == 1, r.stderr
    assert f"outputs.{field}: " in lines[0] and said in lines[0], r.stderr


@pytest.mark.parametrize(("block", "said"), [
    ("{layout: picodet, heads: [a, b, c, d]}", "name them under distributions"),
    ("{layout: picodet, heads: [a, b], distributions: [c, d]}", "2 outputs for 4 strides [8, 16, 32, 64]"),
    ("{layout: yolov5_heads, heads: [a, b, c, d], strides: [8, 16, 32, 64]}", "3 levels of anchors for 4 strides"),
    ("{layout: yolov5_heads, heads: [a, b, c], anchors: [[1, 2, 3], [1, 2], [1, 2]]}", "pairs of width, height"),
    ("{layout: yolov8, heads: [a]}", "layout yolov8 reads no heads"),
    ("{layout: yolov5_heads, heads: [a, b, c], distributions: [d, e, f]}", "yolov5_heads reads no distributions"),
])
def test_a_block_that_cannot_name_its_heads_is_an_error_at_its_line(tmp_path: Path, block: str, said: str) -> None:
    write(tmp_path / "gpux.yml", f"""\
name: m
version: 1.0.0
model: {{source: model.onnx}}
outputs:
  a:
    dtype: float32
    postprocess:
      boxes: {block}
""")
    r = gpux("validate", "--no-model", str(tmp_path / "gpux.yml"))
    assert r.returncode == 3 and said in r.stderr and "outputs.a.postprocess.boxes" in r.stderr, r.stderr


def proposed(inputs: list[Any], outputs: list[Any]) -> dict[str, str]:
    """What `gpux init` writes under each output: its comment line, if any."""
    from gpux.cli.init import render

    lines = render(Path("model.onnx"), inputs, outputs, "onnx", [], ["cpu"]).splitlines()
    return {line.split(":")[0].strip(): lines[i + 1] for i, line in enumerate(lines)
            if line.startswith("  ") and "dtype" in line and lines[i + 1].lstrip().startswith("#   ")}


def test_init_proposes_the_heads_where_their_shapes_tell_them_apart() -> None:
    from gpux.model.tensor import Tensor

    image = [Tensor("image", "float32", (1, 3, 800, 608))]
    cells = [7600, 1900, 475, 130]  # PP-PicoDet's CDLA layout model: strides 8..64 over 608x800
    pico = [Tensor(f"transpose_{2 * i}.tmp_0", "float32", (1, n, 10)) for i, n in enumerate(cells)] + \
        [Tensor(f"transpose_{2 * i + 1}.tmp_0", "float32", (1, n, 32)) for i, n in enumerate(cells)]
    said = proposed(image, pico)
    assert list(said) == ["transpose_0.tmp_0"], said
    assert "layout: picodet, heads: [transpose_0.tmp_0, transpose_2.tmp_0, transpose_4.tmp_0, transpose_6.tmp_0], " \
        "distributions: [transpose_1.tmp_0, transpose_3.tmp_0, transpose_5.tmp_0, transpose_7.tmp_0]}" in \
        said["transpose_0.tmp_0"]
    same = [Tensor(t.name, t.dtype, (1, n, 32)) for t, n in zip(pico, cells * 2, strict=True)]  # which are boxes?
    assert proposed(image, same) == {}
    v5 = [Tensor(f"p{s}", "float32", ("batch", 3, 640 // s, 640 // s, 85)) for s in V5_STRIDES]
    said = proposed([Tensor("images", "float32", ("batch", 3, 640, 640))], v5)
    assert list(said) == ["p8"] and "layout: yolov5_heads, heads: [p8, p16, p32]" in said["p8"], said
    assert "80 classes" in said["p8"]
