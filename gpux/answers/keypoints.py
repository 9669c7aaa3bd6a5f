"""Pose detections (`postprocess: {keypoints: ...}`): ultralytics' yolov8_pose layout, [batch, 4 + classes +
points x dims, anchors], decoded as boxes are (the best class's score, the threshold, class-aware NMS), each kept
detection with its keypoints [x, y(, visibility)], mapped back with the box to the original image's pixels."""

from __future__ import annotations

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.answers.records import Box
from gpux.arrays import Array
from gpux.config.blocks import Keypoints
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.documents import BoxAgreement
from gpux.errors import Problem
from gpux.model.tensor import Tensor


class Pose(Box):
    """One pose detection (`decode`): its box as boxes are answered, and its keypoints, each [x, y] or [x, y,
    visibility], in the original's pixels."""

    keypoints: list[list[float]]


class PoseAgreement(BoxAgreement):
    """The boxes' agreement (`gpux.quality.pose.keypoint_agreement`), and the mean OKS of the keypoints of the
    matched detections (None: none matched)."""

    mean_oks: float | None


def detections(row: Array, block: Keypoints, activation: tuple[bool, bool]) -> tuple[Array, Array, Array, Array]:
    """(boxes x1 y1 x2 y2 [N, 4], scores [N], classes [N], keypoints [N, points, dims]) after NMS, best first."""
    import numpy as np

    rows = np.asarray(row, np.float32)  # [channels, anchors]
    classes_end = rows.shape[0] - block.points * block.dims
    scores_all = post.activate(rows[4:classes_end], *activation, axis=0)
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(rows.shape[1])]
    keep = scores >= block.score
    cx, cy, w, h = rows[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    points = rows[classes_end:, keep].reshape(block.points, block.dims, -1).transpose(2, 0, 1)
    scores, classes = scores[keep], classes[keep]
    kept = post.nms(boxes, scores, block.iou, classes)[:block.max]
    return boxes[kept], scores[kept], classes[kept], points[kept]


def decode(row: Array, how: Decoding) -> list[Pose]:
    import numpy as np

    boxes, scores, classes, points = detections(row, how.block_as(Keypoints), how.activation)
    p = how.image
    if p is not None:
        boxes = p.to_original(boxes)
        points = points.astype(np.float64)
        points[..., 0] = ((points[..., 0] - p.offset_x) / p.scale_x).clip(0, p.width)
        points[..., 1] = ((points[..., 1] - p.offset_y) / p.scale_y).clip(0, p.height)
    answers = post.box_answers(boxes, scores, classes, how.labels)
    return [{**a, "keypoints": [[round(float(v), 2 if i < 2 else 4) for i, v in enumerate(k)] for k in kp]}
            for a, kp in zip(answers, points, strict=True)]


def pose_shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor
               ) -> list[Problem]:
    """[batch, 4 + classes + points x dims, anchors], with at least one class; labels against the classes."""
    from gpux.answers.shapes import label_problems

    block, shape = spec.keypoints, real.shape
    assert block is not None
    if shape is None:
        return []
    channels = shape[1] if len(shape) == 3 else None
    if len(shape) != 3 or (isinstance(channels, int) and channels < block.extra + 1):
        return [project.problem(("outputs", name, "postprocess", "keypoints"),
                                f"yolov8_pose detections come as [batch, 4 + classes + {block.points} x {block.dims}, "
                                f"anchors]; {name} is {list(shape)}")]
    return label_problems(project, name, spec, labels, real, f", less 4 box coordinates and {block.points} x "
                          f"{block.dims} keypoint values,")
