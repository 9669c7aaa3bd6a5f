"""Each built-in kind's own block under an output's `postprocess:` (the key names the kind: gpux.config.kinds):
detector boxes in their layouts, CTC text, text regions of a probability map, an embedding; and the facts about the
output a block tells before the model is read (its class axis, how labels fit it, its batch axis, its files)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from gpux.config.base import Strict, fail


@dataclass(frozen=True)
class BoxLayout:
    """Where a detector's output row keeps its boxes: channels on axis 1 of `[batch, channels, anchors]` or axis 2
    of `[batch, anchors, channels]`; channels are cx, cy, w, h (input pixels), an objectness score where
    `objectness` (a box's score is objectness x class score), then one score per class."""

    channels_axis: int
    objectness: bool
    _: KW_ONLY
    shape: str  # as docs and messages write it
    grid: bool = False  # cx, cy, w, h are a raw anchor grid's: xy offsets in cells, log w/h in strides (YOLOX's)
    angle: bool = False  # a rotation (radians) follows the class scores: oriented boxes (gpux.answers.obb)
    heads: bool = False  # one output per stride, named by the block's `heads:` (gpux.answers.heads)
    before: int | None = None  # channels before the class scores, where not cx, cy, w, h (and the objectness)

    @property
    def coords(self) -> int:
        """Channels before the class scores."""
        return self.before if self.before is not None else 5 if self.objectness else 4

    @property
    def others(self) -> int:
        """Channels that are not class scores."""
        return self.coords + self.angle


BoxLayoutName = Literal["yolov8", "yolov5", "yolox", "yolox_grid", "yolov8_obb", "picodet", "yolov5_heads"]
BOX_LAYOUTS = {
    "yolov8": BoxLayout(1, False, shape="[batch, 4 + classes, anchors]"),  # ultralytics YOLOv8/v11 export
    "yolov5": BoxLayout(2, True, shape="[batch, anchors, 5 + classes]"),  # YOLOv5 export.py (sigmoid in the model)
    "yolox": BoxLayout(2, True, shape="[batch, anchors, 5 + classes]"),  # YOLOX export_onnx.py --decode_in_inference
    # YOLOX export_onnx.py without --decode_in_inference: per anchor of each stride's grid (row-major, strides in
    # order) x, y offsets in cells, log w, h in strides, objectness and class scores (sigmoid in the model)
    "yolox_grid": BoxLayout(2, True, shape="[batch, anchors, 5 + classes], anchors the cells of each stride's grid",
                            grid=True),
    # ultralytics' OBB export: cx, cy, w, h, class scores, then the box's rotation in radians
    "yolov8_obb": BoxLayout(1, False, shape="[batch, 4 + classes + 1, anchors]", angle=True),
    # PP-PicoDet's export without its NMS: per stride, class scores [batch, cells, classes] (the `heads`) and the
    # box distributions [batch, cells, 4 x (reg_max + 1)] (the `distributions`), cells row-major
    "picodet": BoxLayout(2, False, shape="[batch, cells, classes] per stride", heads=True, before=0),
    # YOLOv5's Detect layer before its decoding: per stride [batch, anchors, height, width, 5 + classes], logits
    "yolov5_heads": BoxLayout(4, True, shape="[batch, anchors, height, width, 5 + classes] per stride", heads=True),
}
STRIDES = {"picodet": [8, 16, 32, 64]}  # a layout's default strides where not [8, 16, 32]
ANCHORS = [[10, 13, 16, 30, 33, 23], [30, 61, 62, 45, 59, 119], [116, 90, 156, 198, 373, 326]]  # YOLOv5's P3-P5


class Boxes(Strict):
    layout: BoxLayoutName = Field("yolov8", description="How the output holds its boxes (cx, cy, w, h in input "
                                  "pixels): yolov8 [batch, 4 + classes, anchors], class scores only; yolov5 and "
                                  "yolox (exported with --decode_in_inference) [batch, anchors, 5 + classes], an "
                                  "objectness score before the class scores (score = objectness x class score); "
                                  "yolox_grid: YOLOX's raw grid (exported without --decode_in_inference), decoded "
                                  "from strides: cx, cy = (offset + cell) x stride, w, h = exp(value) x stride; "
                                  "yolov8_obb: oriented boxes [batch, 4 + classes + 1, anchors], the rotation in "
                                  "radians last (rotated NMS by probabilistic IoU, as ultralytics does); picodet: "
                                  "PP-PicoDet's per-stride outputs, class scores [batch, cells, classes] (heads) and "
                                  "box distributions [batch, cells, 4 x (reg_max + 1)] (distributions); "
                                  "yolov5_heads: YOLOv5's Detect layer undecoded, [batch, 3, height, width, 5 + "
                                  "classes] logits per stride (heads), decoded with its anchors.")
    score: float = Field(0.25, ge=0, le=1, description="Least score a box is kept at.")
    iou: float = Field(0.45, ge=0, le=1, description="Boxes of one class overlapping more than this (IoU) are "
                       "suppressed, the best kept.")
    max: int = Field(300, ge=1, description="Most boxes answered per image, best first.")
    image: str | None = Field(None, description="The image input whose resize/letterbox the boxes are mapped back "
                              "through (default: the only image input).")
    strides: list[Annotated[int, Field(ge=1)]] = Field(
        [8, 16, 32], min_length=1, description="yolox_grid: the strides of the grids, in the order the anchors come "
        "(each grid: the input's height and width over its stride, rounded up, cells row-major); picodet and "
        "yolov5_heads: the stride of each of the heads, in order (default: picodet [8, 16, 32, 64], else [8, 16, "
        "32]).")
    heads: list[str] | None = Field(None, min_length=1, description="picodet and yolov5_heads: the outputs of the "
                                    "heads, one per stride in the order of strides (picodet: its class scores), the "
                                    "output that declares this step among them; the step reads them all.")
    distributions: list[str] | None = Field(None, min_length=1, description="picodet: the outputs of the box "
                                            "distributions, one per stride in the order of strides (each box side "
                                            "the expectation of a softmax over reg_max + 1 bins, in strides).")
    anchors: list[list[Annotated[float, Field(gt=0)]]] | None = Field(
        None, description="yolov5_heads: per stride, its anchors' widths and heights in input pixels, [w, h, w, h, "
        "...] as YOLOv5's model files write them (default: YOLOv5's P3-P5, [[10, 13, 16, 30, 33, 23], [30, 61, 62, "
        "45, 59, 119], [116, 90, 156, 198, 373, 326]]).")

    @model_validator(mode="before")
    @classmethod
    def _layout_strides(cls, data: Any) -> Any:
        """A layout's own default strides (picodet's four)."""
        if isinstance(data, dict) and "strides" not in data and data.get("layout") in STRIDES:
            return {**data, "strides": STRIDES[data["layout"]]}
        return data

    @model_validator(mode="after")
    def _heads(self) -> Boxes:
        layout = BOX_LAYOUTS[self.layout]
        named = [k for k in ("heads", "distributions", "anchors") if getattr(self, k) is not None]
        wants = {"heads", "distributions"} if self.layout == "picodet" else {"heads", "anchors"} if layout.heads \
            else set()
        extra = [k for k in named if k not in wants]
        if extra:
            raise fail(f"layout {self.layout} reads no {extra[0]}" + (
                "; picodet and yolov5_heads read one output per stride" if not layout.heads else ""), extra[0])
        if not layout.heads:
            return self
        for key in ("heads", "distributions") if self.layout == "picodet" else ("heads",):
            if getattr(self, key) is None:
                raise fail(f"layout {self.layout} reads one output per stride: name them under {key}", key)
            if len(getattr(self, key)) != len(self.strides):
                raise fail(f"{len(getattr(self, key))} outputs for {len(self.strides)} strides {self.strides}", key)
        if self.layout == "yolov5_heads":
            anchors = self.levels_anchors
            if len(anchors) != len(self.strides):
                raise fail(f"{len(anchors)} levels of anchors for {len(self.strides)} strides"
                           + ("" if self.anchors else " (YOLOv5's defaults are P3-P5's three)"), "anchors")
            if any(len(a) % 2 or not a for a in anchors):
                raise fail("each level's anchors are pairs of width, height", "anchors")
        return self

    @property
    def levels_anchors(self) -> list[list[float]]:
        """yolov5_heads: each stride's anchors, [w, h, ...] in input pixels."""
        return self.anchors if self.anchors is not None else [list(map(float, a)) for a in ANCHORS]

    @property
    def row_rank(self) -> int:
        """The rank of one batch row of the declaring output: yolov5_heads' [anchors, height, width, channels]."""
        return 4 if self.layout == "yolov5_heads" else 2

    @property
    def reads(self) -> tuple[str, ...]:
        """The outputs this step reads (its heads, their distributions)."""
        return (*(self.heads or ()), *(self.distributions or ()))

    def read_field(self, name: str) -> str:
        """The field that names an output this step reads."""
        return "heads" if name in (self.heads or ()) else "distributions"

    @property
    def classes_axis(self) -> int:
        return BOX_LAYOUTS[self.layout].channels_axis

    def class_misfit(self, size: int, entries: int) -> str | None:
        classes = size - BOX_LAYOUTS[self.layout].others
        return None if entries == classes else f"{entries} labels for {classes} classes"


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

    @property
    def classes_axis(self) -> int:
        return self.axis

    @property
    def batch_axis(self) -> int:
        return 1 if self.time_major else 0

    @property
    def files(self) -> list[str]:
        return [self.charset] if isinstance(self.charset, str) else []

    @property
    def inline_classes(self) -> list[str] | None:
        """The charset written inline, whose entries the class axis is checked against (None: a file's)."""
        return self.charset if isinstance(self.charset, list) else None

    def class_misfit(self, size: int, entries: int) -> str | None:
        want = self.classes(entries)
        if want == size:
            return None
        extra = "the blank and the space" if self.space else "the blank"
        return f"{entries} charset entries and {extra} make {want} classes, not {size}"

    @model_validator(mode="after")
    def _blank_in_range(self) -> Ctc:
        if self.time_major and self.axis == 1:
            raise fail("time_major keeps the classes on the last axis ([time, batch, classes]); drop axis: 1", "axis")
        if isinstance(self.charset, list) and not -self.classes(len(self.charset)) <= self.blank < \
                self.classes(len(self.charset)):
            raise fail(f"blank {self.blank} is not a class index: the charset makes "
                        f"{self.classes(len(self.charset))} classes", "blank")
        return self


class TextBoxes(Strict):
    layout: Literal["db"] = Field("db", description="db: a DB (differentiable binarization) detector's probability "
                                  "map [batch, 1, H, W], one text probability per input pixel (PaddleOCR's det "
                                  "models).")
    threshold: float = Field(0.3, ge=0, le=1, description="Pixels of at least this probability are text.")
    box_threshold: float = Field(0.6, ge=0, le=1, description="Least mean probability inside a region for it to "
                                 "be answered (its score).")
    unclip: float = Field(1.5, gt=0, description="How far each region is grown back out (DB shrinks its regions "
                          "in training): by area x unclip / perimeter.")
    max: int = Field(1000, ge=1, description="Most regions read from one map (the largest contours first).")
    min_size: float = Field(3, ge=0, description="Regions whose shorter side is under this many pixels (of the "
                            "map) are dropped, before and after growing.")
    dilate: bool = Field(False, description="Grow the thresholded map by one pixel (a 2x2 dilation) before finding "
                         "regions, as PaddleOCR's use_dilation and rapidocr do.")
    image: str | None = Field(None, description="The image input whose resize the boxes are mapped back through "
                              "(default: the only image input).")

    @property
    def classes_axis(self) -> int:
        return 1


class Embedding(Strict):
    normalize: bool = Field(True, description="Divide the vector by its length (cosine-ready).")


class Keypoints(Strict):
    layout: Literal["yolov8_pose", "heatmap"] = Field(
        "yolov8_pose", description="yolov8_pose: [batch, 4 + classes + points x dims, anchors] (ultralytics' pose "
        "export: cx, cy, w, h, class scores, then each point's x, y (input pixels) and visibility, sigmoid inside "
        "the model); heatmap: a top-down model's one confidence map per keypoint, [batch, points, height, width] "
        "(HRNet, ViTPose, SLEAP): each map's peak, a quarter cell towards the higher neighbour (mmpose's rule), "
        "scored by the peak's value.")
    points: int = Field(17, ge=1, description="Keypoints per detection (17: COCO's person).")
    dims: Literal[2, 3] = Field(3, description="Values per keypoint: x, y, and a visibility where 3.")
    score: float = Field(0.25, ge=0, le=1, description="Least score a detection is kept at.")
    iou: float = Field(0.45, ge=0, le=1, description="Detections of one class overlapping more than this (IoU) are "
                       "suppressed, the best kept.")
    max: int = Field(300, ge=1, description="Most detections answered per image, best first.")
    names: list[str] | None = Field(None, description="The keypoints' names, in order (for the terminal's lines).")
    skeleton: list[tuple[int, int]] | None = Field(None, description="Pairs of keypoint indexes joined by a line on "
                                                   "--save pictures.")
    image: str | None = Field(None, description="The image input whose resize/letterbox the points are mapped back "
                              "through (default: the only image input).")

    @property
    def classes_axis(self) -> int:
        return 1

    @property
    def extra(self) -> int:
        """Channels that are not class scores: the box's 4 and the keypoints'."""
        return 4 + self.points * self.dims

    def class_misfit(self, size: int, entries: int) -> str | None:
        if self.layout == "heatmap":  # one map per point, named by names:; no classes
            return None
        classes = size - self.extra
        return None if entries == classes else f"{entries} labels for {classes} classes"

    @model_validator(mode="after")
    def _names(self) -> Keypoints:
        if self.names is not None and len(self.names) != self.points:
            raise fail(f"{len(self.names)} names for {self.points} points", "names")
        wrong = [p for p in self.skeleton or () if not all(0 <= i < self.points for i in p)]
        if wrong:
            raise fail(f"skeleton pair {list(wrong[0])} names a point outside 0..{self.points - 1}", "skeleton")
        return self


class Masks(Strict):
    layout: Literal["yolov8_seg"] = Field("yolov8_seg", description="yolov8_seg: [batch, 4 + classes + coefficients, "
                                          "anchors] (ultralytics' segment export), each box's mask the sigmoid of "
                                          "its coefficients times the prototype masks of `protos`.")
    protos: str = Field(description="The output holding the prototype masks, [batch, coefficients, mask height, "
                        "mask width] (ultralytics' output1): this step reads it too.")
    threshold: float = Field(0.5, gt=0, lt=1, description="A pixel is the object's where its mask is at least this.")
    score: float = Field(0.25, ge=0, le=1, description="Least score a detection is kept at.")
    iou: float = Field(0.45, ge=0, le=1, description="Detections of one class overlapping more than this (IoU) are "
                       "suppressed, the best kept.")
    max: int = Field(100, ge=1, description="Most detections answered per image, best first.")
    image: str | None = Field(None, description="The image input the masks are mapped back through (default: the "
                              "only image input).")

    @property
    def classes_axis(self) -> int:
        return 1

    def class_misfit(self, size: int, entries: int) -> str | None:
        """Not told here: the classes are what the prototypes' coefficients leave (labels past them read as indexes)."""
        return None

    @property
    def reads(self) -> tuple[str, ...]:
        """The other outputs this step reads."""
        return (self.protos,)


class Segmentation(Strict):
    layout: Literal["scores", "classes"] = Field(
        "scores", description="scores: [batch, classes, height, width], a score (logit or probability) per class and "
        "pixel, resized bilinearly to the original image before the best class is taken (one channel: the "
        "foreground where it reaches threshold); classes: [batch, height, width] (or [batch, 1, height, width]) "
        "class indexes, the best class taken inside the model, resized nearest.")
    labels: list[str] | str | None = Field(None, description="The classes' names in index order: a list, or a "
                                           "file (relative to gpux.yml) with one per line; or the output's labels:. "
                                           "A one-channel map's are two: background, foreground.")
    threshold: float = Field(0.5, description="A one-channel map: the foreground where its value (after sigmoid: "
                             "where declared) reaches this.")
    image: str | None = Field(None, description="The image input the class map is mapped back through (default: the "
                              "only image input).")

    classes_field: ClassVar[str] = "labels"  # where the block names its classes (gpux.config.steps.check_labels)

    @property
    def classes_axis(self) -> int:
        return 1

    @property
    def files(self) -> list[str]:
        return [self.labels] if isinstance(self.labels, str) else []

    @property
    def inline_classes(self) -> list[str] | None:
        return self.labels if isinstance(self.labels, list) else None

    def class_misfit(self, size: int, entries: int) -> str | None:
        """A score map's classes are its channels (a one-channel map's two); a class map's are not told."""
        classes = (2 if size == 1 else size) if self.layout == "scores" else entries
        return None if entries == classes else f"{entries} labels for {classes} classes"
