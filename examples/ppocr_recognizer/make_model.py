"""Generate the ``ppocr_recognizer`` example: PP-OCRv4's text line recognizer, copied from the
``rapidocr_onnxruntime`` wheel, with its character list and a real line of text to read.

``rapidocr_onnxruntime`` ships ``models/ch_PP-OCRv4_rec_infer.onnx`` (x float32 [batch, 3, 48, width] ->
softmax_11.tmp_0 float32 [batch, width / 8, 6625]: per time step, the probabilities of the CTC blank, 6623
characters and a space) and keeps the characters in the model's metadata (``character``, one per line);
``make install`` puts it in the venv, nothing is downloaded. Writes ``model.onnx``, ``charset.txt`` (those
characters; gpux.yml adds the blank first and the space last, as PaddleOCR does) and ``heading.png`` (the heading
"Region-based segmentation" cropped from scikit-image's photo of a printed page, ``skimage/data/page.png``), and
``lines.npz``: that page's lines of text, whole and in parts, pre-processed, to calibrate and verify on. Then
``gpux run . heading.png`` reads it.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HEADING = (0, 8, 300, 38)  # left, top, right, bottom in page.png: its first line, the heading
LINES = ((8, 38), (46, 66), (63, 83), (81, 101), (99, 119), (117, 137), (171, 191))  # page.png's lines of text
SPANS = ((0, 384), (0, 200), (150, 384), (80, 300))  # each whole, and three overlapping parts of it


class Missing(Exception):
    """A package this example copies its model or photo from is not installed."""


def package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{package} is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise Missing(f"{path} is missing from the installed {package}")
    return path


def characters(model: Path) -> list[str]:
    """The recognizer's characters, in class order after the blank, from the model's metadata."""
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
    return meta["character"].splitlines()


def heading(path: Path) -> Path:
    """A real line of printed text: the heading of skimage's page.png."""
    from PIL import Image

    Image.open(package_file("skimage", "data", "page.png")).crop(HEADING).save(path)
    return path


def line_tensor(img: Any) -> Any:
    """[3, 48, 960] float32 as gpux.yml's preprocess makes it: height 48, padded right with 128, BGR, scaled to
    [-1, 1]."""
    import numpy as np
    from PIL import Image

    width = min(960, round(img.width * 48 / img.height))
    canvas = np.full((48, 960, 3), 128, np.uint8)
    canvas[:, :width] = np.asarray(img.convert("RGB").resize((width, 48), Image.Resampling.BILINEAR))
    return ((canvas[:, :, ::-1].astype(np.float32) / 255 - 0.5) / 0.5).transpose(2, 0, 1)


def lines(path: Path) -> Path:
    """Real lines of printed text to calibrate and verify on: page.png's lines, each whole and in three parts
    (x: [28, 1, 3, 48, 960])."""
    import numpy as np
    from PIL import Image

    page = Image.open(package_file("skimage", "data", "page.png"))
    crops = [line_tensor(page.crop((left, top, right, bottom))) for top, bottom in LINES for left, right in SPANS]
    np.savez_compressed(path, x=np.stack(crops)[:, None])
    return path


def export(folder: Path) -> Path:
    """model.onnx and charset.txt in `folder`; returns the model's path."""
    folder.mkdir(parents=True, exist_ok=True)
    model = folder / "model.onnx"
    shutil.copyfile(package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_rec_infer.onnx"), model)
    (folder / "charset.txt").write_text("".join(f"{c}\n" for c in characters(model)), encoding="utf-8")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx, charset.txt and "
                        "heading.png into")
    out = parser.parse_args().out
    try:
        export(out)
        heading(out / "heading.png")
        lines(out / "lines.npz")
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'}, {out / 'charset.txt'}, {out / 'heading.png'} and {out / 'lines.npz'}")


if __name__ == "__main__":
    main()
