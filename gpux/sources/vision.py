"""An image checkpoint's preprocessing as gpux's `preprocess: {image: ...}` block: its preprocessor_config.json read
by transformers' own image processor, its PIL backend (so the class's defaults fill what the file leaves out: size,
resample, crop, rescale factor, mean and std), and the seeded images an export is checked on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpux.errors import GpuxError, first_line
from gpux.optional import require
from gpux.sources.ref import Say

FILTERS = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}  # PIL's resample codes
CONVNEXT_CROP_BELOW = 384  # ConvNext's processors: a shortest_edge under this is resized to it / crop_pct, then cropped


def _processor(folder: Path, say: Say) -> Any:
    transformers = require("transformers", "hf")
    try:
        return transformers.AutoImageProcessor.from_pretrained(str(folder), backend="pil")  # gpux resizes with PIL
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GpuxError(say(f"transformers cannot read the checkpoint's preprocessor_config.json: "
                            f"{first_line(exc)}")) from exc


def _size(value: Any) -> dict[str, int]:
    """transformers keeps a size as a dict (or a SizeDict): its set keys."""
    items = value.items() if hasattr(value, "items") else vars(value).items() if value is not None else ()
    return {str(k): int(v) for k, v in items if v is not None}


def _resize(p: Any, say: Say) -> tuple[dict[str, Any] | None, list[int] | None]:
    """(resize, crop) as the processor's resize and centre crop give them."""
    size, crop = _size(getattr(p, "size", None)), _size(getattr(p, "crop_size", None))
    crops = [crop["height"], crop["width"]] if getattr(p, "do_center_crop", False) and "height" in crop else None
    if not getattr(p, "do_resize", True):
        return None, crops
    code = int(getattr(p, "resample", 2) if getattr(p, "resample", None) is not None else 2)
    if code not in FILTERS:
        raise GpuxError(say(f"the checkpoint's preprocessor resamples with PIL filter {code}; gpux takes "
                            f"{', '.join(f'{k} ({v})' for k, v in FILTERS.items())}"))
    how = {"filter": FILTERS[code]}
    if "height" in size and "width" in size:
        return {"exact": [size["height"], size["width"]], **how}, crops
    if "shortest_edge" not in size:
        raise GpuxError(say(f"the checkpoint's preprocessor resizes to {size or 'nothing'}; gpux reads height and "
                            "width, or shortest_edge"))
    edge, pct = size["shortest_edge"], getattr(p, "crop_pct", None)
    if type(p).__name__.startswith("ConvNext") and pct:  # its own rule: resize to edge / crop_pct, crop to edge
        if edge < CONVNEXT_CROP_BELOW:
            return {"shorter": int(edge / pct), **how}, [edge, edge]
        return {"exact": [edge, edge], **how}, None
    return {"shorter": edge, **how}, crops


def image_steps(folder: Path, say: Say) -> dict[str, Any]:
    """The `image:` block (as plain values) the checkpoint's own processor describes; raises GpuxError with one
    line for a processor whose steps gpux does not have."""
    p = _processor(folder, say)
    resize, crop = _resize(p, say)
    steps: dict[str, Any] = {"resize": resize} if resize else {}
    if crop:
        steps["crop"] = crop
    steps["color"] = "rgb"
    steps["scale"] = float(p.rescale_factor) if getattr(p, "do_rescale", True) else 1.0
    if getattr(p, "do_normalize", True):
        steps["mean"] = [float(x) for x in np.broadcast_to(p.image_mean, (3,))]
        steps["std"] = [float(x) for x in np.broadcast_to(p.image_std, (3,))]
    return steps


def image_size(steps: dict[str, Any], say: Say) -> tuple[int, int]:
    """(height, width) of the tensor the steps give: the crop, else the exact resize."""
    size = steps.get("crop") or (steps.get("resize") or {}).get("exact")
    if not size:
        raise GpuxError(say("the checkpoint's preprocessor gives images of no fixed size (no crop, no height and "
                            "width); gpux exports image classifiers at one size"))
    return int(size[0]), int(size[1])


def sample_images(steps: dict[str, Any], count: int, say: Say, seed: int = 0) -> np.ndarray:
    """`count` seeded images [count, 3, H, W] as the steps feed them: smooth colour fields (a few random colours
    blended over the picture, with grain) rather than white noise, scaled and normalized as declared."""
    h, w = image_size(steps, say)
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / np.array([max(h - 1, 1), max(w - 1, 1)]).reshape(2, 1, 1)
    out = []
    for _ in range(count):
        corners = rng.uniform(0, 255, (4, 3))
        field = (corners[0] * ((1 - x) * (1 - y))[..., None] + corners[1] * (x * (1 - y))[..., None] +
                 corners[2] * ((1 - x) * y)[..., None] + corners[3] * (x * y)[..., None])
        pixels = np.clip(field + rng.normal(0, 12, field.shape), 0, 255).round()
        out.append(pixels.transpose(2, 0, 1))
    mean = np.asarray(steps.get("mean", [0.0]), np.float64).reshape(-1, 1, 1)
    std = np.asarray(steps.get("std", [1.0]), np.float64).reshape(-1, 1, 1)
    return ((np.stack(out) * steps["scale"] - mean) / std).astype(np.float32)
