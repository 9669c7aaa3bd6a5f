"""The pydantic models of an input's `preprocess:` and an output's `postprocess:` blocks (docs/answers.md; each
kind's own block: gpux.config.blocks).

Only what can be checked from gpux.yml alone is checked here; the model's real shapes are checked when a
session is opened (gpux.answers)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Protocol, TypeAlias

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    SkipValidation,
    WithJsonSchema,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from gpux.config.base import Strict
from gpux.config.base import fail as _fail
from gpux.config.blocks import (
    BOX_LAYOUTS,
    Boxes,
    BoxLayout,
    BoxLayoutName,
    Ctc,
    Embedding,
    Keypoints,
    Masks,
    Segmentation,
    TextBoxes,
)
from gpux.config.kinds import ADDED, ANSWER_KEYS
from gpux.config.problems import show_value
from gpux.config.tokens import Tokens

__all__ = ["ADDED", "ANSWER_KEYS", "BOX_LAYOUTS", "Block", "BoxLayout", "BoxLayoutName", "Boxes", "Ctc",
           "Declared", "Embedding", "ImageSteps", "Keypoints", "Masks", "Postprocess", "Resize", "Segmentation",
           "Strict", "TextBoxes", "check_image_shape", "check_labels", "class_misfit", "classes_axis", "declared_steps"]

FRACTION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*/\s*(\d+(?:\.\d*)?)\s*$")


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


Range = Annotated[tuple[int, int], BeforeValidator(_size), WithJsonSchema(
    {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 2})]


class Resize(Strict):
    """Exactly one of shorter, height, width, exact, letterbox, side_limit."""

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
    side_limit: int | None = Field(None, ge=1, description="A text detector's rule (PaddleOCR's det resize): scale "
                                   "the image so its longer side is at most this long (limit_type: max) or its "
                                   "shorter side at least this long (min), then round each side to a multiple of "
                                   "`multiple`, stretching it (text regions are mapped back per axis).")
    limit_type: Literal["max", "min"] = Field("max", description="side_limit bounds the longer side from above "
                                              "(max) or the shorter side from below (min).")
    multiple: int = Field(32, ge=1, description="side_limit: each side is rounded to a multiple of this.")
    fill: int = Field(114, ge=0, le=255, description="Pixel value of the letterbox padding.")
    anchor: Literal["center", "top_left"] = Field(
        "center", description="Where the letterboxed image sits: centred, or at the top left (padding right and "
        "below).")
    filter: Literal["nearest", "bilinear", "bicubic", "lanczos", "box", "hamming"] = Field(
        "bilinear", description="Pillow's resampling filter (antialiased when shrinking).")

    @model_validator(mode="after")
    def _one_mode(self) -> Resize:
        modes = ("shorter", "height", "width", "exact", "letterbox", "side_limit")
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




# A kind's own block under postprocess: topk's k, a python step's 'module:function', every other built-in kind's
# pydantic block (gpux.config.blocks: Boxes, Ctc, TextBoxes, Embedding, Keypoints, Masks, Segmentation; Tokens), a
# plug-in kind's the config type it registered (gpux.config.kinds.register; kept in Postprocess.added).
Block: TypeAlias = int | str | BaseModel


class Postprocess(Strict):
    softmax: bool = Field(False, description="Softmax over the class axis (for logits).")
    sigmoid: bool = Field(False, description="Sigmoid of every score (multi-label logits).")
    topk: int | None = Field(None, ge=1, description="Answer the K best classes as {label, index, score}, labels "
                             "from this output's labels:.")
    boxes: Boxes | None = Field(None, description="Decode detector boxes: threshold, class-aware NMS, boxes in the "
                                "original image's pixels as {label, index, score, box: [x1, y1, x2, y2]}.")
    ctc: Ctc | None = Field(None, description="Greedy CTC decoding (OCR, speech): the best class per step, repeats "
                            "collapsed, blanks dropped, classes mapped to the charset: {text, score}.")
    text_boxes: TextBoxes | None = Field(None, description="Text regions of a DB detector's probability map "
                                         "[batch, 1, H, W]: {box: [[x, y] x 4], score} in the original image's "
                                         "pixels, as PaddleOCR's DB post-processing finds them.")
    embedding: Embedding | None = Field(None, description="The row as one vector (normalized to unit length where "
                                        "normalize: true): {vector}.")
    keypoints: Keypoints | None = Field(None, description="Decode a pose detector: boxes as boxes: does, each with "
                                        "its keypoints [[x, y, visibility], ...] in the original image's pixels.")
    masks: Masks | None = Field(None, description="Decode an instance segmenter: boxes as boxes: does, each with its "
                                "mask (from the prototype masks of another output) in the original image's pixels.")
    tokens: Tokens | None = Field(None, description="Per-token labels of a token classifier [batch, tokens, labels]: "
                                  "entities {label, score, start, end, text} with the characters they span in the "
                                  "input text (aggregation: none: one per token).")
    segmentation: Segmentation | None = Field(None, description="A semantic segmenter's map [batch, classes, H, W] "
                                              "(or its class indexes [batch, H, W]): the class of every pixel of the "
                                              "original image, {size, classes: [{label, index, pixels}], png}.")
    python: str | None = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$", description="module:function, "
                               "imported from gpux.yml's folder: called with one batch row of the output (a numpy "
                               "array), returns a JSON-able answer (docs/answers.md, Python steps).")
    # plug-in kinds' (key, config), each validated by its own type in _plugged (kept as it is here)
    added: SkipJsonSchema[SkipValidation[tuple[tuple[str, Block], ...]]] = Field((), exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _plugged(cls, data: Any) -> Any:
        """A plug-in kind's key (ADDED) validated by its own config type, kept under `added`."""
        if not isinstance(data, dict) or not ADDED.keys() & data.keys():
            return data
        from pydantic import TypeAdapter, ValidationError

        added = []
        for key in [k for k in data if k in ADDED]:
            try:
                added.append((key, TypeAdapter(ADDED[key]).validate_python(data[key])))
            except ValidationError as exc:
                first = exc.errors()[0]
                raise _fail(first["msg"], key, *first["loc"]) from exc
        return {**{k: v for k, v in data.items() if k not in ADDED}, "added": tuple(added)}

    @model_serializer(mode="wrap")
    def _dumped(self, handler: Any) -> Any:
        """A plug-in kind's block dumped under its key, as written."""
        out = handler(self)
        for key, value in self.added:
            out[key] = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        return out

    @model_validator(mode="after")
    def _one_answer(self) -> Postprocess:
        if self.softmax and self.sigmoid:
            raise _fail("softmax and sigmoid both set; pick one", "sigmoid")
        given = [k for k, _ in self.answers]
        if len(given) > 1:
            raise _fail(f"{' and '.join(given)} both set; an output answers classes, boxes, text or what its python "
                        "step returns: one kind", given[-1])
        return self

    @property
    def answers(self) -> list[tuple[str, Block]]:
        """(key, its block) of each kind of answer declared (one, once validated)."""
        return [(k, getattr(self, k)) for k in ANSWER_KEYS if getattr(self, k) is not None] + list(self.added)

    @property
    def answer(self) -> tuple[str, Block] | None:
        """(key, block) of the kind of answer this output gives (gpux.config.kinds), None: values only."""
        return next(iter(self.answers), None)

    @property
    def block(self) -> Block | None:
        """The declared kind's own block (None: values only)."""
        return self.answer[1] if self.answer else None

    @property
    def batch_axis(self) -> int:
        """The output's batch axis: its kind's (1 for a time-major ctc output), else 0."""
        return getattr(self.block, "batch_axis", 0)

    @property
    def files(self) -> list[str]:
        """Files the steps read at run time (relative to gpux.yml): a ctc charset file."""
        return list(getattr(self.block, "files", ()))


def classes_axis(post: Postprocess | None) -> int:
    """The axis of the class scores: the kind's (a box layout's channels, the ctc axis), else the last."""
    return getattr(post.block, "classes_axis", -1) if post is not None else -1


def class_misfit(size: int | str | None, entries: int, post: Postprocess | None) -> str | None:
    """Why `entries` labels (or ctc charset entries) do not fit a class axis of `size` ('labels for ... classes'
    for the caller to finish with where the size comes from); None where they fit or the size is not known."""
    if not isinstance(size, int):
        return None
    misfit = getattr(post.block if post is not None else None, "class_misfit", None)
    if misfit is not None:
        return misfit(size, entries)
    return None if entries == size else f"{entries} labels for {size} classes"


def check_labels(labels: list[str] | str | None, shape: tuple[int | str, ...] | None, post: Postprocess | None
                 ) -> tuple[str, tuple[str, ...]] | None:
    """Why inline labels (or an inline ctc charset) do not fit the declared shape, and which field says so (None
    when they fit or it cannot be told)."""
    key, block = post.answer if post is not None and post.answer else ("", None)
    charset, own = getattr(block, "inline_classes", None), getattr(block, "classes_field", "charset")
    if getattr(block, own, None) is not None and labels is not None:
        return f"{key} reads its classes' text from postprocess.{key}.{own}; drop labels", ("labels",)
    entries, at = (charset, ("postprocess", key, own)) if charset is not None else (labels, ("labels",))
    axis = classes_axis(post)
    least = 3 if axis > 0 or charset is not None else 1
    if not isinstance(entries, list) or not shape or len(shape) < least:
        return None
    wrong = class_misfit(shape[axis], len(entries), post)
    return (f"{wrong} (shape {list(shape)})", at) if wrong else None


def check_image_shape(image: ImageSteps, shape: tuple[int | str | None, ...]) -> tuple[str, tuple[str, ...]] | None:
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


class _Input(Protocol):
    @property
    def preprocess(self) -> object | None: ...


class _Output(Protocol):
    @property
    def postprocess(self) -> Postprocess | None: ...


class Declared(Protocol):
    """What declared_steps reads of a gpux.yml (gpux.config.schema.GpuxConfig): its inputs and outputs by name."""

    @property
    def inputs(self) -> Mapping[str, _Input] | None: ...

    @property
    def outputs(self) -> Mapping[str, _Output] | None: ...


def declared_steps(config: Declared) -> list[str]:
    """Where a gpux.yml declares steps around the model: `inputs.NAME.preprocess`, `outputs.NAME.postprocess`."""
    return [f"inputs.{n}.preprocess" for n, t in (config.inputs or {}).items() if t.preprocess is not None] + \
        [f"outputs.{n}.postprocess" for n, t in (config.outputs or {}).items() if t.postprocess is not None]
