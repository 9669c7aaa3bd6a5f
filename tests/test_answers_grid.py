"""A raw anchor grid declared as a box layout (`yolox_grid`: YOLOX's output before its grid decode): nudenet's trained
YOLOv8n detector from its wheel, its decoded boxes turned back into a YOLOX grid with onnx.helper (xy offsets in
cells, log w/h in strides, objectness 1), answers what the original answers; misdeclared, it is refused at its line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpux.answers.post import anchor_grid

from .conftest import gpux
from .test_answers_outputs import photo
from .trained import yolov8_detector_example

STRIDES = (8, 16, 32)


def grid_model(source: Path, target: Path, size: tuple[int, int] = (320, 320)) -> None:
    """output0 [1, 4 + C, anchors] (cx, cy, w, h, class scores) at an input of `size` → grid [1, anchors, 5 + C] as
    YOLOX leaves it."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    anchors = sum(-(-size[0] // s) * -(-size[1] // s) for s in STRIDES)
    cells = anchor_grid(anchors, STRIDES, size)
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value - 4
    consts = {"cells": cells[None, :, :2], "stride": cells[None, :, 2:], "one": np.ones((1, anchors, 1), np.float32),
              "s0": np.array([0], np.int64), "s2": np.array([2], np.int64), "s4": np.array([4], np.int64),
              "end": np.array([1 << 30], np.int64), "axis": np.array([2], np.int64)}
    model.graph.initializer.extend(numpy_helper.from_array(v.astype(v.dtype), k) for k, v in consts.items())
    model.graph.node.extend([
        helper.make_node("Transpose", ["output0"], ["t"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["t", "s0", "s2", "axis"], ["xy"]),
        helper.make_node("Slice", ["t", "s2", "s4", "axis"], ["wh"]),
        helper.make_node("Slice", ["t", "s4", "end", "axis"], ["scores"]),
        helper.make_node("Div", ["xy", "stride"], ["xy_cells"]),
        helper.make_node("Sub", ["xy_cells", "cells"], ["offsets"]),
        helper.make_node("Div", ["wh", "stride"], ["wh_strides"]),
        helper.make_node("Log", ["wh_strides"], ["log_wh"]),
        helper.make_node("Concat", ["offsets", "log_wh", "one", "scores"], ["grid"], axis=2),
    ])
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("grid", 1, [1, anchors, 5 + classes]))
    onnx.save(model, str(target))


@pytest.fixture(scope="module")
def detectors(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    decoded = yolov8_detector_example(tmp_path_factory.mktemp("yolov8"))
    raw = tmp_path_factory.mktemp("grid")
    grid_model(decoded / "model.onnx", raw / "model.onnx")
    text = (decoded / "gpux.yml").read_text().replace("name: yolov8-detector", "name: grid-detector")
    text = text.replace("  output0:", "  grid:").replace("shape: [1, 22, 2100]", "shape: [1, 2100, 23]")
    (raw / "gpux.yml").write_text(text.replace("layout: yolov8", "layout: yolox_grid")
                                  .replace("  data: photos.npz", "  samples: 2"))
    return decoded, raw


def answers(folder: Path, output: str, *photos: str) -> list[object]:
    r = gpux("run", str(folder), *(str(photo(p)) for p in photos), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    return [json.loads(line)["answers"][output] for line in r.stdout.splitlines()]


def test_a_raw_grid_answers_the_boxes_of_the_decoded_detector(detectors: tuple[Path, Path]) -> None:
    decoded, raw = detectors
    sent = ("astronaut.png", "chelsea.png")
    want, got = answers(decoded, "output0", *sent), answers(raw, "grid", *sent)
    assert any(a["label"] == "FACE_FEMALE" for a in want[0])  # type: ignore[index]
    for w, g in zip(want, got, strict=True):
        assert [a["label"] for a in g] == [a["label"] for a in w]  # type: ignore[union-attr]
        np.testing.assert_allclose([a["box"] for a in g], [a["box"] for a in w], atol=0.05)  # type: ignore
        np.testing.assert_allclose([a["score"] for a in g], [a["score"] for a in w], atol=1e-5)  # type: ignore


@pytest.mark.parametrize(("old", "new", "said"), [
    ("layout: yolox_grid", "layout: yolox", "grid cannot hold yolox boxes"),
    ("layout: yolox_grid", "layout: yolox_grid, strides: [8, 16]",
     "strides [8, 16] over the 320x320 sample input make 2000 grid cells, but grid has 2100 anchors"),
])
def test_a_misdeclared_grid_is_refused_at_its_line(detectors: tuple[Path, Path], tmp_path: Path, old: str,
                                                   new: str, said: str) -> None:
    _, raw = detectors
    (tmp_path / "model.onnx").symlink_to(raw / "model.onnx")
    text = (raw / "gpux.yml").read_text()
    (tmp_path / "gpux.yml").write_text(text.replace(old, new))
    line = next(n for n, x in enumerate(text.splitlines(), 1) if "boxes:" in x)
    r = gpux("validate", "--check-model", str(tmp_path / "gpux.yml"))
    assert r.returncode == 3 and f"gpux.yml:{line}:" in r.stderr and said in r.stderr, r.stderr


def test_a_grid_over_a_wider_than_tall_input_is_decoded_and_verified_at_its_size(detectors: tuple[Path, Path],
                                                                               tmp_path: Path) -> None:
    """nudenet's detector takes any size: fed 256 x 320, its grids make 1680 cells; the raw grid answers the decoded
    model's boxes there, and a build's verification compares its boxes (each sample's own size)."""
    decoded, raw = detectors
    wide, grid = tmp_path / "wide", tmp_path / "grid"
    for folder, source in ((wide, decoded), (grid, raw)):
        folder.mkdir()
        text = (source / "gpux.yml").read_text().replace("shape: [1, 3, 320, 320]", "shape: [1, 3, 256, 320]")
        text = text.replace("letterbox: 320", "letterbox: [256, 320]").replace("[1, 22, 2100]", "[1, 22, 1680]")
        (folder / "gpux.yml").write_text(text.replace("[1, 2100, 23]", "[1, 1680, 23]")
                                         .replace("  data: photos.npz", "  samples: 2"))
    shutil.copy(decoded / "model.onnx", wide / "model.onnx")
    grid_model(decoded / "model.onnx", grid / "model.onnx", (256, 320))
    want, got = answers(wide, "output0", "astronaut.png"), answers(grid, "grid", "astronaut.png")
    assert [a["label"] for a in got[0]] == [a["label"] for a in want[0]] and got[0]  # type: ignore[union-attr,index]
    np.testing.assert_allclose([a["box"] for a in got[0]], [a["box"] for a in want[0]], atol=0.05)  # type: ignore
    r = gpux("build", str(grid), "-p", "cpu", "--force", "--json")
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)["targets"][0]["verification"]["outputs"]["grid"]["answers"]
    assert record["kind"] == "boxes" and "skipped" not in record and record["f1"] == 1.0, record
