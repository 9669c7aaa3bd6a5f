"""What `gpux init` proposes for an output whose shape matches a kind's layout (each kind's `propose` step, named by
gpux.config.kinds): the postprocess to declare, and why, in one comment; None where the shape says nothing."""

from __future__ import annotations

from typing import Any

PERSON_POINTS = 4 + 1 + 17 * 3  # ultralytics' COCO pose export: one class, 17 points of x, y, visibility


def _spatial(inputs: list[Any]) -> list[tuple[Any, Any]]:
    """The (height, width) dims of each 4-D input, read as [batch, C, H, W]."""
    return [tuple(t.shape[2:]) for t in inputs if t.shape is not None and len(t.shape) == 4]


def boxes(shape: tuple[Any, ...], inputs: list[Any]) -> str | None:
    """[batch, 4 + classes, anchors], many more anchors than channels: ultralytics' detect export."""
    if len(shape) == 3 and all(isinstance(d, int) for d in shape[1:]) and 5 <= shape[1] < shape[2] and \
            shape[2] >= 100 and shape[1] != PERSON_POINTS:
        return (f"postprocess: {{boxes: {{layout: yolov8}}}}: [batch, 4 + {shape[1] - 4} classes, {shape[2]} anchors] "
                "is ultralytics' detect layout")
    return None


def keypoints(shape: tuple[Any, ...], inputs: list[Any]) -> str | None:
    """[batch, 56, anchors]: ultralytics' person pose export (4 + 1 class + 17 x 3)."""
    if len(shape) == 3 and shape[1] == PERSON_POINTS and isinstance(shape[2], int) and shape[2] >= 100:
        return (f"postprocess: {{keypoints: {{points: 17, dims: 3}}}}: [batch, 56, {shape[2]} anchors] is ultralytics' "
                "pose layout (4 + 1 class + 17 points x 3)")
    return None


def text_boxes(shape: tuple[Any, ...], inputs: list[Any]) -> str | None:
    """[batch, 1, H, W] with the H, W of an image input (each the same size, or dynamic in both): a DB text
    detector's probability map."""
    def same(a: Any, b: Any) -> bool:
        return a == b or (not isinstance(a, int) and not isinstance(b, int))

    if len(shape) == 4 and shape[1] == 1 and any(same(shape[2], h) and same(shape[3], w) for h, w in _spatial(inputs)):
        return ("postprocess: {text_boxes: {}}: a one-channel map the size of the input is a DB text detector's "
                "probability map")
    return None
