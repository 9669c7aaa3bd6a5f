"""Generate the ``ppocr_detector`` example: PP-OCRv4's DB text detector, copied from the ``rapidocr_onnxruntime``
wheel, and real pages to verify on.

``rapidocr_onnxruntime`` ships ``models/ch_PP-OCRv4_det_infer.onnx`` (x float32 [batch, 3, height, width], sides
multiples of 32 -> sigmoid_0.tmp_0 float32 [batch, 1, height, width]: per pixel, the probability that it is text);
``make install`` puts it in the venv, nothing is downloaded. Writes ``model.onnx``, ``page.png`` and ``text.png``
(scikit-image's photos of a printed page and of signs, ``skimage/data``) and ``pages.npz``: both, pre-processed as
gpux.yml says, to verify on. Then ``gpux run . page.png`` answers the page's regions of text.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGES = ("page.png", "text.png")


class Missing(Exception):
    """A package this example copies its model or photos from is not installed."""


def package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{package} is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.is_file():
        raise Missing(f"{path} is missing from the installed {package}")
    return path


def export(folder: Path) -> Path:
    """The detector as model.onnx, and the two pages, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(package_file("rapidocr_onnxruntime", "models", "ch_PP-OCRv4_det_infer.onnx"), folder / "model.onnx")
    for name in PAGES:
        shutil.copy(package_file("skimage", "data", name), folder / name)
    return folder / "model.onnx"


def pages(folder: Path) -> Path:
    """pages.npz: each page as gpux.yml's preprocess gives it (one sample each: their sizes differ)."""
    import numpy as np
    import yaml

    from gpux.answers.pre import image_tensor
    from gpux.config.steps import ImageSteps

    config = yaml.safe_load((HERE / "gpux.yml").read_text())
    steps = ImageSteps.model_validate(config["inputs"]["x"]["preprocess"]["image"])
    tensors = [image_tensor(folder / name, steps, "float32", name)[0] for name in PAGES]
    side = max(t.shape[2] for t in tensors), max(t.shape[3] for t in tensors)
    batch = np.ones((len(tensors), 1, 3, *side), np.float32)  # one sample per page, padded with white to one size
    for i, t in enumerate(tensors):
        batch[i, :, :, :t.shape[2], :t.shape[3]] = t
    np.savez(folder / "pages.npz", x=batch)
    return folder / "pages.npz"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    export(HERE)
    pages(HERE)
    print(f"wrote {HERE / 'model.onnx'}, {', '.join(PAGES)} and pages.npz")


if __name__ == "__main__":
    main()
