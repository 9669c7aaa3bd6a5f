"""Generate the ``ppocr_python`` example: PP-OCRv4's recognizer and its characters, copied from the
``rapidocr_onnxruntime`` wheel as the ``ppocr_recognizer`` example does, two lines of skimage's printed page
(``heading.png``, ``body.png``) and, in ``lines/``, those lines as ``ocr_steps.line`` makes them (what every build is
verified on). Then ``gpux run . heading.png body.png`` reads them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BODY = (0, 58, 384, 82)  # left, top, right, bottom in page.png: a line of body text


def _module(path: Path, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recognizer = _module(HERE.parent / "ppocr_recognizer" / "make_model.py", "ppocr_recognizer_make")
Missing = recognizer.Missing  # type: ignore[attr-defined]
package_file = recognizer.package_file  # type: ignore[attr-defined]


def export(path: Path) -> Path:
    """model.onnx and charset.txt beside `path`, the two lines and their tensors; returns the model's path."""
    from PIL import Image

    folder = path.parent
    recognizer.export(folder)  # type: ignore[attr-defined]
    recognizer.heading(folder / "heading.png")  # type: ignore[attr-defined]
    Image.open(package_file("skimage", "data", "page.png")).crop(BODY).save(folder / "body.png")
    steps = _module(HERE / "ocr_steps.py", "ocr_steps_make")
    (folder / "lines").mkdir(exist_ok=True)
    for name in ("heading", "body"):
        np.save(folder / "lines" / f"{name}.npy", steps.line((folder / f"{name}.png").read_bytes()))  # type: ignore
    return path


def main() -> None:
    try:
        export(HERE / "model.onnx")
    except Missing as exc:
        sys.exit(f"error: {exc}")
    print(f"wrote {HERE / 'model.onnx'}, charset.txt, heading.png, body.png and lines/")


if __name__ == "__main__":
    main()
