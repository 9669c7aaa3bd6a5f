"""Heatmap keypoints (`postprocess: {keypoints: {layout: heatmap, points: N}}`): a top-down pose model's one
confidence map per keypoint, [batch, points, h, w] (HRNet, SimpleBaseline, ViTPose, SLEAP's confidence maps),
decoded as mmpose's MSRAHeatmap codec does: each map's highest cell, moved a quarter cell along each axis towards
its higher neighbour (mmpose's `refine_keypoints`, its edge rules too: x where 1 < x < w - 1 and y > 0, y where
1 < y < h - 1 and x > 0), scaled to the input (input size / map size per axis, as mmpose scales them), then
mapped back through the preprocess's resize, letterbox or crop to the original image's pixels; a point's score is
its peak's value (a peak of 0 or less keeps its place, where mmpose answers -1). Answered as
`{"keypoints": [[x, y, score], ...], "names": [...]}` (names where declared).

Verified in the input's pixels: the object keypoint similarity of each row (COCO's OKS over the points the
reference is confident of, the input's area as the object's, one k for every point), and the share of the
reference's confident points (peak >= CONFIDENT) the artifact puts within one map cell (counted: the evidence
bound applies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpux.answers import post
from gpux.answers.kinds import Decoding
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.model.tensor import Tensor

CONFIDENT = 0.5  # a reference point whose peak reaches this is judged (occluded points' maps are flat)
K = 0.1  # a point's spread as a share of the object's scale, as gpux.quality.pose's OKS
QUARTER = 0.25


def peaks(row: Any, activation: tuple[bool, bool]) -> Any:
    """[points, 3]: each map's peak x, y in map cells, refined by a quarter cell (mmpose's rule), and its value."""
    import numpy as np

    maps = post.activate(row, *activation, axis=0) if any(activation) else np.asarray(row, np.float32)
    n, h, w = maps.shape
    flat = maps.reshape(n, -1)
    best = flat.argmax(axis=1)
    y, x = np.divmod(best, w)
    points = np.arange(n)
    dx = np.where((x > 1) & (x < w - 1) & (y > 0), maps[points, y, np.minimum(x + 1, w - 1)] -
                  maps[points, y, x - 1], 0.0)
    dy = np.where((y > 1) & (y < h - 1) & (x > 0), maps[points, np.minimum(y + 1, h - 1), x] -
                  maps[points, y - 1, x], 0.0)
    return np.stack([x + QUARTER * np.sign(dx), y + QUARTER * np.sign(dy), flat[points, best]], axis=1)


def in_input(row: Any, how: Decoding, size: tuple[int, int] | None) -> Any:
    """The peaks in the input's pixels ((height, width) `size`; None: the map's own cells)."""
    import numpy as np

    found = peaks(row, how.activation).astype(np.float64)
    h, w = np.shape(row)[-2:]
    height, width = size or (h, w)
    found[:, 0] *= width / w
    found[:, 1] *= height / h
    return found


def decode(row: Any, how: Decoding) -> dict[str, Any]:
    found, p = in_input(row, how, how.canvas), how.placement
    if p is not None:
        found[:, 0] = ((found[:, 0] - p.offset_x) / p.scale_x).clip(0, p.width)
        found[:, 1] = ((found[:, 1] - p.offset_y) / p.scale_y).clip(0, p.height)
    answer: dict[str, Any] = {"keypoints": [[round(float(x), 2), round(float(y), 2), round(float(s), 4)]
                                            for x, y, s in found]}
    if how.block.names is not None:
        answer["names"] = list(how.block.names)
    return answer


def judge(row: Any, how: Decoding) -> tuple[Any, float, float]:
    """The points in the input's pixels, the input's area and one map cell's size (its longer side), in pixels."""
    h, w = row.shape[-2:]
    height, width = how.size or (h, w)
    return in_input(row, how, how.size), float(height * width), max(height / h, width / w)


def similarity(reference: Any, got: Any, area: float) -> float:
    """COCO's OKS of two [points, 3] arrays over the reference's confident points (all, where none is)."""
    import numpy as np

    seen = reference[:, 2] >= CONFIDENT
    seen = seen if seen.any() else np.ones(len(reference), bool)
    d2 = ((reference[:, :2] - got[:, :2]) ** 2).sum(axis=1)
    return float(np.exp(-d2 / (2 * max(area, 1.0) * K * K))[seen].mean())


def compare(reference: list[Any], got: list[Any]) -> dict[str, Any]:
    """Per row the OKS; over the reference's confident points, the share the artifact puts within a cell."""
    import numpy as np

    oks, distances, near = [], [], []
    for (r, area, cell), (g, _, _) in zip(reference, got, strict=True):
        oks.append(similarity(r, g, area))
        confident = r[:, 2] >= CONFIDENT
        d = np.sqrt(((r[:, :2] - g[:, :2]) ** 2).sum(axis=1))[confident]
        distances += d.tolist()
        near += (d <= cell + 1e-6).tolist()
    return {"rows": len(reference), "points": sum(len(r[0]) for r in reference), "confident_points": len(near),
            "points_close": sum(near) / len(near) if near else None, "mean_oks": sum(oks) / len(oks) if oks else 1.0,
            "mean_distance": float(np.mean(distances)) if distances else None}


def counts(record: dict[str, Any]) -> str:
    return (f"{record['rows']} rows, {record['confident_points']} of {record['points']} points with a peak >= "
            f"{CONFIDENT:g}")


def text(record: dict[str, Any]) -> str:
    close = record.get("points_close")
    return f"keypoint OKS {record['mean_oks']:.3f}" + (f", confident points within a cell {close:.1%} of "
                                                       f"{record['confident_points']}" if close is not None else "")


def lines(name: str, answer: dict[str, Any]) -> list[str]:
    names = answer.get("names") or [str(i) for i in range(len(answer["keypoints"]))]
    return [f"  {name}: {len(answer['keypoints'])} points"] + \
        [f"    {n} ({x:.1f}, {y:.1f}) {s:.3f}" for n, (x, y, s) in zip(names, answer["keypoints"], strict=True)]


def draw(canvas: Any, name: str, answer: dict[str, Any]) -> None:
    """The points whose peak reaches the block's score as dots, joined as its skeleton says."""
    from gpux.answers.draw import PALETTE

    block = canvas.blocks.get(name)
    least = getattr(block, "score", 0.0)
    points = answer["keypoints"]
    shown = [s >= least for _, _, s in points]
    for i, j in getattr(block, "skeleton", None) or ():
        if shown[i] and shown[j]:
            canvas.pen.line([tuple(points[i][:2]), tuple(points[j][:2])], fill=PALETTE[0], width=canvas.width)
    r = canvas.width + 1
    for k, ((x, y, _), seen) in enumerate(zip(points, shown, strict=True)):
        if seen:
            canvas.pen.ellipse((x - r, y - r, x + r, y + r), fill=PALETTE[(k + 1) % len(PALETTE)])


def shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Any]:
    """[batch, points, height, width], one map per declared point."""
    dims, points = real.shape, spec.block.points
    if dims is None or (len(dims) == 4 and (dims[1] == points or not isinstance(dims[1], int))):
        return []
    return [project.problem(("outputs", name, "postprocess", "keypoints"), f"heatmap keypoints come as [batch, "
                            f"{points} points, height, width], one map per point; {name} is {list(dims)}")]


COCO_POINTS = 17
STRIDE = 4  # HRNet's, SimpleBaseline's and ViTPose's maps are a quarter of the input's size


def propose(dims: tuple[Any, ...], inputs: list[Any], outputs: Sequence[Any] = ()) -> str | None:
    """[batch, 17, H / 4, W / 4] of a fixed-size image input: COCO's keypoints as the top-down models give them."""
    if len(dims) != 4 or dims[1] != COCO_POINTS or not all(isinstance(d, int) for d in dims[2:]):
        return None
    if not any(t.shape is not None and len(t.shape) == 4 and tuple(t.shape[2:]) == (dims[2] * STRIDE,
                                                                                     dims[3] * STRIDE)
               for t in inputs):
        return None
    return (f"postprocess: {{keypoints: {{layout: heatmap, points: {COCO_POINTS}}}}}: {COCO_POINTS} maps a quarter "
            "of the input's size are COCO's keypoints as HRNet and ViTPose give them")
