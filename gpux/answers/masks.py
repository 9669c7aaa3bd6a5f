"""Instance masks (`postprocess: {masks: {layout: yolov8_seg, protos: OUTPUT}}`): ultralytics' segment export, boxes
[batch, 4 + classes + coefficients, anchors] and prototype masks [batch, coefficients, mask height, mask width] in
another output (this step reads both). Decoded as its predictor does (process_mask): the boxes as boxes are, each
kept box's mask the sigmoid of its coefficients times the prototypes, zero outside its box, resized to the input
(bilinear), cut at `threshold`, then mapped back to the original image (the letterbox padding cut away, resized).
Answered with the mask as COCO's uncompressed run lengths (column-major, starting with a run of zeros)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.answers.records import Box
from gpux.arrays import Array
from gpux.config.blocks import Masks
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.documents import BoxAgreement
from gpux.errors import Problem
from gpux.model.tensor import Tensor


class RunLengths(TypedDict):
    """COCO's uncompressed RLE of a mask (`run_lengths`): its [height, width] and the lengths of its runs,
    column-major, starting with a run of zeros."""

    size: list[int]
    counts: list[int]


class Instance(Box):
    """One detected instance (`decode`): its box as boxes are answered, and its mask in the original's pixels."""

    mask: RunLengths


class MaskAgreement(BoxAgreement):
    """The boxes' agreement (`gpux.quality.pose.mask_agreement`), and the mean IoU of the masks of the matched
    detections (None: none matched)."""

    mean_mask_iou: float | None


def detections(row: Array, protos: Array, block: Masks, activation: tuple[bool, bool],
               size: tuple[int, int] | None) -> tuple[Array, Array, Array, Array]:
    """(boxes [N, 4], scores, classes, masks [N, H, W] bool at `size` (height, width; None: the prototypes'))."""
    import numpy as np
    from PIL import Image

    rows, protos = np.asarray(row, np.float32), np.asarray(protos, np.float32)
    k, mh, mw = protos.shape
    scores_all = post.activate(rows[4:rows.shape[0] - k], *activation, axis=0)
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(rows.shape[1])]
    keep = scores >= block.score
    cx, cy, w, h = rows[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    coefficients, scores, classes = rows[rows.shape[0] - k:, keep].T, scores[keep], classes[keep]
    kept = post.nms(boxes, scores, block.iou, classes)[:block.max]
    boxes, scores, classes, coefficients = boxes[kept], scores[kept], classes[kept], coefficients[kept]
    height, width = size if size is not None else (mh, mw)
    small = post.sigmoid(coefficients @ protos.reshape(k, -1)).reshape(-1, mh, mw)
    xs, ys = (np.arange(mw) + 0.5) * width / mw, (np.arange(mh) + 0.5) * height / mh  # cell centres, input pixels
    masks = np.zeros((len(boxes), height, width), bool)
    for i, (b, m) in enumerate(zip(boxes, small, strict=True)):
        inside = ((xs >= b[0]) & (xs < b[2]))[None, :] & ((ys >= b[1]) & (ys < b[3]))[:, None]
        grown = Image.fromarray((m * inside).astype(np.float32), "F").resize((width, height), Image.Resampling.BILINEAR)
        masks[i] = np.asarray(grown) >= block.threshold
    return boxes, scores, classes, masks


def run_lengths(mask: Array) -> RunLengths:
    """COCO's uncompressed RLE of a bool mask: its size [h, w] and the lengths of its runs, column-major, zeros
    first."""
    import numpy as np

    flat = np.asarray(mask, bool).reshape(-1, order="F").astype(np.int8)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flat, [1 - flat[-1] if len(flat) else 0]])))
    counts = np.diff(np.concatenate([[0], edges])).tolist()
    return {"size": list(mask.shape), "counts": [int(c) for c in counts]}


def from_run_lengths(rle: RunLengths) -> Array:
    """The bool mask of an uncompressed RLE."""
    import numpy as np

    values = np.repeat(np.arange(len(rle["counts"])) % 2, rle["counts"]).astype(bool)
    h, w = rle["size"]
    return values[:h * w].reshape((h, w), order="F")


def decode(row: Array, how: Decoding) -> list[Instance]:
    import numpy as np
    from PIL import Image

    block = how.block_as(Masks)
    boxes, scores, classes, found = detections(row, how.others[block.protos], block, how.activation, how.canvas)
    masks: Array | list[Array] = found  # [N, H, W] at the input's size, or each mask in the original's
    p = how.image
    if p is not None:
        boxes = p.to_original(boxes)
        left, top = round(p.offset_x), round(p.offset_y)
        cut = (left, top, left + round(p.width * p.scale_x), top + round(p.height * p.scale_y))
        masks = [np.asarray(Image.fromarray(m).crop(cut).resize((p.width, p.height), Image.Resampling.NEAREST))
                 for m in found]
    answers = post.box_answers(boxes, scores, classes, how.labels)
    return [{**a, "mask": run_lengths(m)} for a, m in zip(answers, masks, strict=True)]


def judge(row: Array, how: Decoding) -> tuple[Array, Array, Array, float, Array]:
    """(boxes, scores, classes, the confident score, masks at the input's size) for mask_agreement."""
    block = how.block_as(Masks)
    boxes, scores, classes, masks = detections(row, how.others[block.protos], block, how.activation, how.size)
    return boxes, scores, classes, max(0.5, block.score + 0.1), masks  # confident as a box is


def mask_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor,
               outputs: Mapping[str, Tensor] | None = None) -> list[Problem]:
    shape = real.shape
    if shape is None or len(shape) == 3:
        return []
    return [project.problem(("outputs", name, "postprocess", "masks"), "yolov8_seg boxes come as [batch, 4 + classes "
                            f"+ coefficients, anchors]; {name} is {list(shape)}")]
