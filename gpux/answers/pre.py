"""Image pre-processing: a file, bytes, a PIL image or an image array becomes one input tensor, written once
into a preallocated array, together with where the original image's pixels landed in it (`Placement`), so
that boxes can be mapped back.

Decoding is Pillow's (JPEG, PNG, WebP, BMP, GIF, TIFF): EXIF orientation applied, JPEGs decoded at a reduced
size (draft mode) when they are shrunk anyway."""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from gpux.config.steps import ImageSteps
from gpux.errors import InputError
from gpux.optional import require

if TYPE_CHECKING:
    from PIL import Image

    from gpux.arrays import Array

# What an image comes as: a path, its encoded bytes, a PIL image, or an HxW / HxWxC uint8 array
ImageSource: TypeAlias = "str | os.PathLike[str] | bytes | bytearray | memoryview | Image.Image | Array"

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
ORIENTATION = 0x0112  # the EXIF tag; 5..8 swap width and height
MODES = {"rgb": "RGB", "bgr": "RGB", "gray": "L"}


@dataclass(frozen=True, kw_only=True)
class Placement:
    """Where the upright original image sits in the tensor: tensor pixel = original pixel * scale + offset, per
    axis (letterbox padding adds, a crop subtracts); `width` x `height` is the original."""

    scale_x: float
    scale_y: float
    offset_x: float
    offset_y: float
    width: int
    height: int
    canvas: tuple[int, int] | None = None  # the tensor's height and width

    def to_original(self, boxes: Array) -> Array:
        """[N, 4] boxes x1, y1, x2, y2 in tensor pixels → the original image's pixels, clipped to it."""
        import numpy as np

        out = np.empty(boxes.shape, np.float64)
        out[:, 0::2] = ((boxes[:, 0::2] - self.offset_x) / self.scale_x).clip(0, self.width)
        out[:, 1::2] = ((boxes[:, 1::2] - self.offset_y) / self.scale_y).clip(0, self.height)
        return out


@dataclass(frozen=True)
class Geometry:
    """The resize (to `resized`, width x height) and where it goes on a `canvas` of height x width: at `at`
    (x, y; negative: cropped away)."""

    resized: tuple[int, int]
    canvas: tuple[int, int]
    at: tuple[int, int]


def geometry(steps: ImageSteps, width: int, height: int, name: str = "image") -> Geometry:
    """The sizes and offsets the steps give an upright width x height image (torchvision's rules for the shorter
    side and the centre crop; letterbox as YOLO detectors are fed; a keep-aspect side as OCR lines are fed)."""
    r, size, at = steps.resize, (width, height), (0, 0)
    if r is not None and (r.height or r.width):
        return _follow(r, width, height, name)
    if r is not None and r.shorter is not None:
        short, long = sorted((width, height))
        other = int(r.shorter * long / short)
        size = (r.shorter, other) if width <= height else (other, r.shorter)
    elif r is not None and r.exact is not None:
        size = (r.exact[1], r.exact[0])
    elif r is not None and r.side_limit is not None:
        size = limited(r, width, height)
    elif r is not None and r.letterbox is not None:
        h, w = r.letterbox
        k = min(w / width, h / height)
        size = (max(1, round(width * k)), max(1, round(height * k)))
        at = ((w - size[0]) // 2, (h - size[1]) // 2) if r.anchor == "center" else (0, 0)
        return Geometry(size, (h, w), at)
    if steps.crop is not None:
        ch, cw = steps.crop
        at = (-round((size[0] - cw) / 2.0), -round((size[1] - ch) / 2.0))
        return Geometry(size, (ch, cw), at)
    return Geometry(size, (size[1], size[0]), at)


def limited(r: Any, width: int, height: int) -> tuple[int, int]:
    """(width, height) by a text detector's rule: the longer side down to side_limit (max) or the shorter up to it
    (min), each side then rounded to a multiple (at least one multiple), as PaddleOCR's DetResizeForTest does."""
    side = max(width, height) if r.limit_type == "max" else min(width, height)
    over = side > r.side_limit if r.limit_type == "max" else side < r.side_limit
    ratio = r.side_limit / side if over else 1.0
    return tuple(max(r.multiple, round(int(s * ratio) / r.multiple) * r.multiple)
                 for s in (width, height))


def _follow(r: Any, width: int, height: int, name: str) -> Geometry:
    """One side fixed (height: or width:), the other following the aspect ratio (rounded up, at least 1), kept
    within range: as `outside` says."""
    import math

    fixed, along = (r.height, (width, height)) if r.height else (r.width, (height, width))
    follows = max(1, math.ceil(fixed * along[0] / along[1]))
    resized = canvas = follows
    if r.range is not None:
        least, most = r.range
        if not least <= follows <= most and r.outside == "refuse":
            side = "width" if r.height else "height"
            raise InputError(f"{name}: a {width}x{height} image resized to {'height' if r.height else 'width'} "
                             f"{fixed} is {follows} in {side}, outside the range {least}..{most}",
                             hint="declare resize.outside: pad or fit to take it")
        resized = min(max(follows, least), most) if r.outside == "fit" else min(follows, most)
        canvas = max(resized, least)
    if r.height:
        return Geometry((resized, fixed), (fixed, canvas), (0, 0))
    return Geometry((fixed, resized), (canvas, fixed), (0, 0))


def open_image(source: ImageSource, name: str) -> Image.Image:
    """A PIL image from a path, bytes, a PIL image or an HxW / HxWxC uint8 array; one-line errors name `name`."""
    image_mod = require("PIL.Image", "images")
    from PIL import Image  # imported by require (or refused there): the module as its types name it

    if isinstance(source, Image.Image):
        return source
    if hasattr(source, "__array_interface__"):
        return _from_array(image_mod, source, name)
    fp = io.BytesIO(bytes(source)) if isinstance(source, bytes | bytearray | memoryview) else os.fspath(source)
    try:
        return image_mod.open(fp)
    except FileNotFoundError as exc:
        raise InputError(f"{name}: file not found") from exc
    except IsADirectoryError as exc:
        raise InputError(f"{name}: a folder, not an image file") from exc
    except image_mod.UnidentifiedImageError as exc:
        raise InputError(f"{name}: not an image Pillow can read (JPEG, PNG, WebP, BMP, GIF, TIFF)") from exc
    except (OSError, ValueError, image_mod.DecompressionBombError) as exc:
        raise InputError(f"{name}: cannot read the image: {exc}") from exc


def _from_array(image_mod: Any, array: Any, name: str) -> Any:
    import numpy as np

    a = np.asarray(array)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3, 4)):
        raise InputError(f"{name}: an image array is uint8 HxW or HxWxC (C = 1, 3 or 4), got {a.dtype} "
                         f"{list(a.shape)}", hint="pass a ready tensor with the batch axis, e.g. [1, 3, H, W]")
    return image_mod.fromarray(a[:, :, 0] if a.ndim == 3 and a.shape[2] == 1 else a)


def upright(image: Image.Image, steps: ImageSteps, name: str) -> tuple[Image.Image, int, int]:
    """The decoded, upright image in the steps' color mode, and its full upright width and height. A JPEG is
    decoded at a reduced scale (draft) when the steps shrink it at least twofold anyway."""
    ops = require("PIL.ImageOps", "images")
    try:
        turn = image.getexif().get(ORIENTATION, 1) if hasattr(image, "getexif") else 1
        width, height = image.size[::-1] if turn in (5, 6, 7, 8) else image.size
        if getattr(image, "format", None) == "JPEG":
            w, h = geometry(steps, width, height, name).resized
            image.draft(MODES[steps.color], (h, w) if turn in (5, 6, 7, 8) else (w, h))
        image = ops.exif_transpose(image) if turn != 1 else image
        image = _flattened(image, steps.background) if steps.background else image
        mode = MODES[steps.color] if not steps.resize_first else image.mode if image.mode in ("RGB", "L") else "RGB"
        image = image.convert(mode) if image.mode != mode else image
        image.load()
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"{name}: cannot decode the image: {exc}") from exc
    return image, width, height


def _flattened(image: Any, background: tuple[int, int, int]) -> Any:
    """An image with transparency pasted on the background color (RGB); one without, as it is."""
    if image.mode not in ("RGBA", "LA", "PA") and not (image.mode == "P" and "transparency" in image.info):
        return image
    image_mod = require("PIL.Image", "images")
    rgba = image.convert("RGBA")
    return image_mod.alpha_composite(image_mod.new("RGBA", rgba.size, (*background, 255)), rgba).convert("RGB")


def image_tensor(source: ImageSource, steps: ImageSteps, dtype: str, name: str) -> tuple[Array, Placement]:
    """[1, C, H, W] (or [1, H, W, C]) of `dtype` from one image, and its Placement. The resized pixels are
    written once, scaled and normalized on the way, into the preallocated tensor."""
    import numpy as np

    image_mod = require("PIL.Image", "images")
    image, width, height = upright(open_image(source, name), steps, name)
    g = geometry(steps, width, height, name)
    if image.size != g.resized:
        resample = getattr(image_mod.Resampling, (steps.resize.filter if steps.resize else "bilinear").upper())
        image = image.resize(g.resized, resample)
    image = image.convert(MODES[steps.color]) if image.mode != MODES[steps.color] else image  # resize_first
    a = np.asarray(image)
    a = a[:, :, None] if a.ndim == 2 else a[:, :, ::-1] if steps.color == "bgr" else a
    nchw, (h, w), c = steps.layout == "nchw", g.canvas, steps.channels
    k, b = _affine(steps, _dtype(dtype, name), nchw)
    out = np.empty((1, c, h, w) if nchw else (1, h, w, c), dtype)
    (x, y), (sx, sy) = (max(0, g.at[0]), max(0, g.at[1])), (max(0, -g.at[0]), max(0, -g.at[1]))
    cw, ch = min(w - x, a.shape[1] - sx), min(h - y, a.shape[0] - sy)
    if (cw, ch) != (w, h):  # letterbox padding, or a crop larger than the image (zeros, as torchvision pads)
        fill = steps.resize.fill if steps.resize and (steps.resize.letterbox or steps.resize.range) else 0
        out[0] = (np.float32(fill) * k + b).astype(dtype)
    src = a[sy:sy + ch, sx:sx + cw]
    view = out[0, :, y:y + ch, x:x + cw] if nchw else out[0, y:y + ch, x:x + cw]
    np.multiply(src.transpose(2, 0, 1) if nchw else src, k, out=view, casting="unsafe")
    if b.any():
        np.add(view, b, out=view, casting="unsafe")
    return out, Placement(scale_x=g.resized[0] / width, scale_y=g.resized[1] / height, offset_x=g.at[0],
                          offset_y=g.at[1], width=width, height=height, canvas=g.canvas)


def _dtype(dtype: str, name: str) -> Any:
    import numpy as np

    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise InputError(f"{name}: image inputs of {dtype} are not written by preprocess; declare a float32, "
                         "float16 or integer input") from exc


def _affine(steps: ImageSteps, dtype: Any, nchw: bool) -> tuple[Any, Any]:
    """Per channel k and b with tensor value = pixel * k + b: scale, then mean and std folded in."""
    import numpy as np

    scale = steps.scale if steps.scale is not None else (1 / 255 if dtype.kind == "f" else 1.0)
    c = steps.channels
    mean = np.broadcast_to(np.asarray(steps.mean or [0.0], np.float64), (c,))
    std = np.broadcast_to(np.asarray(steps.std or [1.0], np.float64), (c,))
    k, b = (scale / std).astype(np.float32), (-mean / std).astype(np.float32)
    return (k.reshape(c, 1, 1), b.reshape(c, 1, 1)) if nchw else (k, b)
