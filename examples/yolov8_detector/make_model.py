"""Generate the ``yolov8_detector`` example: a trained YOLOv8n detector, copied from the ``nudenet`` wheel, and real
photos to verify its builds on.

``nudenet`` ships ``320n.onnx`` (images float32 [1, 3, 320, 320] in [0, 1] -> output0 float32 [1, 22, 2100]: cx, cy,
w, h and 18 class scores per anchor); ``make install`` puts it in the venv, nothing is downloaded. Writes
``model.onnx`` and ``photos.npz`` (images: a stack of [N, 1, 3, 320, 320] letterboxed as gpux.yml declares: the
photos of ``scikit-image``'s ``skimage/data``, zoomed crops of its two portraits, and mosaics of its Labeled Faces in
the Wild faces). Then ``gpux run . photo.jpg`` answers boxes in the photo's own pixels, and ``gpux build`` reports
how far each build's boxes agree with the FP32 model's.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIZE = 320
PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png", "hubble_deep_field.jpg",
          "immunohistochemistry.png", "retina.jpg", "horse.png", "page.png", "camera.png", "brick.png")
PORTRAITS = ("astronaut.png", "camera.png")
ZOOMS = ((0.75, 0.0, 0.0), (0.75, 0.5, 0.5), (0.5, 0.5, 0.0), (0.5, 0.25, 0.25), (0.5, 0.5, 0.5), (0.35, 0.5, 0.0),
         (0.35, 0.25, 0.25))  # (side, left, top): a crop of that fraction of the photo, at that fraction of the rest


class Missing(Exception):
    """A package this example copies its model or photos from is not installed."""


def package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise Missing(f"{package} is not installed (make install puts it in the venv)")
    path = Path(next(iter(spec.submodule_search_locations))).joinpath(*parts)
    if not path.exists():
        raise Missing(f"{path} is missing from the installed {package}")
    return path


def export(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(package_file("nudenet", "320n.onnx"), path)
    return path


def letterbox(img: Any, size: int = SIZE) -> Any:
    """[3, size, size] float32 in [0, 1]: fitted inside size x size, centred on grey 114, as gpux.yml declares."""
    import numpy as np
    from PIL import Image

    scale = size / max(img.size)
    img = img.convert("RGB").resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))),
                                    Image.Resampling.BILINEAR)
    canvas = Image.new("RGB", (size, size), (114, 114, 114))
    canvas.paste(img, ((size - img.width) // 2, (size - img.height) // 2))
    return np.asarray(canvas, np.float32).transpose(2, 0, 1) / 255


def mosaics(faces: Any, per_side: int = 4, size: int = SIZE) -> list[Any]:
    """Grey 25x25 faces in grids of per_side x per_side (images of many small faces)."""
    import numpy as np
    from PIL import Image

    cell, n = size // per_side, per_side * per_side
    out = []
    for start in range(0, len(faces) - n + 1, n):
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        for i, face in enumerate(faces[start:start + n]):
            tile = Image.fromarray((face * 255).astype(np.uint8)).convert("RGB")
            canvas.paste(tile.resize((cell, cell), Image.Resampling.BICUBIC), ((i % per_side) * cell,
                                                                              (i // per_side) * cell))
        out.append(letterbox(canvas, size))
    return out


def photos(size: int = SIZE) -> Any:
    """[N, 3, size, size] float32: skimage's photos, crops of its portraits and mosaics of its faces, letterboxed."""
    import numpy as np
    from PIL import Image

    folder = package_file("skimage", "data")
    out = [letterbox(Image.open(folder / n), size) for n in PHOTOS if (folder / n).is_file()]
    for name in PORTRAITS:
        img = Image.open(folder / name)
        for side, left, top in ZOOMS:
            w, h = round(img.width * side), round(img.height * side)
            x, y = round(left * (img.width - w)), round(top * (img.height - h))
            out.append(letterbox(img.crop((x, y, x + w, y + h)), size))
    faces = np.load(folder / "lfw_subset.npy")[:96]  # the subset's first 100 images are faces
    return np.stack(out + mosaics(faces, size=size)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write model.onnx and photos.npz into")
    out = parser.parse_args().out
    try:
        export(out / "model.onnx")
        import numpy as np

        np.savez(out / "photos.npz", images=photos()[:, None])
    except Missing as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {out / 'model.onnx'} and {out / 'photos.npz'}")


if __name__ == "__main__":
    main()
