"""Semantic maps (`postprocess: {segmentation: ...}`). No trained segmenter installs from the package lists here, so
the model is built in the test to the published layouts: class scores [batch, classes, h, w] at a quarter of the
input's size (as SegFormer's logits come), and the class indexes the model's own ArgMax gives, [batch, h, w]. Its
answers through `gpux run` (--json, --save), `Session.predict` and `gpux serve` are compared with a decoding written
here from the description (each original pixel's centre through the letterbox into the map, bilinear with edges
clamped, the best class; nearest for indexes), and a build verifies them by pixel agreement and mean IoU."""

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

SIDE, CELLS, CLASSES = 32, 8, 4
WIDTH, HEIGHT = 64, 48  # the photo: letterboxed into 32 x 32 at scale 0.5, 4 rows of padding above and below
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
  logits:
    dtype: float32
    shape: [batch, {CLASSES}, {CELLS}, {CELLS}]
    postprocess:
      segmentation: {{labels: [sky, road, car, tree]}}
  classes:
    dtype: int64
    shape: [batch, {CELLS}, {CELLS}]
    labels: labels.txt
    postprocess:
      segmentation: {{layout: classes}}
providers:
  cpu: {{precision: fp32}}
verify: {{data: data.npz}}
"""


def base() -> Any:
    """Smooth class scores: a few broad regions, each class winning somewhere."""
    rng = np.random.default_rng(7)
    ys, xs = np.mgrid[0:CELLS, 0:CELLS] / CELLS
    centres = rng.uniform(0, 1, (CLASSES, 2))
    return np.stack([-8 * ((xs - cx) ** 2 + (ys - cy) ** 2) for cx, cy in centres]).astype(np.float32)[None]


def sample(grid: Any, u: Any, v: Any) -> Any:
    """Bilinear values of `grid` [h, w] at map coordinates u (x), v (y) of cell centres, edges clamped."""
    h, w = grid.shape
    u, v = np.clip(u - 0.5, 0, w - 1), np.clip(v - 0.5, 0, h - 1)
    u0, v0 = np.minimum(np.floor(u).astype(int), w - 2), np.minimum(np.floor(v).astype(int), h - 2)
    fu, fv = u - u0, v - v0
    return (grid[v0, u0] * (1 - fu) * (1 - fv) + grid[v0, u0 + 1] * fu * (1 - fv) + grid[v0 + 1, u0] * (1 - fu) * fv
            + grid[v0 + 1, u0 + 1] * fu * fv)


def coordinates() -> tuple[Any, Any]:
    """Each original pixel's centre in map coordinates: through the letterbox (scale 0.5, 4 rows down), then the
    map's quarter size."""
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH] + 0.5
    return (xs * 0.5) * CELLS / SIDE, (ys * 0.5 + 4) * CELLS / SIDE


def reference_scores(logits: Any) -> Any:
    u, v = coordinates()
    return np.stack([sample(c, u, v) for c in logits[0]]).argmax(axis=0)


def reference_classes(indexes: Any) -> Any:
    u, v = coordinates()
    return indexes[0][np.clip(np.floor(v).astype(int), 0, CELLS - 1), np.clip(np.floor(u).astype(int), 0, CELLS - 1)]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("seg")
    nodes = [helper.make_node("ReduceMean", ["images"], ["m4"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Mul", ["m4", "tiny"], ["shift"]),  # the answers move a little with the image
             helper.make_node("Add", ["scores", "shift"], ["logits"]),
             helper.make_node("ArgMax", ["logits"], ["classes"], axis=1, keepdims=0)]
    graph = helper.make_graph(
        nodes, "seg", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES, CELLS, CELLS]),
         helper.make_tensor_value_info("classes", TensorProto.INT64, ["batch", CELLS, CELLS])],
        [numpy_helper.from_array(base(), "scores"), numpy_helper.from_array(np.array(1e-3, np.float32), "tiny")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    write(folder / "labels.txt", "sky\nroad\ncar\ntree\n")
    Image.new("RGB", (WIDTH, HEIGHT), (0, 0, 0)).save(folder / "black.png")
    np.savez(folder / "data.npz", images=np.random.default_rng(2).uniform(0, 1, (6, 1, 3, SIDE, SIDE))
             .astype(np.float32))
    return folder


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_answers(answers: dict[str, Any]) -> None:
    from gpux.answers.segmentation import class_map

    shift = 1e-3 * (114 / 255) * 8 / SIDE  # the tensor's mean: 8 of 32 rows are padding (114)
    logits = base() + np.float32(shift)
    want = {"logits": reference_scores(logits), "classes": reference_classes(logits.argmax(axis=1))}
    for name, w in want.items():
        got = class_map(answers[name])
        assert answers[name]["size"] == [HEIGHT, WIDTH] and got.shape == (HEIGHT, WIDTH)
        assert (got == w).mean() >= 0.999, (name, (got == w).mean())  # float rounding at a tie, at most
        values, counts = np.unique(got, return_counts=True)
        listed = answers[name]["classes"]
        assert {c["index"]: c["pixels"] for c in listed} == dict(zip(values.tolist(), counts.tolist(), strict=True))
        assert [c["pixels"] for c in listed] == sorted(counts.tolist(), reverse=True)
        assert {c["label"] for c in listed} <= {"sky", "road", "car", "tree"} and len(values) >= 3
    assert (class_map(answers["logits"]) != class_map(answers["classes"])).mean() < 0.1  # bilinear vs nearest


def test_run_predict_and_serve_answer_class_maps_at_the_originals_size(project: Path, tmp_path: Path) -> None:
    from PIL import Image

    import gpux as api

    from .serving import ServerThread, post

    store = str(project / "store")
    r = invoke("run", str(project), str(project / "black.png"), "--store", store, "-p", "cpu", "--json", "--save",
               str(tmp_path))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    assert_answers(doc["answers"])
    saved = np.asarray(Image.open(doc["saved"]).convert("RGB"))
    assert saved.shape[0] > HEIGHT and saved[:HEIGHT].max() > 0  # the classes filled over black, a caption below
    with api.load(project, provider="cpu", strict=True, store_dir=store) as session:
        assert session.predict(str(project / "black.png")) == doc["answers"]
    text = invoke("run", str(project), str(project / "black.png"), "--store", store, "-p", "cpu")
    assert f"logits: {WIDTH}x{HEIGHT}" in text.output and " px (" in text.output, text.output
    body = json.dumps({"inputs": [{"name": "images", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode((project / "black.png").read_bytes()).decode()]}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/seg/infer", body)
    assert status == 200, reply
    outputs = {o["name"]: o for o in json.loads(reply)["outputs"]}
    assert {n: json.loads(o["data"][0]) for n, o in outputs.items()} == doc["answers"]
    assert outputs["logits"]["datatype"] == "BYTES"


def test_verification_compares_class_maps(project: Path, tmp_path: Path) -> None:
    from gpux.answers.segmentation import compare

    r = invoke("build", str(project), "--store", str(tmp_path / "store"), "-p", "cpu", "--json")
    assert r.exit_code == 0, r.output
    found = r.output
    assert '"kind": "segmentation"' in found and '"pixel_agreement": 1.0' in found and '"mean_iou": 1.0' in found
    reference = [np.zeros((4, 4), np.int64), np.ones((4, 4), np.int64)]
    moved = [reference[0].copy(), reference[1].copy()]
    moved[0][0, :2] = 1  # 2 of 16 pixels of the first row change class
    record = compare(reference, moved)
    assert record["pixel_agreement"] == pytest.approx(30 / 32) and record["rows_agree"] == 0.5
    assert record["mean_iou"] == pytest.approx((14 / 16 + 16 / 18) / 2) and record["least_agreement"] == 14 / 16


def test_tensors_answer_at_the_maps_size_and_misfits_are_errors_at_their_line(project: Path, tmp_path: Path) -> None:
    import gpux as api
    from gpux.answers.segmentation import class_map

    with api.load(project, provider="cpu", strict=True, store_dir=project / "store") as session:
        rows = session.predict({"images": np.zeros((2, 3, SIDE, SIDE), np.float32)})
    assert len(rows) == 2 and (class_map(rows[0]["logits"]) == base()[0].argmax(axis=0)).all()
    (tmp_path / "model.onnx").write_bytes((project / "model.onnx").read_bytes())
    (tmp_path / "labels.txt").write_text("sky\nroad\ncar\n")
    write(tmp_path / "gpux.yml", CONFIG.replace("verify: {data: data.npz}", "").replace(
        "labels: [sky, road, car, tree]", "labels: [sky, road]"))
    r = invoke("validate", str(tmp_path))
    assert r.exit_code == 3 and "postprocess.segmentation.labels" in r.output and "2 labels for 4 classes" in \
        r.output, r.output
    write(tmp_path / "gpux.yml", CONFIG.replace("verify: {data: data.npz}", "").replace(
        "segmentation: {layout: classes}", "segmentation: {}").replace("shape: [batch, 8, 8]", ""))
    r = gpux("run", str(tmp_path), str(project / "black.png"), "--store", str(tmp_path / "store"), "-p", "cpu")
    assert r.returncode == 3 and "a segmentation's scores come as [batch, classes, height, width]" in r.stderr, \
        r.stderr


def test_init_proposes_segmentation_and_heatmaps_only_where_the_shape_tells(tmp_path: Path) -> None:
    from gpux.config.kinds import proposals
    from gpux.model.tensor import Tensor

    image = [Tensor("x", "float32", ("batch", 3, 512, 512))]
    assert any("segmentation" in p for p in proposals(("batch", 21, 512, 512), image))
    for shape in [("batch", 3, 512, 512), ("batch", 21, 128, 128), ("batch", 2048, 16, 16), ("batch", 1, 512, 512)]:
        assert not any("segmentation" in p for p in proposals(shape, image)), shape
    person = [Tensor("x", "float32", ("batch", 3, 256, 192))]
    assert any("layout: heatmap" in p for p in proposals(("batch", 17, 64, 48), person))
    assert not any("heatmap" in p for p in proposals(("batch", 32, 64, 48), person))
    assert not any("heatmap" in p for p in proposals(("batch", 17, 32, 24), person))


def test_a_foreground_map_through_a_centre_crop() -> None:
    """One channel of probabilities, cut at the threshold, through a resize and centre crop: the pixels the crop cut
    away take the nearest cells' class."""
    from gpux.answers.decoding import Decoding
    from gpux.answers.pre import Placement
    from gpux.answers.segmentation import decode, original_map
    from gpux.config.steps import Postprocess

    spec = Postprocess.model_validate({"segmentation": {"threshold": 0.6, "labels": ["background", "object"]}})
    prob = np.zeros((1, 8, 8), np.float32)
    prob[0, 2:6, 1:4] = 0.9  # an object left of centre, touching nothing
    prob[0, :, 7] = 0.7  # and a strip down the right edge
    # a 40 x 40 photo resized to 32 x 32, its centre 24 x 24 cropped (4 pixels cut away on every side), maps of 3 px
    p = Placement(scale_x=0.8, scale_y=0.8, offset_x=-4, offset_y=-4, width=40, height=40, canvas=(24, 24))
    got = original_map(prob, Decoding(spec=spec, placement=p))
    ys, xs = np.mgrid[0:40, 0:40] + 0.5
    want = sample(prob[0], (xs * 0.8 - 4) * 8 / 24, (ys * 0.8 - 4) * 8 / 24) >= 0.6
    assert got.shape == (40, 40) and (got == want).all() and 0 < got.sum() < 40 * 40
    assert got[:, -1].all() and not got[:, 0].any()  # the cut-away edges: the strip's class on the right
    answer = decode(prob, Decoding(spec=spec, placement=p, labels=["background", "object"]))
    assert [c["label"] for c in answer["classes"]] == ["background", "object"]
    assert answer["classes"][1]["pixels"] == int(want.sum())
