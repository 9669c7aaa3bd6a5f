"""Oriented boxes (`boxes: {layout: yolov8_obb}`). No trained OBB model installs from the package lists here, so the
head is built in the test to ultralytics' published OBB export layout, [batch, 4 + classes + 1, anchors] (cx, cy,
w, h, class scores, the rotation in radians), holding set boxes; the answers of `gpux run`, `Session.predict` and
`gpux serve` are compared with a decoding written here from the description of ultralytics' OBB post-processing
(regularized boxes; rotated NMS that drops a box any better box of its class overlaps, by probabilistic IoU: one
minus the Hellinger distance of the boxes as Gaussians, computed here with 2x2 matrices), and a build verifies
them by rotated IoU."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux, write

SIDE, ANCHORS = 64, 6
CONFIG = f"""\
name: obb
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
    shape: [batch, 7, {ANCHORS}]
    labels: [plane, ship]
    postprocess:
      boxes: {{layout: yolov8_obb, score: 0.25, iou: 0.45}}
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


def head() -> Any:
    """[1, 4 + 2 + 1, 6]. A (0.9), B (0.8) and C (0.7) are planes in a row, A over B and B over C but A clear of
    C: ultralytics drops B and C (C is overlapped by B, itself dropped); D is a ship turned past pi/2 (regularized
    to the other side), E a ship under the threshold, F nothing."""
    rows = [[20, 20, 20, 8, 0.3, 0.9, 0.0], [24, 21, 20, 8, 0.3, 0.8, 0.0], [29, 22, 20, 8, 0.3, 0.7, 0.0],
            [45, 45, 16, 6, 2.0, 0.1, 0.6], [10, 50, 8, 8, 0.0, 0.0, 0.2], [0, 0, 0, 0, 0.0, 0.0, 0.0]]
    out = np.zeros((7, ANCHORS), np.float32)
    for a, (cx, cy, w, h, t, s0, s1) in enumerate(rows):
        out[:, a] = [cx, cy, w, h, s0, s1, t]
    return out[None]


def gaussian(b: Any) -> Any:
    r = np.array([[math.cos(b[4]), -math.sin(b[4])], [math.sin(b[4]), math.cos(b[4])]])
    return r @ np.diag([b[2] ** 2 / 12, b[3] ** 2 / 12]) @ r.T


def prob_iou(one: Any, two: Any) -> float:
    """1 - the Hellinger distance of the boxes' Gaussians (from their Bhattacharyya distance)."""
    s1, s2 = gaussian(one), gaussian(two)
    s = (s1 + s2) / 2
    d = np.array(one[:2]) - np.array(two[:2])
    bd = d @ np.linalg.inv(s) @ d / 8 + 0.5 * math.log(np.linalg.det(s) / math.sqrt(np.linalg.det(s1) *
                                                                                    np.linalg.det(s2)))
    return 1 - math.sqrt(1 - math.exp(-min(max(bd, 1e-7), 100)))


def reference(out: Any, scale: float, pad: tuple[float, float]) -> list[dict[str, Any]]:
    rows = out[0]
    found = []
    for a in range(rows.shape[1]):
        c, s = int(rows[4:6, a].argmax()), float(rows[4:6, a].max())
        cx, cy, w, h, t = (float(v) for v in (*rows[:4, a], rows[6, a]))
        if s >= 0.25:
            swap = t % math.pi >= math.pi / 2
            found.append((s, c, [cx, cy, h if swap else w, w if swap else h, t % (math.pi / 2)]))
    found.sort(key=lambda f: -f[0])
    kept = [f for i, f in enumerate(found)
            if not any(g[1] == f[1] and prob_iou(g[2], f[2]) >= 0.45 for g in found[:i])]
    return [{"index": c, "score": s, "angle": b[4],
             "box": [(b[0] - pad[0]) / scale, (b[1] - pad[1]) / scale, b[2] / scale, b[3] / scale]}
            for s, c, b in kept]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("obb")
    nodes = [helper.make_node("ReduceMean", ["images"], ["m4"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Reshape", ["m4", "three"], ["m"]),
             helper.make_node("Mul", ["m", "tiny"], ["shift"]),
             helper.make_node("Add", ["boxes", "shift"], ["output0"])]
    graph = helper.make_graph(
        nodes, "obb", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 7, ANCHORS])],
        [numpy_helper.from_array(head(), "boxes"), numpy_helper.from_array(np.float32(1e-3), "tiny"),
         numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "three")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    Image.new("RGB", (128, 96), (0, 0, 0)).save(folder / "black.png")
    np.savez(folder / "data.npz", images=np.random.default_rng(2).uniform(0, 1, (12, 1, 3, SIDE, SIDE))
             .astype(np.float32))
    return folder


def assert_answers(got: list[dict[str, Any]]) -> None:
    shift = 1e-3 * 16 * SIDE * (114 / 255) / (SIDE * SIDE)  # the letterbox's fill in the tensor's mean
    want = reference(head() + np.float32(shift), 0.5, (0, 8))
    assert [a["label"] for a in got] == ["plane", "ship"] and len(want) == 2
    for a, w in zip(got, want, strict=True):
        assert a["index"] == w["index"] and a["score"] == pytest.approx(w["score"], abs=1e-5)
        assert np.allclose(a["box"], w["box"], atol=0.02) and a["angle"] == pytest.approx(w["angle"], abs=1e-4)
        cx, cy, bw, bh = a["box"]
        corners = np.asarray(a["polygon"])
        assert np.allclose(corners.mean(axis=0), [cx, cy], atol=0.02)
        assert np.allclose(sorted(np.linalg.norm(corners - np.roll(corners, 1, 0), axis=1)),
                           sorted([bw, bw, bh, bh]), atol=0.05)


def test_run_predict_and_serve_answer_ultralytics_obb_boxes(project: Path) -> None:
    import base64

    import gpux as api

    from .serving import ServerThread, post

    r = gpux("run", str(project), str(project / "black.png"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)["answers"]["output0"]
    assert_answers(answers)
    with api.load(project, provider="cpu", strict=True) as session:
        assert session.predict(str(project / "black.png"))["output0"] == answers
    body = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((project / "black.png").read_bytes()).decode()]}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/obb/infer", body)
    assert status == 200 and json.loads(json.loads(reply)["outputs"][0]["data"][0]) == answers, reply


def test_verification_matches_oriented_boxes_by_rotated_iou(project: Path) -> None:
    from gpux.quality.agreement import compare_boxes

    r = gpux("build", str(project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert '"kind": "boxes"' in r.stdout and '"f1": 1.0' in r.stdout and '"mean_iou": 1.0' in r.stdout, r.stdout
    square = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], np.float64)
    turned = np.array([[[5, -2], [12, 5], [5, 12], [-2, 5]]], np.float64)  # a diamond over the square
    record = compare_boxes([(square, np.array([0.9]), np.array([0]), 0.5)],
                           [(turned, np.array([0.9]), np.array([0]), 0.5)])
    # the diamond (area 98) less its 4 tips beyond the square (base 4, height 2 each): 82 shared of 116
    assert record["matched"] == 1 and record["mean_iou"] == pytest.approx(82 / 116)
