"""Generate the ``yolov8_detector`` example: a trained YOLOv8n detector, copied from the ``nudenet`` wheel.

``nudenet`` ships ``320n.onnx`` (images float32 [1, 3, 320, 320] in [0, 1] -> output0 float32 [1, 22, 2100]: cx, cy,
w, h and 18 class scores per anchor); ``make install`` puts it in the venv, nothing is downloaded. Writes
``model.onnx``. Then ``gpux run . photo.jpg`` answers boxes in the photo's own pixels.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Missing(Exception):
    """The package this example copies its model from is not installed."""


def source() -> Path:
    spec = importlib.util.find_spec("nudenet")
    if spec is None or not spec.submodule_search_locations:
        raise Missing("nudenet is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))) / "320n.onnx"
    if not path.is_file():
        raise Missing(f"{path} is missing from the installed nudenet")
    return path


def export(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source(), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx into")
    out = parser.parse_args().out
    try:
        export(out / "model.onnx")
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'}")


if __name__ == "__main__":
    main()
