"""Instance masks (`postprocess: {masks: {layout: yolov8_seg, protos: output1}}`): a step that reads two outputs. No
trained segmenter installs from the package lists here, so the head is built in the test to ultralytics' published
segment export layout (output0 [batch, 4 + classes + 2 coefficients, anchors], output1 the prototype masks [batch,
2, 16, 16]); `gpux run`, `Session.predict` and `gpux serve` answer each box's mask as run lengths, compared with a
decoding written here from the description (sigmoid of coefficients x prototypes, zero outside the box, scaled to
the input), and a build verifies them by mask IoU."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux, write

SIDE = 64
CONFIG = f"""\
name: seg
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
    shape: [batch, 7, 3]
    labels: [blob]
    postprocess:
      masks: {{protos: output1}}
  output1:
    dtype: float32
    shape: [batch, 2, 16, 16]
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


def heads() -> tuple[Any, Any]:
    """Boxes: anchor 0 the left half's blob (coefficients pick prototype 0), anchor 1 the lower right's (prototype
    1), anchor 2 under the threshold. Prototypes: 0 a disc on the left, 1 a square on the lower right (logits +-8)."""
    out = np.zeros((1, 7, 3), np.float32)
    out[0, :, 0] = [16, 32, 30, 40, 0.9, 1, 0]
    out[0, :, 1] = [48, 48, 28, 28, 0.8, 0, 1]
    out[0, :, 2] = [10, 10, 8, 8, 0.1, 1, 1]
    ys, xs = np.mgrid[0:16, 0:16] + 0.5
    disc = (xs - 4) ** 2 + (ys - 8) ** 2 <= 3.5 ** 2
    square = (xs > 9) & (xs < 15) & (ys > 9) & (ys < 15)
    protos = np.stack([np.where(disc, 8, -8), np.where(square, 8, -8)]).astype(np.float32)[None]
    return out, protos


def reference(out: Any, protos: Any) -> list[Any]:
    """Each kept box's mask at the 64x64 input (= the image): the mask cells whose centre is inside the box, each
    cell a 4x4 block."""
    masks = []
    for a in np.argsort(-out[0, 4])[:2]:
        cx, cy, w, h = out[0, :4, a]
        m = 1 / (1 + np.exp(-(out[0, 5:, a] @ protos[0].reshape(2, -1)))).reshape(16, 16)
        centres = (np.arange(16) + 0.5) * 4
        inside = ((centres >= cx - w / 2) & (centres < cx + w / 2))[None] & \
            ((centres >= cy - h / 2) & (centres < cy + h / 2))[:, None]
        masks.append(np.kron((m * inside) >= 0.5, np.ones((4, 4), bool)))
    return masks


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("seg")
    out, protos = heads()
    nodes = [helper.make_node("ReduceMean", ["images"], ["m4"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Reshape", ["m4", "three"], ["m"]), helper.make_node("Mul", ["m", "tiny"], ["s"]),
             helper.make_node("Add", ["boxes", "s"], ["output0"]),
             helper.make_node("Reshape", ["m4", "four"], ["m2"]), helper.make_node("Mul", ["m2", "tiny"], ["s2"]),
             helper.make_node("Add", ["protos", "s2"], ["output1"])]
    graph = helper.make_graph(
        nodes, "seg", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 7, 3]),
         helper.make_tensor_value_info("output1", TensorProto.FLOAT, ["batch", 2, 16, 16])],
        [numpy_helper.from_array(out, "boxes"), numpy_helper.from_array(protos, "protos"),
         numpy_helper.from_array(np.float32(1e-3), "tiny"),
         numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "three"),
         numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), "four")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    Image.new("RGB", (SIDE, SIDE), (0, 0, 0)).save(folder / "black.png")
    np.savez(folder / "data.npz", images=np.random.default_rng(2).uniform(0, 1, (8, 1, 3, SIDE, SIDE))
             .astype(np.float32))
    return folder


def assert_masks(answer: list[dict[str, Any]]) -> None:
    from gpux.answers.masks import from_run_lengths

    want = reference(*heads())
    assert [a["score"] for a in answer] == pytest.approx([0.9, 0.8], abs=1e-3) and len(want) == 2
    for a, w in zip(answer, want, strict=True):
        got = from_run_lengths(a["mask"])
        assert got.shape == (SIDE, SIDE) and w.sum() > 50
        assert (got & w).sum() / (got | w).sum() > 0.9, (got.sum(), w.sum())  # bilinear here, blocks there


def test_run_predict_and_serve_answer_masks_read_from_two_outputs(project: Path) -> None:
    import gpux as api

    from .serving import ServerThread, post

    r = gpux("run", str(project), str(project / "black.png"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)["answers"]["output0"]
    assert_masks(answer)
    with api.load(project, provider="cpu", strict=True) as session:
        assert session.predict(str(project / "black.png"))["output0"] == answer
    body = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((project / "black.png").read_bytes()).decode()]}],
                       "outputs": [{"name": "output0"}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/seg/infer", body)
    assert status == 200 and json.loads(json.loads(reply)["outputs"][0]["data"][0]) == answer, reply


def test_verification_matches_masks_and_a_missing_protos_output_is_refused(project: Path, tmp_path: Path) -> None:
    from gpux.answers.masks import from_run_lengths, run_lengths

    r = gpux("build", str(project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert '"kind": "masks"' in r.stdout and '"mean_mask_iou": 1.0' in r.stdout, r.stdout
    mask = np.zeros((5, 4), bool)
    mask[1:3, 2] = True
    assert run_lengths(mask) == {"size": [5, 4], "counts": [11, 2, 7]}
    assert (from_run_lengths(run_lengths(mask)) == mask).all()
    (tmp_path / "model.onnx").write_bytes((project / "model.onnx").read_bytes())
    write(tmp_path / "gpux.yml", CONFIG.replace("protos: output1", "protos: output2").replace(
        "verify: {data: data.npz}", ""))
    r = gpux("run", str(tmp_path), str(project / "black.png"), "-p", "cpu")
    assert r.returncode == 3 and "'output2' is not an output of the model" in r.stderr, r.stderr
