"""A page read end to end (examples/ppocr_page): `gpux run WORKSPACE page.png` runs PP-OCRv4's DB detector from the
rapidocr_onnxruntime wheel on scikit-image's photo of a printed page, cuts each text region upright and reads it
with PP-OCRv4's recognizer (`crops:` steps); the lines of text printed on the page come back, in reading order, as
text and as --json. The crop geometry is checked on a drawn, turned rectangle; misplaced `crops:` steps are one
line each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

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


def test_a_page_is_read_line_by_line_in_reading_order(page: Path) -> None:
    r = gpux("run", str(page / "ppocr_page"), str(page / "ppocr_detector" / "page.png"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    [doc] = [json.loads(line) for line in r.stdout.splitlines()]
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


def test_serve_serves_its_models_and_says_the_page_pipeline_is_not(page: Path) -> None:
    import logging

    from gpux.serve.command import ServeCommand, _open

    # read from gpux.serve's own logger, whatever an earlier in-process serve or library did to logging
    # (propagation off, a level, the logger disabled by a dictConfig, logging.disable)
    log, said = logging.getLogger("gpux.serve"), []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    state = (log.disabled, log.level, logging.root.manager.disable)
    log.disabled, log.level = False, logging.INFO
    logging.disable(logging.NOTSET)
    log.addHandler(handler)
    try:
        opening = _open(ServeCommand(targets=[str(page / "ppocr_page")], provider="cpu"))
    finally:
        log.removeHandler(handler)
        log.disabled, log.level = state[:2]
        logging.disable(state[2])
    assert [p.name for p in opening.projects] == ["ppocr-detector", "ppocr-recognizer"]
    assert opening.pipelines == {}
    assert any("its pipeline crops image regions (crops:)" in line for line in said), said
