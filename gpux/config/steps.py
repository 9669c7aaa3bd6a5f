"""The pydantic models of an input's `preprocess:` and an output's `postprocess:` blocks (docs/answers.md).

Only what can be checked from gpux.yml alone is checked here; the model's real shapes are checked when a
session is opened (gpux.answers)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from gpux.config.problems import show_value

FRACTION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*/\s*(\d+(?:\.\d*)?)\s*$")


def _fail(message: str, *at: str | int) -> PydanticCustomError:
    return PydanticCustomError("gpux", "{message}", {"message": message, "at": tuple(str(a) for a in at)})


def _size(value: Any) -> tuple[int, int]:
    """An int (a square) or [height, width], each >= 1."""
    pair = value if isinstance(value, list | tuple) else [value, value]
    ok = len(pair) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair)
    if not ok:
        raise _fail(f"expected a size (an int >= 1) or [height, width], got {show_value(value)}")
    return int(pair[0]), int(pair[1])


def _number(value: Any) -> float:
    """A number, or a fraction written as text: 1/255."""
    if isinstance(value, str) and FRACTION.match(value):
        top, bottom = FRACTION.match(value).groups()  # type: ignore[union-attr]
        if float(bottom) == 0:
            raise _fail(f"division by zero in {value!r}")
        return float(top) / float(bottom)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"expected a number or a fraction such as 1/255, got {show_value(value)}")
    return float(value)


Size = Annotated[
    tuple[int, int], BeforeValidator(_size),
    WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1},
                              {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2,
                               "maxItems": 2}]}),
]
Number = Annotated[float, BeforeValidator(_number),
                   WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string", "pattern": FRACTION.pattern}]})]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resize(Strict):
    """Exactly one of shorter, exact, letterbox."""

    shorter: int | None = Field(None, ge=1, description="Resize so the shorter side is this long, keeping the "
                                "aspect ratio (then usually crop:).")
    exact: Size | None = Field(None, description="Resize to this size ([height, width] or one int), "
                               "stretching the image.")
    letterbox: Size | None = Field(None, description="Fit inside this size keeping the aspect ratio, padding the "
                                   "rest with fill; boxes are mapped back through the recorded padding and scale.")
    fill: int = Field(114, ge=0, le=255, description="Pixel value of the letterbox padding.")
    anchor: Literal["center", "top_left"] = Field(
        "center", description="Where the letterboxed image sits: centred, or at the top left (padding right and "
        "below).")
    filter: Literal["nearest", "bilinear", "bicubic", "lanczos", "box", "hamming"] = Field(
        "bilinear", description="Pillow's resampling filter (antialiased when shrinking).")

    @model_validator(mode="after")
    def _one_mode(self) -> Resize:
        given = [k for k in ("shorter", "exact", "letterbox") if getattr(self, k) is not None]
        if len(given) != 1:
            raise _fail("expected exactly one of shorter, exact, letterbox" +
                        (f"; got {', '.join(given)}" if given else ""))
        return self


class ImageSteps(Strict):
    resize: Resize | None = Field(None, description="How the decoded image is resized (none: kept as is).")
    crop: Size | None = Field(None, description="Centre crop to this size after resizing ([height, width] or one "
                              "int).")
    color: Literal["rgb", "bgr", "gray"] = Field("rgb", description="Channel order the model takes (gray: one "
                                                 "channel).")
    scale: Number | None = Field(None, description="Pixels (0..255) are multiplied by this first, e.g. 1/255; "
                                 "default 1/255 for float inputs, 1 for integer ones.")
    mean: list[float] | None = Field(None, description="Subtracted per channel after scale, e.g. ImageNet's "
                                     "[0.485, 0.456, 0.406].")
    std: list[float] | None = Field(None, description="Divided per channel after mean, e.g. [0.229, 0.224, 0.225].")
    layout: Literal["nchw", "nhwc"] = Field("nchw", description="Axis order of the input tensor.")

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def size(self) -> tuple[int, int] | None:
        """(height, width) of the tensor, where the steps fix it."""
        r = self.resize
        return self.crop or (r.exact or r.letterbox if r else None)

    @model_validator(mode="after")
    def _per_channel(self) -> ImageSteps:
        for key in ("mean", "std"):
            values = getattr(self, key)
            if values is not None and len(values) not in (1, self.channels):
                raise _fail(f"{len(values)} values for {self.channels} channel(s) ({self.color})", key)
        if self.std is not None and 0 in self.std:
            raise _fail("std divides: no zeros", "std")
        return self


class Boxes(Strict):
    layout: Literal["yolov8"] = Field("yolov8", description="yolov8: [batch, 4 + classes, anchors], boxes as cx, "
                                      "cy, w, h in input pixels, then one score per class.")
    score: float = Field(0.25, ge=0, le=1, description="Least class score a box is kept at.")
    iou: float = Field(0.45, ge=0, le=1, description="Boxes of one class overlapping more than this (IoU) are "
                       "suppressed, the best kept.")
    max: int = Field(300, ge=1, description="Most boxes answered per image, best first.")
    image: str | None = Field(None, description="The image input whose resize/letterbox the boxes are mapped back "
                              "through (default: the only image input).")


class Postprocess(Strict):
    softmax: bool = Field(False, description="Softmax over the class axis (for logits).")
    sigmoid: bool = Field(False, description="Sigmoid of every score (multi-label logits).")
    topk: int | None = Field(None, ge=1, description="Answer the K best classes as {label, index, score}, labels "
                             "from this output's labels:.")
    boxes: Boxes | None = Field(None, description="Decode detector boxes: threshold, class-aware NMS, boxes in the "
                                "original image's pixels as {label, index, score, box: [x1, y1, x2, y2]}.")

    @model_validator(mode="after")
    def _one_answer(self) -> Postprocess:
        if self.softmax and self.sigmoid:
            raise _fail("softmax and sigmoid both set; pick one", "sigmoid")
        if self.topk is not None and self.boxes is not None:
            raise _fail("topk and boxes both set; an output answers classes or boxes", "boxes")
        return self


def classes_axis(post: Postprocess | None) -> int:
    """The axis of the class scores: 1 (after 4 box coordinates) for boxes, else the last."""
    return 1 if post is not None and post.boxes is not None else -1


def check_labels(labels: list[str], shape: tuple[int | str, ...] | None, post: Postprocess | None) -> str | None:
    """Why an inline labels list does not fit the declared shape (None when it does or cannot be told)."""
    axis = classes_axis(post)
    if not shape or len(shape) < (3 if axis == 1 else 1) or not isinstance(shape[axis], int):
        return None
    classes = int(shape[axis]) - (4 if axis == 1 else 0)
    if len(labels) == classes:
        return None
    return f"{len(labels)} labels for {classes} classes (shape {list(shape)})"


def check_image_shape(image: ImageSteps, shape: tuple[int | str, ...]) -> tuple[str, tuple[str, ...]] | None:
    """Why the image steps do not fit the input's declared shape, and where under preprocess (None: they fit)."""
    if len(shape) != 4:
        return f"an image input is [batch, C, H, W] or [batch, H, W, C]; shape has {len(shape)} dims", ()
    c_at, hw = (1, shape[2:]) if image.layout == "nchw" else (3, shape[1:3])
    if isinstance(shape[c_at], int) and shape[c_at] != image.channels:
        return (f"color {image.color} gives {image.channels} channel(s), shape {list(shape)} takes {shape[c_at]} "
                f"({image.layout})", ("image", "color"))
    size = image.size
    if size and all(isinstance(d, int) for d in hw) and tuple(hw) != size:
        return f"the steps give {size[0]}x{size[1]} images, shape {list(shape)} takes {hw[0]}x{hw[1]}", ("image",)
    return None
