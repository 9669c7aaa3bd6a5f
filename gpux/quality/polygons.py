"""Overlap of convex polygons (text regions' and oriented boxes' 4 corners): clipped one by the other
(Sutherland-Hodgman), their IoU, and every pair's where their bounds overlap."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _overlap(a: Any, b: Any) -> Any:
    """The area every [x1, y1, x2, y2] in `a` shares with every one in `b`."""
    import numpy as np

    w = (np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])).clip(0)
    h = (np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])).clip(0)
    return w * h


def clip_convex(subject: list[Any], clip: list[Any]) -> list[Any]:
    """The part of convex polygon `subject` inside convex polygon `clip` (both counter-clockwise or both clockwise;
    Sutherland-Hodgman)."""
    def side(p: Any, a: Any, b: Any) -> float:
        return float((b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0]))

    sign = 1.0 if area(clip) >= 0 else -1.0
    out = subject
    for a, b in zip(clip, clip[1:] + clip[:1], strict=True):
        if not out:
            break
        inside, out = out, []
        for p, q in zip(inside, inside[1:] + inside[:1], strict=True):
            sp, sq = sign * side(p, a, b), sign * side(q, a, b)
            if sp >= 0:
                out.append(p)
            if (sp >= 0) != (sq >= 0):
                t = sp / (sp - sq)
                out.append((p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])))
    return out


def area(polygon: Sequence[Any]) -> float:
    """The signed area of a polygon (positive counter-clockwise in x-right, y-up axes)."""
    return sum(float(p[0]) * float(q[1]) - float(q[0]) * float(p[1])
               for p, q in zip(polygon, [*polygon[1:], *polygon[:1]], strict=True)) / 2


def polygon_iou(a: Any, b: Any) -> float:
    """IoU of two convex polygons (a text region's 4 corners)."""
    pa, pb = [tuple(map(float, p)) for p in a], [tuple(map(float, p)) for p in b]
    if area(pa) * area(pb) < 0:
        pb = pb[::-1]
    inter = abs(area(clip_convex(pa, pb))) if len(pa) > 2 and len(pb) > 2 else 0.0
    union = abs(area(pa)) + abs(area(pb)) - inter
    return inter / union if union > 0 else 0.0


def pairwise_polygon_iou(a: Any, b: Any) -> Any:
    """IoU of every polygon in `a` [N, K, 2] with every one in `b` [M, K, 2], where their bounds overlap: [N, M]."""
    import numpy as np

    a, b = np.asarray(a, np.float64).reshape(-1, 4, 2), np.asarray(b, np.float64).reshape(-1, 4, 2)
    bounds = _overlap(np.concatenate([a.min(1), a.max(1)], 1), np.concatenate([b.min(1), b.max(1)], 1)) > 0
    out = np.zeros((len(a), len(b)))
    for i, j in zip(*np.nonzero(bounds), strict=True):
        out[i, j] = polygon_iou(a[i], b[j])
    return out

__all__ = ["area", "clip_convex", "pairwise_polygon_iou", "polygon_iou"]
