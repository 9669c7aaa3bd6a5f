"""Class-aware NMS (gpux/answers/post.py): whichever path the number of boxes picks (plain Python, one IoU matrix, one
IoU per kept box), the boxes kept are those of the textbook greedy algorithm, in the same order."""

from __future__ import annotations

import numpy as np
import pytest

from gpux.answers import post


def greedy(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray, iou: float) -> list[int]:
    """The textbook algorithm, pair by pair: best first, a box is kept unless a kept box of its class overlaps it by
    more than `iou`."""
    keep: list[int] = []
    xs = boxes.tolist()
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        a = xs[i]
        for j in keep:
            b = xs[j]
            w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
            h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            union = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
            if classes[i] == classes[j] and w * h > iou * (union - w * h):
                break
        else:
            keep.append(i)
    return keep


def clusters(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Boxes jittered around n / 6 objects (some degenerate, some far outside the image), 3 classes, tied scores."""
    rng = np.random.default_rng(seed)
    objects = max(1, n // 6)
    of = rng.integers(0, objects, n)
    centre = rng.uniform(-20, 340, (objects, 2))[of] + rng.normal(0, 5, (n, 2))
    half = rng.uniform(0, 60, (objects, 2))[of] * rng.uniform(0.7, 1.3, (n, 2))
    half[::17] = 0  # zero-area boxes
    scores = np.round(rng.uniform(0, 1, n), 1).astype(np.float32)  # ties: the first of equal scores goes first
    return np.concatenate([centre - half, centre + half], 1).astype(np.float32), scores, rng.integers(0, 3, n)


@pytest.mark.parametrize("n", [0, 1, 7, post.SMALL, post.SMALL + 1, post.BLOCK, post.BLOCK + 1, 3 * post.BLOCK])
def test_every_path_keeps_what_the_greedy_algorithm_keeps(n: int) -> None:
    for seed in range(3):
        boxes, scores, classes = clusters(n, seed)
        for iou in (0.3, 0.7):
            want = greedy(boxes, scores, classes, iou)
            assert post.nms(boxes, scores, iou, classes) == want, (n, seed, iou)
        assert post.nms(boxes, scores, 0.5) == greedy(boxes, scores, np.zeros(n, int), 0.5)


def test_boxes_of_other_classes_never_suppress_even_where_they_coincide() -> None:
    boxes = np.array([[-5, -5, 300, 300], [-5, -5, 300, 300], [0, 0, 10, 10]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    assert post.nms(boxes, scores, 0.45, np.array([0, 1, 1])) == [0, 1, 2]
    assert post.nms(boxes, scores, 0.45) == [0, 2]
