"""A page read end to end (examples/ppocr_page): `gpux run WORKSPACE page.png` runs PP-OCRv4's DB detector from the
rapidocr_onnxruntime wheel on scikit-image's photo of a printed page, cuts each text region upright and reads it
with PP-OCRv4's recognizer (`crops:` steps); the lines of text printed on the page come back, in reading order, as
text and as --json, and `--save` draws them. `gpux serve WORKSPACE` serves the pipeline as one model that takes
the page as BYTES over REST and gRPC and answers what `gpux run` answers. The crop geometry is checked on a drawn,
turned rectangle; misplaced `crops:` steps are one line each."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from .conftest import gpux
from .trained import ROOT, _example

REGIONS = "detector.sigmoid_0.tmp_0"
TEXT = "recognizer.softmax_11.tmp_0"
# the lines printed on skimage's page.png, top to bottom (words the recognizer must read as printed)
PRINTED = (("Region", "segmentation"), ("determine", "markers", "coins"), ("pixels", "label"),
           ("unambiguously", "object", "background"), ("histogram",))


def _copy(example: str, folder: Path) -> Path:
    """The example's gpux.yml and model in `folder`, without its verify data (this test runs; it builds nothing)."""
    make = _example(example)
    target = folder / example
    config = yaml.safe_load((ROOT / "examples" / example / "gpux.yml").read_text())
    config.pop("verify", None)
    try:
        make.export(target)
    except make.Missing as exc:
        pytest.skip(str(exc))
    (target / "gpux.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return target


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ppocr_page workspace beside copies of the two examples it names; its page at detector/page.png."""
    root = tmp_path_factory.mktemp("ppocr")
    _copy("ppocr_detector", root)
    _copy("ppocr_recognizer", root)
    (root / "ppocr_page").mkdir()
    shutil.copy(ROOT / "examples" / "ppocr_page" / "gpux.workspace.yml", root / "ppocr_page")
    return root


@pytest.fixture(scope="module")
def read(page: Path) -> dict[str, Any]:
    """`gpux run WORKSPACE page.png --json --save DIR`'s one line (DIR: saved/ beside the workspace)."""
    r = gpux("run", str(page / "ppocr_page"), str(page / "ppocr_detector" / "page.png"), "-p", "cpu", "--json",
             "--save", str(page / "saved"))
    assert r.returncode == 0, r.stderr
    [doc] = [json.loads(line) for line in r.stdout.splitlines()]
    return dict(doc)


def test_a_page_is_read_line_by_line_in_reading_order(page: Path, read: dict[str, Any]) -> None:
    doc = read
    assert doc["workspace"] == "ppocr-page" and doc["provider"] == "cpu" and list(doc["answers"]) == [REGIONS]
    regions = doc["answers"][REGIONS]
    lines = [region["answers"][TEXT]["text"] for region in regions]
    assert len(lines) == len(PRINTED), lines
    for text, words in zip(lines, PRINTED, strict=True):
        assert all(w in text for w in words), (text, words)
    tops = [region["box"][0][1] for region in regions]
    assert tops == sorted(tops)  # top to bottom: one region per line on this page
    for region in regions:
        assert len(region["box"]) == 4 and 0.5 <= region["score"] <= 1
        assert 0.9 <= region["answers"][TEXT]["score"] <= 1

    shown = gpux("run", str(page / "ppocr_page"), str(page / "ppocr_detector" / "page.png"), "-p", "cpu")
    assert shown.returncode == 0, shown.stderr
    assert f"{REGIONS}: 5 regions" in shown.stdout
    for text in lines:
        assert json.dumps(text) in shown.stdout


def test_crops_are_refused_where_they_cannot_run(page: Path, tmp_path: Path) -> None:
    ws = page / "ppocr_page" / "gpux.workspace.yml"
    r = gpux("run", str(ws), "-i", json.dumps({"x": np.zeros((1, 3, 32, 32)).tolist()}), "-p", "cpu")
    assert r.returncode == 3 and "pipeline.1.crops: a crops step runs on image files" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr

    wrong = tmp_path / "gpux.workspace.yml"  # the recognizer's output holds no text regions to crop
    wrong.write_text(f"""name: wrong
models:
  detector: {{path: {page / "ppocr_detector"}}}
  recognizer: {{path: {page / "ppocr_recognizer"}}}
pipeline:
  - model: detector
  - model: recognizer
    crops: {REGIONS}
  - model: recognizer
    crops: {TEXT}
""")
    r = gpux("run", str(wrong), str(page / "ppocr_detector" / "page.png"), "-p", "cpu")
    assert r.returncode == 3, r.stderr
    assert "pipeline.2.crops: 'recognizer.softmax_11.tmp_0' answers no text regions" in r.stderr, r.stderr
    r = gpux("run", str(ws), str(page / "ppocr_detector" / "page.png"), "--batch", "4", "--runs", "3")
    assert r.returncode == 2 and "--runs, --batch: not supported when answering files through a pipeline" in r.stderr


def test_a_turned_region_is_cut_upright() -> None:
    """A rectangle drawn turned by 30 degrees comes out upright: its left half dark, its right half light."""
    from PIL import Image, ImageDraw

    from gpux.answers.crops import reading_order, upright_crop

    image = Image.new("RGB", (200, 200), (128, 128, 128))
    draw = ImageDraw.Draw(image)
    c, s = np.cos(np.radians(30)), np.sin(np.radians(30))

    def at(x: float, y: float) -> tuple[float, float]:  # (x, y) of the upright 80x20 rectangle, turned about (100, 100)
        return 100 + x * c - y * s, 100 + x * s + y * c

    draw.polygon([at(-40, -10), at(0, -10), at(0, 10), at(-40, 10)], fill=(0, 0, 0))
    draw.polygon([at(0, -10), at(40, -10), at(40, 10), at(0, 10)], fill=(255, 255, 255))
    box = [list(at(-40, -10)), list(at(40, -10)), list(at(40, 10)), list(at(-40, 10))]
    crop = np.asarray(upright_crop(image, box).convert("L"), np.float32)
    assert crop.shape == (20, 80)
    assert crop[3:-3, 3:37].mean() < 20 and crop[3:-3, 43:-3].mean() > 235
    tall = upright_crop(image, [[90, 50], [110, 50], [110, 150], [90, 150]])
    assert tall.size == (100, 20)  # a crop 1.5 times higher than wide is read as a line turned a quarter

    def region(x: float, y: float) -> dict[str, object]:
        return {"box": [[x, y], [x + 50, y], [x + 50, y + 20], [x, y + 20]], "score": 1.0}

    got = reading_order([region(100, 3), region(0, 40), region(10, 0), region(60, 44)])  # type: ignore[list-item]
    assert [r["box"][0] for r in got] == [[10, 0], [100, 3], [0, 40], [60, 44]]


def test_save_draws_each_region_and_its_text_beside_the_page(page: Path, read: dict[str, Any]) -> None:
    """The page with each region's polygon in its color, and beside it a white panel where the same polygon holds
    the region's text; the page's own pixels are untouched away from the regions."""
    from PIL import Image

    from gpux.answers.draw import PALETTE

    original = np.asarray(Image.open(page / "ppocr_detector" / "page.png").convert("RGB"), np.int16)
    assert read["saved"] == str(page / "saved" / "page.png")
    saved = np.asarray(Image.open(read["saved"]).convert("RGB"), np.int16)
    h, w, _ = original.shape
    assert saved.shape == (h, 2 * w, 3)
    away = np.ones((h, w), bool)
    for i, region in enumerate(read["answers"][REGIONS]):
        xs, ys = [round(x) for x, _ in region["box"]], [round(y) for _, y in region["box"]]
        left, top, right, bottom = min(xs), min(ys), max(xs), max(ys)
        (x0, y0), (x1, y1) = region["box"][:2]
        for side in (0, w):  # its outline along its top edge, on the page and on the panel
            for t in np.linspace(0.05, 0.95, 19):
                x, y = round(side + x0 + t * (x1 - x0)), round(y0 + t * (y1 - y0))
                near = saved[max(y - 3, 0):y + 4, x - 3:x + 4]
                assert (np.abs(near - PALETTE[i % len(PALETTE)]).sum(axis=2) == 0).any(), (i, side, t)
        inside = saved[top + 3:bottom - 2, w + left + 3:w + right - 3]
        assert (inside.max(axis=2) < 100).sum() > 50, i  # its text written inside the panel's polygon
        away[max(top - 6, 0):bottom + 6, max(left - 6, 0):right + 6] = False
    assert (saved[:, :w][away] == original[away]).all()
    assert (saved[:, w:][away] == 255).all()


def test_save_of_a_pipeline_without_crops_draws_its_first_step_and_needs_something_to_draw(
        page: Path, read: dict[str, Any], tmp_path: Path) -> None:
    """One step (the detector alone): the page with its regions' polygons, no panel. A first step that declares no
    postprocess is refused before anything opens."""
    from PIL import Image

    ws = tmp_path / "gpux.workspace.yml"
    ws.write_text(f"name: regions\nmodels:\n  detector: {{path: {page / 'ppocr_detector'}}}\n"
                  "pipeline:\n  - model: detector\n")
    r = gpux("run", str(ws), str(page / "ppocr_detector" / "page.png"), "-p", "cpu", "--save", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    assert f"saved: {tmp_path / 'out' / 'page.png'}" in r.stdout
    original = np.asarray(Image.open(page / "ppocr_detector" / "page.png").convert("RGB"))
    alone = np.asarray(Image.open(tmp_path / "out" / "page.png").convert("RGB"))
    together = np.asarray(Image.open(read["saved"]).convert("RGB"))
    assert alone.shape == original.shape and together.shape[1] == 2 * original.shape[1]
    drawn = (alone != original).any(axis=2)  # the same polygons as the page side of the pipeline's (colors aside:
    assert drawn.mean() > 0.01  # its regions are not put in reading order, that only a crops step needs)
    np.testing.assert_array_equal(drawn, (together[:, :original.shape[1]] != original).any(axis=2))

    plain = shutil.copytree(page / "ppocr_detector", tmp_path / "plain", ignore=lambda *_: ["model.onnx"])
    (plain / "model.onnx").symlink_to(page / "ppocr_detector" / "model.onnx")
    config = yaml.safe_load((plain / "gpux.yml").read_text())
    config["outputs"]["sigmoid_0.tmp_0"].pop("postprocess")
    (plain / "gpux.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    ws.write_text(f"name: plain\nmodels:\n  detector: {{path: {plain}}}\npipeline:\n  - model: detector\n")
    r = gpux("run", str(ws), str(page / "ppocr_detector" / "page.png"), "--save", str(tmp_path / "out"))
    assert r.returncode == 2 and "the pipeline's first step, declares no postprocess" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_serve_answers_the_page_over_rest_and_grpc_as_gpux_run_does(page: Path, read: dict[str, Any]) -> None:
    httpclient = pytest.importorskip("tritonclient.http")
    grpcclient = pytest.importorskip("tritonclient.grpc")
    from tritonclient.utils import InferenceServerException

    from gpux.serve.command import ServeCommand, _open

    from .serving import ServerThread, error_of, post

    opening = _open(ServeCommand(targets=[str(page / "ppocr_page")], provider="cpu"))
    assert [p.name for p in opening.projects] == ["ppocr-detector", "ppocr-recognizer", "ppocr-page"]
    assert list(opening.pipelines) == ["ppocr-page"]
    image = (page / "ppocr_detector" / "page.png").read_bytes()
    want = read["answers"][REGIONS]
    only = opening._replace(projects=opening.projects[-1:])  # the pipeline alone (its models serve as any do)
    with ServerThread([], provider="cpu", opening=only) as server:
        http, grpc = httpclient.InferenceServerClient(server.http), grpcclient.InferenceServerClient(server.grpc)
        meta = http.get_model_metadata("ppocr-page")
        assert meta["platform"] == "gpux_cpu"
        assert [(t["name"], t["datatype"], t["shape"], t["parameters"]["content_type"]) for t in meta["inputs"]] \
            == [("x", "BYTES", [-1], "image")]
        assert [(t["name"], t["datatype"], t["parameters"]["content_type"]) for t in meta["outputs"]] \
            == [(REGIONS, "BYTES", "json")]
        status, _, reply = post(server.http, "/v2/models/ppocr-page/config", b"", method="GET")
        assert status == 200 and json.loads(reply)["max_batch_size"] == 0, reply  # a page at a time

        sent = httpclient.InferInput("x", [1], "BYTES")
        sent.set_data_from_numpy(np.array([image], dtype=object))
        (got,) = http.infer("ppocr-page", [sent]).as_numpy(REGIONS)
        assert json.loads(got) == want  # the regions, their boxes, scores and texts: exactly gpux run's
        rpc = grpcclient.InferInput("x", [1], "BYTES")
        rpc.set_data_from_numpy(np.array([image], dtype=object))
        (got,) = grpc.infer("ppocr-page", [rpc]).as_numpy(REGIONS)
        assert json.loads(got) == want
        body = {"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1],  # JSON: the file in base64
                            "data": [base64.b64encode(b"name,score\ncat,1\n").decode()]}]}  # not an image
        status, _, reply = post(server.http, "/v2/models/ppocr-page/infer", json.dumps(body))
        assert status == 400 and "input 'x' element 0: not an image Pillow can read" in error_of(reply), reply
        rpc.set_data_from_numpy(np.array([b"\x89PNG\r\n\x1a\n" + bytes(40)], dtype=object))  # a broken PNG
        with pytest.raises(InferenceServerException) as refused:
            grpc.infer("ppocr-page", [rpc])
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT", refused.value
        assert "input 'x' element 0: " in refused.value.message()
        tensor = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}
        status, _, reply = post(server.http, "/v2/models/ppocr-page/infer", json.dumps(tensor))
        assert status == 400 and "has datatype FP32 but model 'ppocr-page' expects BYTES" in error_of(reply), reply


def test_serve_loads_the_page_again_from_its_workspace_and_unload_closes_its_sessions(
        page: Path, read: dict[str, Any]) -> None:
    """A load reads the workspace again and serves the page as before; max_batch_size is refused for what the model
    is (one file at a time); an unload closes the sessions of both steps."""
    import weakref

    from gpux.serve.command import ServeCommand, _open

    from .serving import ServerThread, error_of, post
    from .test_serve_pipeline_repo import live_sessions

    opening = _open(ServeCommand(targets=[str(page / "ppocr_page")], provider="cpu"))
    image = (page / "ppocr_detector" / "page.png").read_bytes()
    body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1],
                                   "data": [base64.b64encode(image).decode()]}]})
    before = {id(s) for s in live_sessions()}
    with ServerThread([], provider="cpu", opening=opening._replace(projects=opening.projects[-1:])) as server:
        started = [weakref.ref(s) for s in live_sessions() if id(s) not in before]
        assert len(started) == 2  # the detector's and the recognizer's
        override = json.dumps({"parameters": {"config": json.dumps({"max_batch_size": 4})}})
        status, _, reply = post(server.http, "/v2/repository/models/ppocr-page/load", override)
        assert status == 400 and error_of(reply) == (
            "failed to load 'ppocr-page': config override: max_batch_size 4 for a model that answers one file at a "
            "time (a page pipeline: each image runs through all its steps on its own, requests are never merged); "
            "0 serves it"), reply
        status, _, reply = post(server.http, "/v2/repository/models/ppocr-page/load", "")
        assert status == 200, reply
        assert all(r() is None for r in started)  # the replaced version's sessions: closed
        status, _, reply = post(server.http, "/v2/models/ppocr-page/infer", body)
        assert status == 200, reply
        (out,) = json.loads(reply)["outputs"]
        assert json.loads(out["data"][0]) == read["answers"][REGIONS]
        serving = [weakref.ref(s) for s in live_sessions() if id(s) not in before]
        assert len(serving) == 2
        status, _, reply = post(server.http, "/v2/repository/models/ppocr-page/unload", "")
        assert status == 200, reply
        assert [r() for r in serving if r() is not None] == [], "the unloaded pipeline's sessions are still open"
