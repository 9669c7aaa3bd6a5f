"""Heatmap keypoints (`postprocess: {keypoints: {layout: heatmap, points: N}}`). No trained top-down pose model
installs from the package lists here, so the model is built in the test to the published layout (HRNet's, mmpose's
heatmap heads: one confidence map per keypoint, a quarter of the input's size), holding set Gaussian peaks, some on
the edges where mmpose's refinement rule leaves an axis alone. Its answers through `gpux run` (--json, --save),
`Session.predict` and `gpux serve` are compared with a decoding written here from mmpose's description (argmax, a
quarter cell towards the higher neighbour, input / map scale, the letterbox undone), and a build verifies them by
keypoint similarity and points within a cell."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from gpux.cli.main import cli

from .conftest import gpux, write

H, W, MH, MW = 64, 48, 16, 12  # the input and its maps
SIDE = 96  # the photo: letterboxed into 48 x 64 at scale 0.5, 8 rows of padding above and below
PEAKS = [(5.3, 7.6, 0.9), (1.0, 4.2, 0.8), (6.7, 0.0, 0.7), (10.6, 14.8, 0.85), (3.4, 11.2, 0.3)]  # x, y, height
CONFIG = f"""\
name: pose
version: 1.0.0
model: {{source: model.onnx}}
inputs:
  input:
    dtype: float32
    shape: [batch, 3, {H}, {W}]
    preprocess:
      image: {{resize: {{letterbox: [{H}, {W}]}}, mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}}
outputs:
  heatmaps:
    dtype: float32
    shape: [batch, {len(PEAKS)}, {MH}, {MW}]
    postprocess:
      keypoints: {{layout: heatmap, points: {len(PEAKS)}, names: [nose, left, top, corner, faint],
                  skeleton: [[0, 1], [1, 2]]}}
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


def maps() -> Any:
    ys, xs = np.mgrid[0:MH, 0:MW]
    return np.stack([a * np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * 1.5 ** 2))
                     for x, y, a in PEAKS]).astype(np.float32)[None]


def reference(heat: Any) -> list[list[float]]:
    """mmpose's MSRAHeatmap decoding, point by point: the peak, refine_keypoints' quarter step, the scale to the
    input, then the letterbox (scale 0.5, 8 rows down) undone."""
    out = []
    for k in range(heat.shape[1]):
        m = heat[0, k]
        y, x = np.unravel_index(int(m.argmax()), m.shape)
        px, py = float(x), float(y)
        if 1 < x < MW - 1 and 0 < y < MH:
            px += 0.25 * np.sign(m[y, x + 1] - m[y, x - 1])
        if 1 < y < MH - 1 and 0 < x < MW:
            py += 0.25 * np.sign(m[y + 1, x] - m[y - 1, x])
        ix, iy = px * W / MW, py * H / MH
        out.append([min(max(ix / 0.5, 0), SIDE), min(max((iy - 8) / 0.5, 0), SIDE), float(m[y, x])])
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("heat")
    nodes = [helper.make_node("ReduceMean", ["input"], ["m"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Mul", ["m", "tiny"], ["shift"]),  # the answers move a little with the image
             helper.make_node("Add", ["peaks", "shift"], ["heatmaps"])]
    graph = helper.make_graph(
        nodes, "pose", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, H, W])],
        [helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, ["batch", len(PEAKS), MH, MW])],
        [numpy_helper.from_array(maps(), "peaks"), numpy_helper.from_array(np.array(1e-3, np.float32), "tiny")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    Image.new("RGB", (SIDE, SIDE), (0, 0, 0)).save(folder / "black.png")
    np.savez(folder / "data.npz", input=np.random.default_rng(2).normal(0, 1, (12, 1, 3, H, W)).astype(np.float32))
    return folder


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_answer(answer: dict[str, Any]) -> None:
    want = reference(maps())
    assert answer["names"] == ["nose", "left", "top", "corner", "faint"]
    assert np.allclose(answer["keypoints"], want, atol=0.02), (answer["keypoints"], want)
    assert answer["keypoints"][1][0] == pytest.approx(4 * 1.0 / 0.5)  # x = 1: left unrefined, as mmpose does
    assert answer["keypoints"][0][0] == pytest.approx(4 * 5.25 / 0.5)  # a quarter cell towards the higher side


def test_run_predict_and_serve_answer_each_maps_peak_in_the_originals_pixels(project: Path, tmp_path: Path) -> None:
    from PIL import Image

    import gpux as api

    from .serving import ServerThread, post

    store = str(project / "store")
    r = invoke("run", str(project), str(project / "black.png"), "--store", store, "-p", "cpu", "--json", "--save",
               str(tmp_path))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert_answer(doc["answers"]["heatmaps"])
    saved = np.asarray(Image.open(doc["saved"]).convert("RGB"))
    assert saved.max() > 0 and saved.shape[:2] == (SIDE, SIDE)  # points and skeleton drawn on black
    with api.load(project, provider="cpu", strict=True, store_dir=store) as session:
        assert session.predict(str(project / "black.png")) == doc["answers"]
    text = invoke("run", str(project), str(project / "black.png"), "--store", store, "-p", "cpu")
    assert "heatmaps: 5 points" in text.output and "nose (" in text.output, text.output
    body = json.dumps({"inputs": [{"name": "input", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((project / "black.png").read_bytes()).decode()]}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/pose/infer", body)
    assert status == 200, reply
    out = json.loads(reply)["outputs"][0]
    assert out["datatype"] == "BYTES" and json.loads(out["data"][0]) == doc["answers"]["heatmaps"]


def test_verification_judges_points_by_similarity_and_cells(project: Path, tmp_path: Path) -> None:
    from gpux.answers.heatmaps import compare

    r = invoke("build", str(project), "--store", str(tmp_path / "store"), "-p", "cpu", "--json")
    assert r.exit_code == 0, r.output
    assert '"kind": "heatmap_keypoints"' in r.output and '"mean_oks": 1.0' in r.output, r.output
    assert '"points_close": 1.0' in r.output and '"confident_points": 48' in r.output  # 4 of 5 points x 12 rows
    ref = np.array([[10.0, 10.0, 0.9], [20.0, 20.0, 0.8], [5.0, 5.0, 0.1]])
    moved = ref + np.array([[3.0, 0, 0], [6.0, 0, 0], [40.0, 0, 0]])  # within a 4-pixel cell, beyond, not judged
    record = compare([(ref, 64.0 * 48, 4.0)], [(moved, 64.0 * 48, 4.0)])
    assert record["confident_points"] == 2 and record["points_close"] == 0.5
    k2 = 2 * 64 * 48 * 0.01
    assert record["mean_oks"] == pytest.approx((np.exp(-9 / k2) + np.exp(-36 / k2)) / 2)


def test_a_map_count_that_is_not_the_points_is_an_error_at_its_line(project: Path, tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes((project / "model.onnx").read_bytes())
    write(tmp_path / "gpux.yml", CONFIG.replace("verify: {data: data.npz}", "").replace(
        f"points: {len(PEAKS)}, names: [nose, left, top, corner, faint]", "points: 4").replace(
        f"shape: [batch, {len(PEAKS)}, {MH}, {MW}]", ""))
    r = gpux("run", str(tmp_path), str(project / "black.png"), "--store", str(tmp_path / "store"), "-p", "cpu")
    assert r.returncode == 3 and "heatmap keypoints come as [batch, 4 points, height, width]" in r.stderr, r.stderr
