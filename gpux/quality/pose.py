"""Pose detections and instance masks compared (the keypoints and masks kinds' `compare`): the boxes as boxes are
(quality.agreement); the keypoints of each matched pair by their object keypoint similarity (OKS, COCO's:
exp(-d^2 / (2 s^2 k^2)) over the points the reference sees, s^2 the reference box's area, one k for every point),
the masks by their IoU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from gpux.answers.decoding import Decoding
from gpux.answers.keypoints import PoseAgreement, detections
from gpux.answers.masks import MaskAgreement
from gpux.arrays import Array
from gpux.config.blocks import Keypoints
from gpux.quality.agreement import box_agreement, confident_score, match

K = 0.1  # a point's spread as a share of the object's scale (COCO's sigmas x 2 run 0.05-0.21)
SEEN = 0.5  # a reference point counts where its visibility is at least this (every point without visibility)

# One row's detections as the comparisons take them (`judge_pose`, gpux.answers.masks.judge): boxes [N, 4], scores,
# classes, the score from which one is confident, and keypoints [N, points, dims] or masks [N, H, W].
Judged: TypeAlias = "tuple[Array, Array, Array, float, Array]"


def judge_pose(row: Array, how: Decoding) -> Judged:
    """The detections in the input's pixels as keypoint_agreement takes them: boxes, scores, classes, the score
    from which one is confident, keypoints."""
    block = how.block_as(Keypoints)
    boxes, scores, classes, points = detections(row, block, how.activation)
    return boxes, scores, classes, confident_score(block.score), points


def oks(reference: Array, got: Array, box: Array | Sequence[float]) -> float:
    """The object keypoint similarity of two [points, dims] arrays on the reference's box [x1, y1, x2, y2]."""
    import numpy as np

    ref, out = np.asarray(reference, np.float64), np.asarray(got, np.float64)
    seen = ref[:, 2] >= SEEN if ref.shape[1] > 2 else np.ones(len(ref), bool)
    area = max(float((box[2] - box[0]) * (box[3] - box[1])), 1.0)
    d2 = ((ref[:, :2] - out[:, :2]) ** 2).sum(axis=1)
    return float(np.exp(-d2 / (2 * area * K * K))[seen].mean()) if seen.any() else 1.0


def keypoint_agreement(reference: list[Judged], got: list[Judged]) -> PoseAgreement:
    """The boxes' agreement, and `mean_oks`: the mean OKS of the keypoints of the matched detections (None: none
    matched)."""
    boxes = box_agreement(reference, got)
    similar = [oks(r[4][j], g[4][i], r[0][j]) for r, g in zip(reference, got, strict=True)
               for i, j, _ in match(r, g)]
    return {**boxes, "mean_oks": sum(similar) / len(similar) if similar else None}


def mask_agreement(reference: list[Judged], got: list[Judged]) -> MaskAgreement:
    """The boxes' agreement, and `mean_mask_iou`: the mean IoU of the masks of the matched detections (None: none
    matched)."""
    import numpy as np

    boxes = box_agreement(reference, got)
    ious = []
    for r, g in zip(reference, got, strict=True):
        for i, j, _ in match(r, g):
            a, b = np.asarray(r[4][j], bool), np.asarray(g[4][i], bool)
            union = int((a | b).sum())
            ious.append(float((a & b).sum()) / union if union else 1.0)
    return {**boxes, "mean_mask_iou": sum(ious) / len(ious) if ious else None}
