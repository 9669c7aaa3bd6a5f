"""Pose detections (`postprocess: {keypoints: {layout: yolov8_pose, ...}}`). No trained pose model installs from
the package lists here, so the head is built in the test to ultralytics' published export layout, [batch, 4 +
classes + points x 3, anchors] (cx, cy, w, h in input pixels, class scores, then each point's x, y, visibility),
holding set detections; its answers through `gpux run` (--json, --save), `Session.predict` and `gpux serve` are
compared with a decoding written here from that description (threshold, greedy NMS, letterbox undone), and a build
verifies them by box matching and keypoint similarity (OKS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux, write

POINTS, CLASSES, ANCHORS, SIDE = 5, 2, 8, 64
CONFIG = f"""\
name: pose
version: 1.0.0
model: {{source: model.onnx}}
inputs:
  images:
    dtype: float32
    shape: [batch, 3, {SIDE}, {SIDE}]
    preprocess:
      image: {{resize: {{letterbox: {SIDE}}}, scale: 1/255}}
outputs:
  output0:
    dtype: float32
    shape: [batch, {4 + CLASSES + POINTS * 3}, {ANCHORS}]
    labels: [person, cat]
    postprocess:
      keypoints: {{points: {POINTS}, dims: 3, score: 0.25, iou: 0.45, skeleton: [[0, 1], [1, 2]]}}
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


def head() -> Any:
    """[1, 4 + 2 + 5 x 3, 8]: per anchor a box, two class scores and five points; anchors 0 and 1 overlap (1 is
    suppressed), 2 is another class far off, 3 scores under the threshold, the rest nothing."""
    rng = np.random.default_rng(5)
    out = np.zeros((4 + CLASSES + POINTS * 3, ANCHORS), np.float32)
    out[:4, :4] = [[20, 22, 48, 30], [16, 16, 12, 40], [20, 20, 10, 20], [24, 28, 30, 24]]  # cx, cy, w, h rows
    out[4, :4] = [0.9, 0.7, 0.0, 0.2]
    out[5, :4] = [0.1, 0.2, 0.6, 0.1]
    for a in range(4):
        cx, cy, w, h = out[:4, a]
        xs = rng.uniform(cx - w / 2, cx + w / 2, POINTS)
        ys = rng.uniform(cy - h / 2, cy + h / 2, POINTS)
        out[6 + 0::3, a], out[6 + 1::3, a], out[6 + 2::3, a] = xs, ys, rng.uniform(0, 1, POINTS)
    return out[None]


def reference(out: Any, scale: float, pad: tuple[float, float], size: tuple[int, int]) -> list[dict[str, Any]]:
    """Decoded from the layout's description: best class per anchor, threshold, greedy NMS per class, best first,
    box and points mapped back through the letterbox (scale, padding) and clipped to the image."""
    rows = out[0]
    found = []
    for a in np.argsort(-rows[4:6].max(axis=0), kind="stable"):
        c, s = int(rows[4:6, a].argmax()), float(rows[4:6, a].max())
        cx, cy, w, h = rows[:4, a]
        box = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]

        def iou(b: list[float], box: list[float] = box) -> float:
            iw, ih = min(b[2], box[2]) - max(b[0], box[0]), min(b[3], box[3]) - max(b[1], box[1])
            inter = max(iw, 0) * max(ih, 0)
            return inter / ((b[2] - b[0]) * (b[3] - b[1]) + (box[2] - box[0]) * (box[3] - box[1]) - inter)

        if s < 0.25 or any(f["index"] == c and iou(f["raw"]) > 0.45 for f in found):
            continue
        pts = rows[6:, a].reshape(POINTS, 3)
        back = [[min(max((x - pad[0]) / scale, 0), size[0]), min(max((y - pad[1]) / scale, 0), size[1]), v]
                for x, y, v in pts]
        mapped = [min(max((box[0] - pad[0]) / scale, 0), size[0]), min(max((box[1] - pad[1]) / scale, 0), size[1]),
                  min(max((box[2] - pad[0]) / scale, 0), size[0]), min(max((box[3] - pad[1]) / scale, 0), size[1])]
        found.append({"index": c, "score": s, "raw": box, "box": mapped, "keypoints": back})
    return found


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("pose")
    nodes = [helper.make_node("ReduceMean", ["images"], ["m4"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Reshape", ["m4", "three"], ["m"]),  # [batch, 1, 1]
             helper.make_node("Mul", ["m", "tiny"], ["shift"]),  # the answers move a little with the image
             helper.make_node("Add", ["detections", "shift"], ["output0"])]
    graph = helper.make_graph(
        nodes, "pose", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 + CLASSES + POINTS * 3, ANCHORS])],
        [numpy_helper.from_array(head(), "detections"), numpy_helper.from_array(np.float32(1e-3), "tiny"),
         numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "three")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    Image.new("RGB", (128, 96), (0, 0, 0)).save(folder / "black.png")  # mean 0: the head's detections as they are
    np.savez(folder / "data.npz", images=np.random.default_rng(2).uniform(0, 1, (20, 1, 3, SIDE, SIDE))
             .astype(np.float32))
    return folder


def assert_answers(got: list[dict[str, Any]]) -> None:
    # 128x96 letterboxed into 64: scale 0.5, 8 rows of fill 114 above and below the black image (the tensor's mean)
    shift = 1e-3 * 16 * SIDE * (114 / 255) / (SIDE * SIDE)
    want = reference(head() + np.float32(shift), 0.5, (0, 8), (128, 96))
    assert [(a["index"], a["label"]) for a in got] == [(w["index"], ["person", "cat"][w["index"]]) for w in want]
    assert len(got) == 2  # one suppressed, one under the threshold
    for a, w in zip(got, want, strict=True):
        assert a["score"] == pytest.approx(w["score"], abs=1e-5)
        assert np.allclose(a["box"], w["box"], atol=0.02)
        assert np.allclose(a["keypoints"], w["keypoints"], atol=0.02)


def test_run_and_predict_answer_the_layouts_detections(project: Path, tmp_path: Path) -> None:
    import gpux as api

    r = gpux("run", str(project), str(project / "black.png"), "-p", "cpu", "--json", "--save", str(tmp_path))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert_answers(doc["answers"]["output0"])
    from PIL import Image

    assert np.asarray(Image.open(doc["saved"])).max() > 0  # boxes, points and skeleton drawn on black
    with api.load(project, provider="cpu", strict=True) as session:
        assert session.predict(str(project / "black.png"))["output0"] == doc["answers"]["output0"]
    text = gpux("run", str(project), str(project / "black.png"), "-p", "cpu")
    assert "output0: 2 boxes" in text.stdout and "person 0.900" in text.stdout, text.stderr


def test_serve_and_verification(project: Path) -> None:
    import base64

    from .serving import ServerThread, post

    body = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((project / "black.png").read_bytes()).decode()]}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/pose/infer", body)
    assert status == 200, reply
    assert_answers(json.loads(json.loads(reply)["outputs"][0]["data"][0]))
    r = gpux("build", str(project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert '"kind": "keypoints"' in r.stdout and '"mean_oks": 1.0' in r.stdout and '"f1": 1.0' in r.stdout


def test_keypoint_similarity_falls_with_distance() -> None:
    from gpux.quality.pose import oks

    ref = np.array([[10.0, 10.0, 1.0], [20.0, 20.0, 1.0], [0.0, 0.0, 0.0]])
    assert oks(ref, ref, [0, 0, 30, 30]) == 1.0
    moved = ref + np.array([[3, 0, 0], [0, 0, 0], [50, 50, 0]])  # the unseen point does not count
    assert oks(ref, moved, [0, 0, 30, 30]) == pytest.approx((np.exp(-9 / (2 * 900 * 0.01)) + 1) / 2)


def test_labels_and_points_that_do_not_fit_are_errors_at_their_line(project: Path, tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes((project / "model.onnx").read_bytes())
    write(tmp_path / "gpux.yml", CONFIG.replace("points: 5", "points: 4").replace("verify: {data: data.npz}", ""))
    r = gpux("validate", str(tmp_path), "--check-model")
    assert r.returncode == 3 and "2 labels for 5 classes" in r.stderr, r.stderr
