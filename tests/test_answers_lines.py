"""Declared image steps for real OCR pipelines: a fixed height with the width following the aspect ratio within a
range (PaddleOCR's recognizer rule, compared with rapidocr's own resize and decoder on PP-OCRv4's trained model from
the rapidocr_onnxruntime wheel), the order of resizing and colour conversion, and a transparent image pasted on a
background colour."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpux.answers.pre import image_tensor
from gpux.config.steps import ImageSteps

from .conftest import gpux
from .test_answers_outputs import paddle_reading, photo
from .trained import ppocr_recognizer_files

OUT = "softmax_11.tmp_0"
LINES = """name: lines
model: {{source: model.onnx}}
inputs:
  x:
    dtype: float32
    shape: [1, 3, 48, width]
    preprocess:
      image: {{resize: {{height: 48, {resize}}}, color: bgr, scale: 1/255, mean: [0.5, 0.5, 0.5],
              std: [0.5, 0.5, 0.5]{extra}}}
outputs:
  {out}:
    dtype: float32
    postprocess:
      ctc: {{charset: charset.txt, blank: 0, space: true}}
"""


@pytest.fixture(scope="module")
def recognizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    folder = ppocr_recognizer_files(tmp_path_factory.mktemp("ppocr"))
    Image.open(photo("page.png")).crop((0, 58, 384, 82)).save(folder / "body.png")
    Image.open(photo("page.png")).crop((0, 58, 60, 82)).save(folder / "short.png")
    return folder


def lines(recognizer: Path, folder: Path, resize: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.onnx", "charset.txt"):
        shutil.copy(recognizer / name, folder)
    (folder / "gpux.yml").write_text(LINES.format(resize=resize, extra=extra, out=OUT))
    return folder


def read(folder: Path, *files: Path) -> tuple[int, list[dict[str, object]], str]:
    """Exit code, each file's answer (--json) and stderr."""
    r = gpux("run", str(folder), *map(str, files), "-p", "cpu", "--json")
    return r.returncode, [json.loads(x)["answers"][OUT] for x in r.stdout.splitlines()] if not r.returncode else \
        [], r.stderr


def text_of(folder: Path, file: Path) -> tuple[int, str]:
    """Exit code and everything printed, as text."""
    r = gpux("run", str(folder), str(file), "-p", "cpu")
    return r.returncode, r.stdout + r.stderr


def test_a_fixed_height_with_the_width_following_reads_what_paddleocr_reads(recognizer: Path,
                                                                            tmp_path: Path) -> None:
    from PIL import Image

    folder = lines(recognizer, tmp_path / "pad", "range: [320, 2000], outside: pad, fill: 128")
    files = [recognizer / n for n in ("heading.png", "body.png", "short.png")]
    code, got, err = read(folder, *files)
    assert code == 0, err
    for answer, file in zip(got, files, strict=True):
        _, (text, score) = paddle_reading(recognizer / "model.onnx", Image.open(file))
        assert answer["text"] == text and abs(answer["score"] - score) < 0.01, (file.name, answer, text)
    assert got[1]["text"] == "background.These markers are pixels that we can label"


def test_out_of_range_widths_are_refused_fitted_or_padded_as_declared(recognizer: Path, tmp_path: Path) -> None:
    body = recognizer / "body.png"  # 384 x 24: 768 wide at height 48
    folder = lines(recognizer, tmp_path / "refuse", "range: [320, 600]")
    code, err = text_of(folder, body)
    assert code == 2 and f"{body}: a 384x24 image resized to height 48 is 768 in width, outside the range 320..600" \
        in err, err
    folder = lines(recognizer, tmp_path / "fit", "range: [320, 600], outside: fit")
    code, out = text_of(folder, body)
    assert code == 0 and '"background' in out, out  # squeezed into 600, still read
    r = gpux("validate", str(lines(recognizer, tmp_path / "bad", "range: [600, 320]") / "gpux.yml"))
    assert r.returncode == 3 and "resize.range: range [600, 320]: the least is above the most" in r.stderr, r.stderr
    config = lines(recognizer, tmp_path / "shorter", "range: [1, 2]") / "gpux.yml"
    config.write_text(config.read_text().replace("height: 48, range", "shorter: 48, range"))
    r = gpux("validate", str(config))
    assert r.returncode == 3 and "range bounds the side that follows height: or width:" in r.stderr, r.stderr


def test_a_transparent_line_is_read_on_its_declared_background(recognizer: Path, tmp_path: Path) -> None:
    from PIL import Image

    gray = np.asarray(Image.open(recognizer / "heading.png").convert("L"))
    ink = np.zeros((*gray.shape, 4), np.uint8)  # black everywhere, the ink opaque, the paper transparent
    ink[..., 3] = 255 - gray
    Image.fromarray(ink, "RGBA").save(tmp_path / "ink.png")
    plain = lines(recognizer, tmp_path / "plain", "range: [320, 2000], outside: pad, fill: 128")
    code, got, err = read(plain, tmp_path / "ink.png")
    assert code == 0 and got[0]["text"] != "Region-based segmentation", (got, err)  # the alpha dropped: all black
    white = lines(recognizer, tmp_path / "white", "range: [320, 2000], outside: pad, fill: 128",
                  ", background: [255, 255, 255]")
    code, got, err = read(white, tmp_path / "ink.png")
    assert code == 0 and got[0]["text"] == "Region-based segmentation", (got, err)


def test_resize_first_resizes_the_colour_image_then_converts_it() -> None:
    from PIL import Image

    rgb = Image.open(photo("astronaut.png")).convert("RGB")
    steps = {"resize": {"exact": [37, 53]}, "color": "gray", "scale": 1.0}
    first, _ = image_tensor(rgb, ImageSteps(**steps), "float32", "astronaut")
    after, _ = image_tensor(rgb, ImageSteps(**steps, resize_first=True), "float32", "astronaut")
    want = np.asarray(rgb.resize((53, 37), Image.Resampling.BILINEAR).convert("L"), np.float32)
    np.testing.assert_array_equal(after[0, 0], want)
    np.testing.assert_array_equal(first[0, 0], np.asarray(rgb.convert("L").resize((53, 37),
                                                                                   Image.Resampling.BILINEAR)))
    assert (first != after).any()  # the order changes pixels
