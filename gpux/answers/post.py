"""Post-processing of one output row: activations, top-k classes, detector boxes (the layouts of
config.steps.BOX_LAYOUTS) with class-aware NMS, greedy CTC decoding.
Answers are plain lists and dicts (JSON as they are), typed by gpux.answers.records."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpux.answers.records import Box, Text, Top
from gpux.arrays import Array
from gpux.config.steps import BOX_LAYOUTS, Boxes

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def softmax(x: Array, axis: int = -1) -> Array:
    import numpy as np

    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: Array) -> Array:
    import numpy as np

    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def activate(x: ArrayLike, softmax_: bool, sigmoid_: bool, axis: int = -1) -> Array:
    import numpy as np

    x = np.asarray(x, np.float32)
    return softmax(x, axis) if softmax_ else sigmoid(x) if sigmoid_ else x


def label(labels: list[str] | None, index: int) -> str:
    return labels[index] if labels and index < len(labels) else str(index)


def topk(scores: ArrayLike, k: int, labels: list[str] | None) -> list[Top]:
    """The `k` best of a 1-D row of class scores, best first: [{label, index, score}]."""
    import numpy as np

    row = np.asarray(scores).reshape(-1)
    k = min(k, row.size)
    best = np.argpartition(-row, k - 1)[:k]
    best = best[np.argsort(-row[best], kind="stable")]
    return [{"label": label(labels, int(i)), "index": int(i), "score": float(row[i])} for i in best]


SMALL = 64  # up to this many boxes NMS runs in plain Python: there numpy's cost per call outweighs the arithmetic
BLOCK = 256  # up to this many, one IoU matrix; beyond, one vectorized IoU per kept box until this many are left


def nms(boxes: Array, scores: Array, iou: float, classes: Array | None = None) -> list[int]:
    """Indices of the boxes kept by greedy non-maximum suppression, best first: each kept box suppresses the rest
    (of its class, where `classes` are given) that overlap it by more than `iou`. Every path computes the same
    float64 arithmetic, so the answer does not depend on which one the number of boxes picks. Arrays in: boxes
    [N, 4] x1, y1, x2, y2, scores [N], classes [N]."""
    n = len(scores)
    labels = [0] * n if classes is None else classes.tolist()
    if n <= SMALL:  # box by box in Python (whose floats are float64 too), best first as argsort below
        kept: list[tuple[float, float, float, float, float, int, int]] = []  # x1, y1, x2, y2, area, class, index
        b = boxes.tolist()
        for i in sorted(range(n), key=scores.tolist().__getitem__, reverse=True):
            x1, y1, x2, y2 = b[i]
            a, c = max(0.0, x2 - x1) * max(0.0, y2 - y1), labels[i]
            for kx1, ky1, kx2, ky2, ka, kc, _ in kept:
                if kc == c and (w := min(x2, kx2) - max(x1, kx1)) > 0 and (h := min(y2, ky2) - max(y1, ky1)) > 0 \
                        and w * h > iou * (a + ka - w * h):
                    break
            else:
                kept.append((x1, y1, x2, y2, a, c, i))
        return [k[6] for k in kept]
    import numpy as np

    order = np.argsort(-np.asarray(scores), kind="stable")
    x1, y1, x2, y2 = np.asarray(boxes, np.float64)[order].T
    s = np.stack([x1, y1, x2, y2, (x2 - x1).clip(0) * (y2 - y1).clip(0), np.asarray(labels, np.float64)[order],
                  order])  # one row per field, best box first
    keep = []
    while s.shape[1] > BLOCK:
        bx1, by1, bx2, by2, area, label, index = s[:, 0].tolist()
        keep.append(int(index))
        r = s[:, 1:]
        w = np.minimum(r[2], bx2) - np.maximum(r[0], bx1)
        h = np.minimum(r[3], by2) - np.maximum(r[1], by1)
        inter = np.maximum(w, 0, out=w) * np.maximum(h, 0, out=h)
        s = r[:, (inter <= iou * (r[4] + area - inter)) | (r[5] != label)]
    return keep + _matrix(s, iou)


def _matrix(s: Array, iou: float) -> list[int]:
    """NMS of up to BLOCK boxes (rows x1, y1, x2, y2, area, class, index; best first): every pair's overlap at
    once, then one pass that keeps each box no kept box suppressed."""
    import numpy as np

    x1, y1, x2, y2, a, c, index = s
    w = np.minimum.outer(x2, x2) - np.maximum.outer(x1, x1)
    h = np.minimum.outer(y2, y2) - np.maximum.outer(y1, y1)
    inter = np.maximum(w, 0, out=w) * np.maximum(h, 0, out=h)
    over = (inter > iou * (np.add.outer(a, a) - inter)) & np.equal.outer(c, c)
    removed = np.zeros(len(a), bool)
    keep = []
    for i in range(len(a)):
        if not removed[i]:
            keep.append(int(index[i]))
            removed |= over[i]
    return keep


def anchor_grid(anchors: int, strides: tuple[int, ...], size: tuple[int, int] | None = None) -> Array:
    """[anchors, 3]: each anchor's cell x, y and its stride, the grid of each stride in turn (cells row-major) over
    an input of `size` (height, width; default: the square whose grids hold `anchors` cells). A ValueError says
    where the count does not fit."""
    import math

    import numpy as np

    if size is None:
        side = round(math.sqrt(anchors / sum(1 / s ** 2 for s in strides)))
        size = (side, side)
    cells = []
    for s in strides:
        ys, xs = np.mgrid[0:math.ceil(size[0] / s), 0:math.ceil(size[1] / s)]
        cells.append(np.stack([xs.ravel(), ys.ravel(), np.full(xs.size, s)], axis=1))
    grid = np.concatenate(cells).astype(np.float32)
    if len(grid) != anchors:
        raise ValueError(f"strides {list(strides)} over a {size[1]}x{size[0]} input make {len(grid)} cells, not the "
                         f"{anchors} anchors of the output")
    return grid


def decode_boxes(pred: ArrayLike, spec: Boxes, activation: tuple[bool, bool] = (False, False),
                 size: tuple[int, int] | None = None) -> tuple[Array, Array, Array]:
    """One output row in the declared layout (config.steps.BOX_LAYOUTS) → (boxes x1 y1 x2 y2 [N, 4], scores [N],
    classes [N]) at or above the score threshold after class-aware NMS, best first, at most spec.max. A raw grid
    is decoded over an input of `size` (height, width; default: the square its anchors make)."""
    import numpy as np

    layout = BOX_LAYOUTS[spec.layout]
    pred = np.asarray(pred, np.float32)
    rows = pred if layout.channels_axis == 1 else pred.T  # [channels, anchors]
    if layout.grid:
        grid = anchor_grid(rows.shape[1], tuple(spec.strides), size).T  # [3, anchors]: x, y, stride
        with np.errstate(over="ignore"):
            rows = np.concatenate([(rows[:2] + grid[:2]) * grid[2], np.exp(rows[2:4]) * grid[2], rows[4:]])
    scores_all = activate(rows[layout.coords:], *activation, axis=0)
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(rows.shape[1])]
    if layout.objectness:
        scores = scores * activate(rows[4], False, activation[1])
    keep = scores >= spec.score
    cx, cy, w, h = rows[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores, classes = scores[keep], classes[keep]
    kept = nms(boxes, scores, spec.iou, classes)[:spec.max]
    return boxes[kept], scores[kept], classes[kept]


def ctc_greedy(pred: ArrayLike, texts: list[str], blank: int, axis: int, activation: tuple[bool, bool]) -> Text:
    """Greedy CTC decoding of one row ([time, classes], or [classes, time] for axis 1): the best class per step,
    repeats collapsed, blanks dropped, each class's text joined. The score is the mean of the kept steps' best
    probability (PaddleOCR's confidence), 0 where no step is kept."""
    import numpy as np

    probs = activate(pred, *activation, axis=-1 if axis != 1 else 0)
    probs = probs.T if axis == 1 else probs
    best, p = probs.argmax(axis=1), probs.max(axis=1)
    kept = np.ones(best.shape, bool)
    kept[1:] = best[1:] != best[:-1]
    kept &= best != blank % probs.shape[1]
    text = "".join(texts[i] for i in best[kept])
    return {"text": text, "score": round(float(p[kept].astype(np.float64).mean()), 6) if kept.any() else 0.0}


def box_answers(boxes: Array, scores: Array, classes: Array, labels: list[str] | None) -> list[Box]:
    return [{"label": label(labels, int(c)), "index": int(c), "score": round(float(s), 6),
             "box": [round(float(v), 2) for v in b]} for b, s, c in zip(boxes, scores, classes, strict=True)]
