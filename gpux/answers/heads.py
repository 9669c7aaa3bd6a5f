"""Detector boxes read from one output per stride (`boxes: {layout: picodet | yolov5_heads, heads: [...]}`): the
step reads every output its block names (gpux.config.blocks.Boxes.reads) and decodes each level over its own grid.

- picodet (PP-PicoDet exported without its NMS, as PaddleDetection's PicoHead gives it): per stride, class scores
  [batch, cells, classes] and box distributions [batch, cells, 4 x (reg_max + 1)], cells row-major over the input
  (its height and width over the stride, rounded up). Each side of a box (left, top, right, bottom from the cell's
  centre ((x + 0.5) x stride, (y + 0.5) x stride)) is the expectation of a softmax over its reg_max + 1 bins, times
  the stride (distribution focal loss). Every class at or over the score threshold is a candidate, as
  PaddleDetection's multiclass NMS takes them, then class-aware NMS.
- yolov5_heads (YOLOv5's Detect layer before its decoding): per stride [batch, anchors, height, width, 5 +
  classes] logits; sigmoid, then xy = (2 s - 0.5 + cell) x stride, wh = (2 s)^2 x anchor (input pixels), the score
  objectness x the best class, as Detect and its NMS do."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpux.answers import post
from gpux.answers.records import Box
from gpux.arrays import Array
from gpux.config.blocks import Boxes
from gpux.model.heads import cells

if TYPE_CHECKING:
    from gpux.answers.decoding import Decoding


def grid_size(counts: Sequence[int], strides: Sequence[int]) -> tuple[int, int]:
    """The input (height, width) whose grids make `counts` cells at `strides`: the most nearly square one whose
    finest grid divides the first count (where no input size is told). A ValueError says where none does."""
    first, stride = counts[0], strides[0]
    pairs = [(h, first // h) for h in range(1, first + 1) if first % h == 0]
    fit = [(h * stride, w * stride) for h, w in pairs
           if all(math.prod(cells((h * stride, w * stride), s)) == n for n, s in zip(counts, strides, strict=True))]
    if not fit:
        raise ValueError(f"no input size makes {list(counts)} cells at strides {list(strides)}")
    return min(fit, key=lambda hw: abs(math.log(hw[0] / hw[1])))


def centres(size: tuple[int, int], stride: int) -> Array:
    """[cells, 2]: each cell's centre x, y in input pixels, row-major."""
    import numpy as np

    rows, columns = cells(size, stride)
    ys, xs = np.mgrid[0:rows, 0:columns]
    return (np.stack([xs.ravel(), ys.ravel()], axis=1).astype(np.float32) + 0.5) * stride


def levels(row: Array, how: Decoding, names: Sequence[str]) -> list[Array]:
    """The row of each named output (the declaring output's is `row`, the others come in `how.others`: `how` is
    a gpux.answers.decoding.Decoding)."""
    import numpy as np

    return [np.asarray(how.others.get(n, row), np.float32) for n in names]


def picodet(scores: Sequence[Array], distributions: Sequence[Array], strides: Sequence[int],
            size: tuple[int, int] | None, activation: tuple[bool, bool], threshold: float
            ) -> tuple[Array, Array, Array]:
    """The candidates, the levels in turn: every (cell, class) whose score is at `threshold` or over, with the cell's
    box (x1, y1, x2, y2, input pixels; decoded for those cells only): (boxes [N, 4], scores [N], classes [N])."""
    import numpy as np

    size = size or grid_size([len(s) for s in scores], strides)
    boxes, kept, classes = [], [], []
    for s, d, stride in zip(scores, distributions, strides, strict=True):
        bins = d.shape[-1] // 4
        if len(d) != math.prod(cells(size, stride)) or bins * 4 != d.shape[-1] or len(s) != len(d):
            raise ValueError(f"a {size[1]}x{size[0]} input at stride {stride} makes {math.prod(cells(size, stride))} "
                             f"cells of 4 x bins, not {list(d.shape)}")
        probabilities = post.activate(s, *activation)
        cell, label = np.nonzero(probabilities >= threshold)  # every class over the threshold (multiclass NMS)
        sides = (post.softmax(d[cell].reshape(-1, 4, bins), axis=-1) @ np.arange(bins, dtype=np.float32)) * stride
        c = centres(size, stride)[cell]
        boxes.append(np.concatenate([c - sides[:, :2], c + sides[:, 2:]], axis=1))
        kept.append(probabilities[cell, label])
        classes.append(label)
    return np.concatenate(boxes), np.concatenate(kept), np.concatenate(classes)


def yolov5(heads: Sequence[Array], strides: Sequence[int], anchors: Sequence[Sequence[float]]) -> tuple[Array, Array]:
    """Every anchor's box (x1, y1, x2, y2 [N, 4], input pixels) and its scores, objectness x class [N, classes]."""
    import numpy as np

    boxes, scores = [], []
    for h, stride, a in zip(heads, strides, anchors, strict=True):
        y = post.sigmoid(h)  # [anchors, rows, columns, 5 + classes]
        na, rows, columns = y.shape[:3]
        ys, xs = np.mgrid[0:rows, 0:columns]
        cell = np.stack([xs, ys], axis=-1)[None].astype(np.float32) - 0.5
        xy = (y[..., :2] * 2 + cell) * stride
        wh = (y[..., 2:4] * 2) ** 2 * np.asarray(a, np.float32).reshape(na, 1, 1, 2)
        boxes.append(np.concatenate([xy - wh / 2, xy + wh / 2], axis=-1).reshape(-1, 4))
        scores.append((y[..., 5:] * y[..., 4:5]).reshape(-1, y.shape[-1] - 5))
    return np.concatenate(boxes), np.concatenate(scores)


def detections(row: Array, how: Decoding, size: tuple[int, int] | None) -> tuple[Array, Array, Array]:
    """(boxes [N, 4], scores, classes) in input pixels after the threshold and class-aware NMS, best first."""
    import numpy as np

    block = how.block_as(Boxes)  # a heads layout names its heads (and picodet its distributions): Boxes checks it
    heads = levels(row, how, block.heads or ())
    if block.layout == "picodet":
        boxes, scores, classes = picodet(heads, levels(row, how, block.distributions or ()), block.strides, size,
                                         how.activation, block.score)
    else:
        boxes, every = yolov5(heads, block.strides, block.levels_anchors)
        classes = every.argmax(axis=1)
        scores = every[np.arange(len(every)), classes]
        keep = scores >= block.score
        boxes, scores, classes = boxes[keep], scores[keep], classes[keep]
    kept = post.nms(boxes, scores, block.iou, classes)[:block.max]
    return boxes[kept], scores[kept], classes[kept]


def decode(row: Array, how: Decoding) -> list[Box]:
    boxes, scores, classes = detections(row, how, how.canvas)
    boxes = how.image.to_original(boxes) if how.image is not None else boxes
    return post.box_answers(boxes, scores, classes, how.labels)


def judge(row: Array, how: Decoding) -> tuple[Array, Array, Array]:
    return detections(row, how, how.size)
