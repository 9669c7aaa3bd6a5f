"""Text regions (`postprocess: {text_boxes: ...}`) on PP-OCRv4's trained DB detector from the rapidocr_onnxruntime
wheel (the ppocr_detector example): on scikit-image's photos of a page and of signs, `gpux run` (--json, --save),
`Session.predict` and `gpux serve` answer the regions rapidocr's own detector finds (each matched at polygon IoU
>= 0.8); a build verifies them by polygon IoU. rapidocr's detector needs opencv, pyclipper and shapely, which are
not installed here: where they are, it runs; else its regions as it gave them on these pages are read from
tests/data/rapidocr_text_regions.json. The geometry (regions, minimum-area rectangles, growing back) is checked
against shapes drawn in the test."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux
from .trained import ROOT, _example

OUT = "sigmoid_0.tmp_0"
PAGES = ("page.png", "text.png")
RECORDED = Path(__file__).parent / "data" / "rapidocr_text_regions.json"


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ppocr_detector")
    shutil.copy(ROOT / "examples" / "ppocr_detector" / "gpux.yml", folder)
    make = _example("ppocr_detector")
    try:
        make.export(folder)
    except make.Missing as exc:
        pytest.skip(str(exc))
    make.pages(folder)
    return folder


def rapidocr_regions(folder: Path) -> dict[str, Any]:
    """rapidocr's own detector's regions on each page, live where its dependencies are installed."""
    try:
        import cv2  # noqa: F401
        import pyclipper  # noqa: F401
        import shapely  # noqa: F401
    except ImportError:
        return json.loads(RECORDED.read_text())["regions"]  # type: ignore[no-any-return]
    import yaml
    from PIL import Image
    from rapidocr_onnxruntime import ch_ppocr_det

    config = yaml.safe_load((Path(ch_ppocr_det.__file__).parents[1] / "config.yaml").read_text())["Det"]
    config["model_path"] = str(folder / "model.onnx")
    det = ch_ppocr_det.TextDetector(config)
    return {n: np.asarray(det(np.asarray(Image.open(folder / n).convert("RGB"))[:, :, ::-1].copy())[0]).tolist()
            for n in PAGES}


def assert_matched(got: list[dict[str, Any]], want: list[Any]) -> None:
    """As many regions as rapidocr's, each of its regions matched by one of ours at polygon IoU >= 0.8."""
    from gpux.quality.polygons import polygon_iou

    assert len(got) == len(want), (got, want)
    for region in want:
        best = max(polygon_iou(region, g["box"]) for g in got)
        assert best >= 0.8, (region, got)
    for g in got:
        assert len(g["box"]) == 4 and 0.5 <= g["score"] <= 1


def test_run_answers_the_regions_rapidocr_finds(detector: Path, tmp_path: Path) -> None:
    from PIL import Image

    want = rapidocr_regions(detector)
    r = gpux("run", str(detector), *(str(detector / n) for n in PAGES), "-p", "cpu", "--json",
             "--save", str(tmp_path / "saved"))
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    for doc, name in zip(docs, PAGES, strict=True):
        assert_matched(doc["answers"][OUT], want[name])
        saved = np.asarray(Image.open(doc["saved"]).convert("RGB"), np.int32)
        page = np.asarray(Image.open(detector / name).convert("RGB"), np.int32)
        assert saved.shape == page.shape and (np.abs(saved - page).sum(axis=2) > 60).mean() > 0.005  # outlines
    text = gpux("run", str(detector), str(detector / "page.png"), "-p", "cpu")
    assert f"{OUT}: {len(want['page.png'])} regions" in text.stdout, text.stderr


def test_predict_serve_and_verification(detector: Path) -> None:
    import base64

    import gpux as api

    from .serving import ServerThread, post

    with api.load(detector, provider="cpu", strict=True) as session:
        answers = [session.predict(str(detector / n))[OUT] for n in PAGES]
    for got, name in zip(answers, PAGES, strict=True):
        assert_matched(got, rapidocr_regions(detector)[name])
    data = [base64.b64encode((detector / n).read_bytes()).decode() for n in PAGES]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [2], "data": data}]})
    with ServerThread([detector], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/ppocr-detector/infer", body)
    assert status == 200, reply
    assert [json.loads(x) for x in json.loads(reply)["outputs"][0]["data"]] == answers
    r = gpux("inspect", str(detector), "--json")
    assert r.returncode == 0, r.stderr
    found = r.stdout
    assert '"kind": "text_boxes"' in found and '"f1": 1.0' in found and '"judged": true' in found, found[:3000]


def rectangle(cx: float, cy: float, w: float, h: float, degrees: float) -> Any:
    """The corners of a w x h rectangle centred at (cx, cy), turned by `degrees`."""
    a = math.radians(degrees)
    u, v = np.array([math.cos(a), math.sin(a)]) * w / 2, np.array([-math.sin(a), math.cos(a)]) * h / 2
    c = np.array([cx, cy])
    return np.array([c - u - v, c + u - v, c + u + v, c - u + v])


def test_regions_are_found_and_sized_as_drawn() -> None:
    """Filled rectangles drawn on a map: two apart are two regions (8-connected: touching corners join), each
    region's minimum-area rectangle has the drawn size and turn, and growing it adds area x unclip / perimeter on
    every side."""
    from PIL import Image, ImageDraw

    from gpux.answers.text_boxes import components, min_area_box, regions, unclipped
    from gpux.config.steps import TextBoxes

    image = Image.new("L", (200, 120), 0)
    pen = ImageDraw.Draw(image)
    turned = rectangle(60, 50, 80, 20, 15)
    pen.polygon([tuple(p) for p in turned], fill=255)
    pen.rectangle((120, 80, 180, 100), fill=200)
    pen.point([(10, 110), (11, 111)], fill=255)  # diagonal neighbours: one region
    bitmap = np.asarray(image) > 0
    found = components(bitmap)
    assert len(found) == 3 and len(found[2][0]) == 4  # the diagonal pair: two runs of one pixel
    ys, xs = found[0]
    box, short = min_area_box(np.stack([xs, ys], 1).astype(np.float64))
    sides = np.linalg.norm(box - np.roll(box, -1, 0), axis=1)
    assert abs(max(sides) - 80) < 2.5 and abs(short - 20) < 2.5
    angle = math.degrees(math.atan2(*(box[1] - box[0])[::-1]))
    assert abs(angle - 15) < 2, box
    grown, gshort = unclipped(rectangle(0, 0, 80, 20, 0), 1.5)
    d = 80 * 20 * 1.5 / 200
    assert gshort == pytest.approx(20 + 2 * d) and np.allclose(np.sort(np.abs(grown), 0), [[40 + d, 10 + d]] * 4)
    probability = np.asarray(image, np.float32) / 255
    quads, scores = regions(probability[None], TextBoxes(box_threshold=0.5, min_size=3))
    assert len(quads) == 2 and scores[0] == pytest.approx(1, abs=0.05) and 0.7 < scores[1] < 0.85
