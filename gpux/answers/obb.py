"""Oriented boxes (`boxes: {layout: yolov8_obb}`): ultralytics' OBB export, [batch, 4 + classes + 1, anchors] (cx,
cy, w, h in input pixels, class scores, the rotation in radians), decoded as ultralytics' OBB predictor does: the
best class's score over the threshold, the box regularized as `regularize_rboxes` does (w and h swapped where the
angle mod pi is at least pi/2, the angle then taken mod pi/2), and rotated NMS by probabilistic IoU
(`batch_probiou`: each box as a Gaussian, one minus their Hellinger distance), boxes of other classes apart.
Answered as {label, index, score, box: [cx, cy, w, h], angle, polygon: 4 corners} in the original's pixels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpux.answers import post
from gpux.answers.records import Box
from gpux.arrays import Array
from gpux.config.blocks import Boxes

if TYPE_CHECKING:
    from gpux.answers.decoding import Decoding

EPS = 1e-7


class OrientedBox(Box):
    """One oriented box (`decode`): its class and score, `box` its centre, width and height [cx, cy, w, h], its
    rotation in radians, and its 4 corners [x, y], in the original's pixels."""

    angle: float
    polygon: list[list[float]]


def covariance(boxes: Array) -> tuple[Array, Array, Array]:
    """Each [cx, cy, w, h, angle] box's covariance terms (a, b, c) as a Gaussian of its area."""
    import numpy as np

    a, b, t = boxes[:, 2] ** 2 / 12, boxes[:, 3] ** 2 / 12, boxes[:, 4]
    cos, sin = np.cos(t), np.sin(t)
    return a * cos ** 2 + b * sin ** 2, a * sin ** 2 + b * cos ** 2, (a - b) * cos * sin


def probiou(one: Array, two: Array) -> Array:
    """[N, M] probabilistic IoU of [N, 5] and [M, 5] boxes (ultralytics' batch_probiou)."""
    import numpy as np

    x1, y1 = one[:, 0:1], one[:, 1:2]
    x2, y2 = two[None, :, 0], two[None, :, 1]
    a1, b1, c1 = (v[:, None] for v in covariance(one))
    a2, b2, c2 = (v[None] for v in covariance(two))
    det = (a1 + a2) * (b1 + b2) - (c1 + c2) ** 2
    t1 = ((a1 + a2) * (y1 - y2) ** 2 + (b1 + b2) * (x1 - x2) ** 2) / (det + EPS) * 0.25
    t2 = ((c1 + c2) * (x2 - x1) * (y1 - y2)) / (det + EPS) * 0.5
    t3 = np.log(det / (4 * np.sqrt((a1 * b1 - c1 ** 2).clip(0) * (a2 * b2 - c2 ** 2).clip(0)) + EPS) + EPS) * 0.5
    distance = (t1 + t2 + t3).clip(EPS, 100.0)
    return 1 - np.sqrt(1.0 - np.exp(-distance) + EPS)


def rotated_nms(boxes: Array, scores: Array, classes: Array, iou: float) -> list[int]:
    """Indices kept, best first: ultralytics' nms_rotated (a box goes where any better box of its class overlaps it
    by probabilistic IoU at `iou` or more, that box kept or not)."""
    import numpy as np

    order = np.argsort(-scores, kind="stable")
    b = boxes[order].astype(np.float64)
    over = np.triu(probiou(b, b), 1) * (classes[order][:, None] == classes[order][None, :])
    return [int(order[i]) for i in np.flatnonzero((over >= iou).sum(axis=0) <= 0)]


def corners(boxes: Array) -> Array:
    """[N, 4, 2] corners of [N, 5] boxes (ultralytics' xywhr2xyxyxyxy order)."""
    import numpy as np

    c, s = np.cos(boxes[:, 4]), np.sin(boxes[:, 4])
    one = np.stack([boxes[:, 2] / 2 * c, boxes[:, 2] / 2 * s], axis=1)
    two = np.stack([-boxes[:, 3] / 2 * s, boxes[:, 3] / 2 * c], axis=1)
    centre = boxes[:, :2]
    return np.stack([centre + one + two, centre + one - two, centre - one - two, centre - one + two], axis=1)


def detections(row: Array, block: Boxes, activation: tuple[bool, bool]) -> tuple[Array, Array, Array]:
    """(boxes [N, 5] cx, cy, w, h, angle (regularized), scores [N], classes [N]) after rotated NMS, best first."""
    import numpy as np

    rows = np.asarray(row, np.float32)  # [4 + classes + 1, anchors]
    scores_all = post.activate(rows[4:-1], *activation, axis=0)
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(rows.shape[1])]
    keep = scores >= block.score
    cx, cy, w, h = rows[:4, keep].astype(np.float64)
    t = rows[-1, keep].astype(np.float64)
    swap = np.mod(t, math.pi) >= math.pi / 2
    boxes = np.stack([cx, cy, np.where(swap, h, w), np.where(swap, w, h), np.mod(t, math.pi / 2)], axis=1)
    scores, classes = scores[keep], classes[keep]
    kept = rotated_nms(boxes, scores, classes, block.iou)[:block.max] if len(scores) else []
    return boxes[kept], scores[kept], classes[kept]


def decode(row: Array, how: Decoding) -> list[OrientedBox]:
    """The oriented boxes mapped back through the image's Placement (`how`: an answers.decoding.Decoding), sizes by
    its scale (a letterbox keeps the aspect; a stretch's per-axis scale is exact only for upright boxes)."""
    boxes, scores, classes = detections(row, how.block_as(Boxes), how.activation)
    polygons = corners(boxes)
    if how.image is not None:
        p = how.image
        boxes = boxes.copy()
        boxes[:, 0], boxes[:, 1] = (boxes[:, 0] - p.offset_x) / p.scale_x, (boxes[:, 1] - p.offset_y) / p.scale_y
        boxes[:, 2], boxes[:, 3] = boxes[:, 2] / p.scale_x, boxes[:, 3] / p.scale_y
        polygons[..., 0] = (polygons[..., 0] - p.offset_x) / p.scale_x
        polygons[..., 1] = (polygons[..., 1] - p.offset_y) / p.scale_y
    out: list[OrientedBox] = []
    for b, poly, s, c in zip(boxes, polygons, scores, classes, strict=True):
        out.append({"label": post.label(how.labels, int(c)), "index": int(c), "score": round(float(s), 6),
                    "box": [round(float(v), 2) for v in b[:4]], "angle": round(float(b[4]), 6),
                    "polygon": [[round(float(x), 2), round(float(y), 2)] for x, y in poly]})
    return out


def judge(row: Array, how: Decoding) -> tuple[Array, Array, Array]:
    """(polygons [N, 4, 2] in input pixels, scores, classes), compared by rotated IoU."""
    boxes, scores, classes = detections(row, how.block_as(Boxes), how.activation)
    return corners(boxes), scores, classes
