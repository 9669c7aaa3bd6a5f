"""The recognizer's own pipeline as Python steps (gpux.yml names them `ocr_steps:line` and `ocr_steps:text`):
PaddleOCR's resize rule for a text line and its greedy CTC decoding, as rapidocr_onnxruntime does them (cv2's
resize done with Pillow)."""

from __future__ import annotations

import io
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

HEIGHT, LEAST = 48, 320  # every line 48 high; narrower than 320 padded to 320


def line(data: Any) -> np.ndarray:
    """A file's bytes (or a PIL image) → x [1, 3, 48, width]: BGR, (v / 255 - 0.5) / 0.5, the width following the
    aspect ratio, padded with zeros after normalizing up to 320."""
    from PIL import Image

    image = data if isinstance(data, Image.Image) else Image.open(io.BytesIO(data))
    w, h = image.size
    width = int(HEIGHT * max(LEAST / HEIGHT, w / h))
    resized = min(width, math.ceil(HEIGHT * w / h))
    rgb = image.convert("RGB").resize((resized, HEIGHT), Image.Resampling.BILINEAR)
    bgr = np.asarray(rgb, np.float32)[:, :, ::-1]
    x = np.zeros((1, 3, HEIGHT, width), np.float32)
    x[0, :, :, :resized] = (bgr.transpose(2, 0, 1) / 255 - 0.5) / 0.5
    return x


@cache
def characters() -> list[str]:
    """The blank, the model's characters (charset.txt beside this file), the space."""
    text = (Path(__file__).parent / "charset.txt").read_text(encoding="utf-8")
    return ["", *text.removesuffix("\n").split("\n"), " "]


def text(row: np.ndarray) -> dict[str, Any]:
    """One row [time, classes] of probabilities → {text, score}: the best class per step, repeats collapsed,
    blanks dropped; the score is the mean of the kept steps' probabilities (PaddleOCR's CTCLabelDecode)."""
    best, p = row.argmax(axis=1), row.max(axis=1)
    kept = np.ones(best.shape, bool)
    kept[1:] = best[1:] != best[:-1]
    kept &= best != 0
    chars = characters()
    return {"text": "".join(chars[i] for i in best[kept]), "score": float(p[kept].mean()) if kept.any() else 0.0}
