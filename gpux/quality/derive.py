"""More judged rows from the samples verification already judges (`verify.derive`): seeded crops of each image
sample, resized back to its size (a crop is also a change of scale), and mirrored at random. Only samples
verification judges are derived from, never calibration samples, and the same seed gives the same rows."""

from __future__ import annotations

from typing import Any

from gpux.arrays import Feeds
from gpux.errors import DataError
from gpux.model.tensor import Tensor

AREA = (0.4, 1.0)  # a crop keeps this fraction of the image's area
ASPECT = (3 / 4, 4 / 3)  # and this range of width over height, relative to the image's


def image_axes(project: Any, inputs: dict[str, Tensor]) -> dict[str, str]:
    """The inputs that are images and their layout (nchw, nhwc): the declared preprocess image's, else a float
    input of rank 3 or more with 1, 3 or 4 channels first (nchw) or last (nhwc) of its last three dims."""
    declared = project.config.inputs or {}
    out = {}
    for name, t in inputs.items():
        image = getattr(getattr(declared.get(name), "preprocess", None), "image", None)
        if image is not None:
            out[name] = image.layout
            continue
        shape: tuple[Any, ...] = tuple(t.shape or ())
        if not t.dtype.startswith(("float", "bfloat")) or len(shape) < 3:
            continue
        if shape[-3] in (1, 3, 4):
            out[name] = "nchw"
        elif shape[-1] in (1, 3, 4):
            out[name] = "nhwc"
    return out


def derived(project: Any, inputs: dict[str, Tensor], samples: list[Feeds]) -> list[Feeds]:
    """Seeded variants of the samples in turn until there are `verify.derive.rows` samples in all: every image
    input cropped (the same box on all of a sample's images) and resized back, mirrored half the time; other
    inputs as they are (`mirror: false`: never mirrored, as text)."""
    import numpy as np

    spec = project.config.verify.derive
    if spec is None or not samples:
        return []
    images = image_axes(project, inputs)
    if not images:
        raise DataError(f"{project.path}: verify.derive: no input is an image to crop (inputs: {', '.join(inputs)}); "
                        "remove verify.derive or declare inputs.NAME.preprocess.image")
    rng = np.random.default_rng(spec.seed)
    out = []
    for k in range(max(0, spec.rows - len(samples))):
        box, flip = _box(rng), bool(rng.integers(2)) and spec.mirror
        sample = samples[k % len(samples)]
        out.append({n: _variant(v, images[n], box, flip) if n in images else v for n, v in sample.items()})
    return out


def _box(rng: Any) -> tuple[float, float, float, float]:
    """(top, left, height, width) as fractions of the image: a seeded crop of AREA and ASPECT."""
    import math

    area = rng.uniform(*AREA)
    aspect = math.exp(rng.uniform(math.log(ASPECT[0]), math.log(ASPECT[1])))
    h, w = min(1.0, math.sqrt(area / aspect)), min(1.0, math.sqrt(area * aspect))
    return rng.uniform(0, 1 - h), rng.uniform(0, 1 - w), h, w


def _variant(a: Any, layout: str, box: tuple[float, float, float, float], flip: bool) -> Any:
    """The crop `box` of an image tensor resized (bilinear) back to its own height and width, mirrored if `flip`."""
    import numpy as np

    x = np.moveaxis(np.asarray(a), -1, -3) if layout == "nhwc" else np.asarray(a)
    x = resized_crop(x, box)
    x = x[..., ::-1] if flip else x
    x = np.moveaxis(x, -3, -1) if layout == "nhwc" else x
    return np.ascontiguousarray(x, dtype=np.asarray(a).dtype)


def resized_crop(x: Any, box: tuple[float, float, float, float]) -> Any:
    """[..., H, W] → the region `box` (fractions: top, left, height, width) sampled back at H x W, bilinear
    (pixel centres, as Pillow and torchvision's antialias-free resize sample)."""
    import numpy as np

    height, width = x.shape[-2:]
    top, left, h, w = box[0] * height, box[1] * width, box[2] * height, box[3] * width

    def grid(start: float, span: float, n: int) -> tuple[Any, Any, Any]:
        at = np.clip(start + (np.arange(n) + 0.5) * span / n - 0.5, 0, n - 1)
        lo = np.floor(at).astype(int)
        return lo, np.minimum(lo + 1, n - 1), (at - lo).astype(np.float64)

    y0, y1, wy = grid(top, h, height)
    x0, x1, wx = grid(left, w, width)
    f = x.astype(np.float64)
    rows = f[..., y0, :] * (1 - wy)[:, None] + f[..., y1, :] * wy[:, None]
    return rows[..., x0] * (1 - wx) + rows[..., x1] * wx
