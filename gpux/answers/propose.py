"""What `gpux init` proposes for an output whose shape matches a kind's layout (each kind's `propose` step, named by
gpux.config.kinds): the postprocess to declare, and why, in one comment; None where the shape says nothing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpux.model.tensor import Dim, Tensor

PERSON_POINTS = 4 + 1 + 17 * 3  # ultralytics' COCO pose export: one class, 17 points of x, y, visibility


def _spatial(inputs: Sequence[Tensor]) -> list[tuple[Dim, Dim]]:
    """The (height, width) dims of each 4-D input, read as [batch, C, H, W]."""
    return [(t.shape[2], t.shape[3]) for t in inputs if t.shape is not None and len(t.shape) == 4]


def boxes(shape: tuple[Dim, ...], inputs: Sequence[Tensor], outputs: Sequence[Tensor] = ()) -> str | None:
    """[batch, 4 + classes, anchors], many more anchors than channels: ultralytics' detect export; or the first of
    one output (pair) per stride over a fixed input size: PicoDet's, YOLOv5's heads."""
    heads = per_stride(shape, inputs, outputs)
    if heads:
        return heads
    if len(shape) == 3 and isinstance(shape[1], int) and isinstance(shape[2], int) and 5 <= shape[1] < shape[2] \
            and shape[2] >= 100 and shape[1] != PERSON_POINTS:
        return (f"postprocess: {{boxes: {{layout: yolov8}}}}: [batch, 4 + {shape[1] - 4} classes, {shape[2]} anchors] "
                "is ultralytics' detect layout")
    return None


def keypoints(shape: tuple[Dim, ...], inputs: Sequence[Tensor], outputs: Sequence[Tensor] = ()) -> str | None:
    """[batch, 56, anchors]: ultralytics' person pose export (4 + 1 class + 17 x 3)."""
    if len(shape) == 3 and shape[1] == PERSON_POINTS and isinstance(shape[2], int) and shape[2] >= 100:
        return (f"postprocess: {{keypoints: {{points: 17, dims: 3}}}}: [batch, 56, {shape[2]} anchors] is ultralytics' "
                "pose layout (4 + 1 class + 17 points x 3)")
    return None


def text_boxes(shape: tuple[Dim, ...], inputs: Sequence[Tensor], outputs: Sequence[Tensor] = ()) -> str | None:
    """[batch, 1, H, W] with the H, W of an image input (each the same size, or dynamic in both): a DB text
    detector's probability map."""
    def same(a: Dim, b: Dim) -> bool:
        return a == b or (not isinstance(a, int) and not isinstance(b, int))

    if len(shape) == 4 and shape[1] == 1 and any(same(shape[2], h) and same(shape[3], w) for h, w in _spatial(inputs)):
        return ("postprocess: {text_boxes: {}}: a one-channel map the size of the input is a DB text detector's "
                "probability map")
    return None


def per_stride(shape: tuple[Dim, ...], inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> str | None:
    """For the stride-8 output of a detector with one output (pair) per stride over an input of fixed size: PicoDet's
    class scores [batch, cells, classes] and box distributions [batch, cells, 4 x bins] (classes told apart from 4 x
    bins), or YOLOv5's Detect heads [batch, 3, H / stride, W / stride, 5 + classes]."""
    sizes = [(h, w) for h, w in _spatial(inputs) if isinstance(h, int) and isinstance(w, int)]
    shapes = {t.name: tuple(t.shape) for t in outputs if t.shape is not None}
    if len(sizes) != 1 or tuple(shape) not in shapes.values():
        return None
    (h, w), = sizes
    for strides in ((8, 16, 32, 64), (8, 16, 32)):
        grids = [(math.ceil(h / s), math.ceil(w / s)) for s in strides]
        v5 = [[n for n, d in shapes.items() if len(d) == 5 and d[1] == 3 and tuple(d[2:4]) == g and
               isinstance(d[4], int) and d[4] > 5] for g in grids]
        if len(strides) == 3 and all(len(v) == 1 for v in v5) and tuple(shape) == shapes[v5[0][0]] and \
                isinstance(shape[4], int):  # (an int: the shape is a head's)
            return (f"postprocess: {{boxes: {{layout: yolov5_heads, heads: [{', '.join(v[0] for v in v5)}]}}}}: "
                    f"[batch, 3, H, W, 5 + {shape[4] - 5} classes] at strides 8, 16, 32 over the {w}x{h} input are "
                    "YOLOv5's Detect heads")
        pico = _picodet(shape, shapes, [gh * gw for gh, gw in grids])
        if pico:
            return (f"postprocess: {{boxes: {{layout: picodet, heads: [{', '.join(pico[0])}], distributions: "
                    f"[{', '.join(pico[1])}]{'' if len(strides) == 4 else ', strides: [8, 16, 32]'}}}}}: class scores "
                    f"and box distributions per stride ({', '.join(map(str, strides))}) over the {w}x{h} input are "
                    "PP-PicoDet's heads")
    return None


def _picodet(shape: tuple[Dim, ...], shapes: Mapping[str, tuple[Dim, ...]], counts: list[int]
             ) -> tuple[list[str], list[str]] | None:
    """(scores, distributions) per stride where each stride's cells hold exactly one of each, told apart (the
    classes are not 4 x bins), and `shape` is the first stride's scores."""
    levels = [[(n, d[2]) for n, d in shapes.items() if len(d) == 3 and d[1] == c and isinstance(d[2], int)]
              for c in counts]
    if not all(len(level) == 2 for level in levels):
        return None
    last = {d for level in levels for _, d in level}
    classes = [d for d in last if d % 4 or d < 8]
    if len(last) != 2 or len(classes) != 1:
        return None
    scores = [next(n for n, d in level if d == classes[0]) for level in levels]
    boxes = [next(n for n, d in level if d != classes[0]) for level in levels]
    return (scores, boxes) if tuple(shape) == shapes[scores[0]] else None
