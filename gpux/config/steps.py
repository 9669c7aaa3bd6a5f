"""The pydantic models of an input's `preprocess:` and an output's `postprocess:` blocks (docs/answers.md).

Only what can be checked from gpux.yml alone is checked here; the model's real shapes are checked when a
session is opened (gpux.answers)."""

from __future__ import annotations

import re
from dataclasses import dataclass
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


Range = Annotated[tuple[int, int], BeforeValidator(_size), WithJsonSchema(
    {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2})]


class Resize(Strict):
    """Exactly one of shorter, height, width, exact, letterbox."""

    shorter: int | None = Field(None, ge=1, description="Resize so the shorter side is this long, keeping the "
                                "aspect ratio (then usually crop:).")
    height: int | None = Field(None, ge=1, description="Resize to this height keeping the aspect ratio: the width "
                               "follows (text lines; the input's width is dynamic or range: bounds it).")
    width: int | None = Field(None, ge=1, description="Resize to this width keeping the aspect ratio: the height "
                              "follows.")
    range: Range | None = Field(None, description="[least, most] the following side may be (with height: or width:); "
                                "outside: says what happens to an image outside it.")
    outside: Literal["pad", "fit", "refuse"] = Field(
        "refuse", description="An image whose following side falls outside range: pad (pad a short one with fill up "
        "to the least, on the right or below; squeeze a long one to the most), fit (stretch or squeeze it into the "
        "range), refuse (an error naming the file and its size).")
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
        modes = ("shorter", "height", "width", "exact", "letterbox")
        given = [k for k in modes if getattr(self, k) is not None]
        if len(given) != 1:
            raise _fail(f"expected exactly one of {', '.join(modes)}" + (f"; got {', '.join(given)}" if given else ""))
        if self.range is not None and given[0] not in ("height", "width"):
            raise _fail("range bounds the side that follows height: or width:", "range")
        if self.range is not None and self.range[0] > self.range[1]:
            raise _fail(f"range {list(self.range)}: the least is above the most", "range")
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
    resize_first: bool = Field(False, description="Resize before converting to color: (as pipelines that resize the "
                               "decoded image, then convert it to gray, do); default: convert first.")
    background: tuple[int, int, int] | None = Field(None, description="[r, g, b] (0..255): an image with "
                                                    "transparency is pasted on this color (default: its alpha is "
                                                    "dropped, its hidden pixels shown).")

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def size(self) -> tuple[int, int] | None:
        """(height, width) of the tensor, where the steps fix it."""
        r = self.resize
        return self.crop or (r.exact or r.letterbox if r else None)

    @property
    def fixed(self) -> tuple[int | None, int | None]:
        """(height, width), each where the steps fix it (a keep-aspect resize fixes one side)."""
        if self.size:
            return self.size
        r = self.resize
        return (r.height, None) if r and r.height else (None, r.width) if r and r.width else (None, None)

    @model_validator(mode="after")
    def _per_channel(self) -> ImageSteps:
        for key in ("mean", "std"):
            values = getattr(self, key)
            if values is not None and len(values) not in (1, self.channels):
                raise _fail(f"{len(values)} values for {self.channels} channel(s) ({self.color})", key)
        if self.std is not None and 0 in self.std:
            raise _fail("std divides: no zeros", "std")
        return self


@dataclass(frozen=True)
class BoxLayout:
    """Where a detector's output row keeps its boxes: channels on axis 1 of `[batch, channels, anchors]` or axis 2
    of `[batch, anchors, channels]`; channels are cx, cy, w, h (input pixels), an objectness score where
    `objectness` (a box's score is objectness x class score), then one score per class."""

    channels_axis: int
    objectness: bool
    shape: str  # as docs and messages write it
    grid: bool = False  # cx, cy, w, h are a raw anchor grid's: xy offsets in cells, log w/h in strides (YOLOX's)

    @property
    def coords(self) -> int:
        """Channels before the class scores."""
        return 5 if self.objectness else 4


BoxLayoutName = Literal["yolov8", "yolov5", "yolox", "yolox_grid"]
BOX_LAYOUTS = {
    "yolov8": BoxLayout(1, False, "[batch, 4 + classes, anchors]"),  # ultralytics YOLOv8/v11 export
    "yolov5": BoxLayout(2, True, "[batch, anchors, 5 + classes]"),  # YOLOv5 export.py (sigmoid in the model)
    "yolox": BoxLayout(2, True, "[batch, anchors, 5 + classes]"),  # YOLOX export_onnx.py --decode_in_inference
    # YOLOX export_onnx.py without --decode_in_inference: per anchor of each stride's grid (row-major, strides in
    # order) x, y offsets in cells, log w, h in strides, objectness and class scores (sigmoid in the model)
    "yolox_grid": BoxLayout(2, True, "[batch, anchors, 5 + classes], anchors the cells of each stride's grid", True),
}


class Boxes(Strict):
    layout: BoxLayoutName = Field("yolov8", description="How the output holds its boxes (cx, cy, w, h in input "
                                  "pixels): yolov8 [batch, 4 + classes, anchors], class scores only; yolov5 and "
                                  "yolox (exported with --decode_in_inference) [batch, anchors, 5 + classes], an "
                                  "objectness score before the class scores (score = objectness x class score); "
                                  "yolox_grid: YOLOX's raw grid (exported without --decode_in_inference), decoded "
                                  "from strides: cx, cy = (offset + cell) x stride, w, h = exp(value) x stride.")
    score: float = Field(0.25, ge=0, le=1, description="Least score a box is kept at.")
    iou: float = Field(0.45, ge=0, le=1, description="Boxes of one class overlapping more than this (IoU) are "
                       "suppressed, the best kept.")
    max: int = Field(300, ge=1, description="Most boxes answered per image, best first.")
    image: str | None = Field(None, description="The image input whose resize/letterbox the boxes are mapped back "
                              "through (default: the only image input).")
    strides: list[Annotated[int, Field(ge=1)]] = Field(
        [8, 16, 32], min_length=1, description="yolox_grid: the strides of the grids, in the order the anchors come "
        "(each grid: the input's height and width over its stride, rounded up, cells row-major).")


def _texts(value: Any) -> Any:
    """Digits written bare in a YAML list ([0, 1, 2]) are the characters they spell."""
    if isinstance(value, list):
        return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
    return value


Charset = Annotated[list[str] | str, BeforeValidator(_texts), WithJsonSchema(
    {"anyOf": [{"type": "array", "items": {"type": ["string", "integer"]}}, {"type": "string"}]})]


class Ctc(Strict):
    charset: Charset = Field(description="The text of every class but the blank, in class order: a list, or a UTF-8 "
                             "file (relative to gpux.yml) with one per line, nothing stripped but the line break (a "
                             "line holding one space is a space).")
    blank: int = Field(0, description="Index of the blank class; negative counts from the end (-1: the last).")
    space: bool = Field(False, description="A space is the last class, after the charset (PaddleOCR's "
                        "use_space_char: its dictionaries leave it out).")
    axis: Literal[1, 2, -1] = Field(-1, description="The class axis: -1 or 2 for [batch, time, classes], 1 for "
                                    "[batch, classes, time].")
    time_major: bool = Field(False, description="The output is [time, batch, classes] (the batch on axis 1, as "
                             "CRNN exports and CTC losses take it); classes stay on the last axis.")

    def classes(self, characters: int) -> int:
        """How many classes a charset of `characters` entries makes: the blank, and the space where declared."""
        return characters + 1 + self.space

    def texts(self, charset: list[str]) -> list[str]:
        """The text of each class index: the blank's is empty."""
        texts = [*charset, *([" "] if self.space else [])]
        blank = self.blank % (len(texts) + 1)
        return [*texts[:blank], "", *texts[blank:]]


class Postprocess(Strict):
    softmax: bool = Field(False, description="Softmax over the class axis (for logits).")
    sigmoid: bool = Field(False, description="Sigmoid of every score (multi-label logits).")
    topk: int | None = Field(None, ge=1, description="Answer the K best classes as {label, index, score}, labels "
                             "from this output's labels:.")
    boxes: Boxes | None = Field(None, description="Decode detector boxes: threshold, class-aware NMS, boxes in the "
                                "original image's pixels as {label, index, score, box: [x1, y1, x2, y2]}.")
    ctc: Ctc | None = Field(None, description="Greedy CTC decoding (OCR, speech): the best class per step, repeats "
                            "collapsed, blanks dropped, classes mapped to the charset: {text, score}.")
    python: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", description="module:function, "
                               "imported from gpux.yml's folder: called with one batch row of the output (a numpy "
                               "array), returns a JSON-able answer (docs/answers.md, Python steps).")

    @model_validator(mode="after")
    def _one_answer(self) -> Postprocess:
        if self.softmax and self.sigmoid:
            raise _fail("softmax and sigmoid both set; pick one", "sigmoid")
        given = [k for k in ("topk", "boxes", "ctc", "python") if getattr(self, k) is not None]
        if len(given) > 1:
            raise _fail(f"{' and '.join(given)} both set; an output answers classes, boxes, text or what its python "
                        "step returns", given[-1])
        return self

    @property
    def batch_axis(self) -> int:
        """The output's batch axis: 1 for a time-major ctc output, else 0."""
        return 1 if self.ctc is not None and self.ctc.time_major else 0

    @property
    def files(self) -> list[str]:
        """Files the steps read at run time (relative to gpux.yml): a ctc charset file."""
        return [self.ctc.charset] if self.ctc is not None and isinstance(self.ctc.charset, str) else []

    @model_validator(mode="after")
    def _blank_in_range(self) -> Postprocess:
        ctc = self.ctc
        if ctc is not None and ctc.time_major and ctc.axis == 1:
            raise _fail("time_major keeps the classes on the last axis ([time, batch, classes]); drop axis: 1",
                        "ctc", "axis")
        if ctc is not None and isinstance(ctc.charset, list) and not \
                -ctc.classes(len(ctc.charset)) <= ctc.blank < ctc.classes(len(ctc.charset)):
            raise _fail(f"blank {ctc.blank} is not a class index: the charset makes "
                        f"{ctc.classes(len(ctc.charset))} classes", "ctc", "blank")
        return self


def classes_axis(post: Postprocess | None) -> int:
    """The axis of the class scores: the box layout's channels, the ctc axis, else the last."""
    if post is not None and post.boxes is not None:
        return BOX_LAYOUTS[post.boxes.layout].channels_axis
    return post.ctc.axis if post is not None and post.ctc is not None else -1


def class_misfit(size: Any, entries: int, post: Postprocess | None) -> str | None:
    """Why `entries` labels (or ctc charset entries) do not fit a class axis of `size` ('labels for ... classes'
    for the caller to finish with where the size comes from); None where they fit or the size is not known."""
    if not isinstance(size, int):
        return None
    if post is not None and post.ctc is not None:
        want = post.ctc.classes(entries)
        if want == size:
            return None
        extra = "the blank and the space" if post.ctc.space else "the blank"
        return f"{entries} charset entries and {extra} make {want} classes, not {size}"
    classes = size - (BOX_LAYOUTS[post.boxes.layout].coords if post is not None and post.boxes is not None else 0)
    return None if entries == classes else f"{entries} labels for {classes} classes"


def check_labels(labels: Any, shape: tuple[int | str, ...] | None, post: Postprocess | None
                 ) -> tuple[str, tuple[str, ...]] | None:
    """Why inline labels (or an inline ctc charset) do not fit the declared shape, and which field says so (None
    when they fit or it cannot be told)."""
    ctc = post.ctc if post is not None else None
    if ctc is not None and labels is not None:
        return "ctc reads its classes' text from postprocess.ctc.charset; drop labels", ("labels",)
    entries, at = (ctc.charset, ("postprocess", "ctc", "charset")) if ctc else (labels, ("labels",))
    axis = classes_axis(post)
    if not isinstance(entries, list) or not shape or len(shape) < (3 if axis > 0 or ctc else 1):
        return None
    wrong = class_misfit(shape[axis], len(entries), post)
    return (f"{wrong} (shape {list(shape)})", at) if wrong else None


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
    wrong = [(side, f, d) for side, f, d in zip(("height", "width"), image.fixed, hw, strict=True)
             if f is not None and isinstance(d, int) and d != f]
    if wrong:
        side, f, d = wrong[0]
        return f"the steps give images of {side} {f}, shape {list(shape)} takes {side} {d}", ("image", "resize")
    return None


def declared_steps(config: Any) -> list[str]:
    """Where a gpux.yml declares steps around the model: `inputs.NAME.preprocess`, `outputs.NAME.postprocess`."""
    return [f"inputs.{n}.preprocess" for n, t in (config.inputs or {}).items() if t.preprocess is not None] + \
        [f"outputs.{n}.postprocess" for n, t in (config.outputs or {}).items() if t.postprocess is not None]
