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
from typing import TYPE_CHECKING, NotRequired, TypeAlias, TypedDict

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.arrays import Array
from gpux.config.blocks import Keypoints
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.errors import Problem
from gpux.model.tensor import Dim, Tensor

if TYPE_CHECKING:
    from gpux.answers.draw import Canvas

CONFIDENT = 0.5  # a reference point whose peak reaches this is judged (occluded points' maps are flat)
K = 0.1  # a point's spread as a share of the object's scale, as gpux.quality.pose's OKS
QUARTER = 0.25


class HeatmapKeypoints(TypedDict):
    """A heatmap model's points (`decode`): each [x, y, score] in the original's pixels, in the block's order, and
    their names where the block declares them."""

    keypoints: list[list[float]]
    names: NotRequired[list[str]]


class HeatmapAgreement(TypedDict):
    """The artifact's points against the reference's (`compare`), over every row: the mean OKS, and over the
    reference's confident points the share within a map cell (None: none is confident) and the mean distance."""

    rows: int
    points: int
    confident_points: int
    points_close: float | None
    mean_oks: float
    mean_distance: float | None


# One row as `compare` takes it (`judge`): its points in the input's pixels, the input's area, one cell's size.
Judged: TypeAlias = "tuple[Array, float, float]"


def peaks(row: Array, activation: tuple[bool, bool]) -> Array:
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


def in_input(row: Array, how: Decoding, size: tuple[int, int] | None) -> Array:
    """The peaks in the input's pixels ((height, width) `size`; None: the map's own cells)."""
    import numpy as np

    found = peaks(row, how.activation).astype(np.float64)
    h, w = np.shape(row)[-2:]
    height, width = size or (h, w)
    found[:, 0] *= width / w
    found[:, 1] *= height / h
    return found


def decode(row: Array, how: Decoding) -> HeatmapKeypoints:
    found, p, block = in_input(row, how, how.canvas), how.image, how.block_as(Keypoints)
    if p is not None:
        found[:, 0] = ((found[:, 0] - p.offset_x) / p.scale_x).clip(0, p.width)
        found[:, 1] = ((found[:, 1] - p.offset_y) / p.scale_y).clip(0, p.height)
    answer: HeatmapKeypoints = {"keypoints": [[round(float(x), 2), round(float(y), 2), round(float(s), 4)]
                                              for x, y, s in found]}
    if block.names is not None:
        answer["names"] = list(block.names)
    return answer


def judge(row: Array, how: Decoding) -> Judged:
    """The points in the input's pixels, the input's area and one map cell's size (its longer side), in pixels."""
    h, w = row.shape[-2:]
    height, width = how.size or (h, w)
    return in_input(row, how, how.size), float(height * width), max(height / h, width / w)


def similarity(reference: Array, got: Array, area: float) -> float:
    """COCO's OKS of two [points, 3] arrays over the reference's confident points (all, where none is)."""
    import numpy as np

    seen = reference[:, 2] >= CONFIDENT
    seen = seen if seen.any() else np.ones(len(reference), bool)
    d2 = ((reference[:, :2] - got[:, :2]) ** 2).sum(axis=1)
    return float(np.exp(-d2 / (2 * max(area, 1.0) * K * K))[seen].mean())


def compare(reference: list[Judged], got: list[Judged]) -> HeatmapAgreement:
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


def counts(record: HeatmapAgreement) -> str:
    return (f"{record['rows']} rows, {record['confident_points']} of {record['points']} points with a peak >= "
            f"{CONFIDENT:g}")


def text(record: HeatmapAgreement) -> str:
    close = record.get("points_close")
    return f"keypoint OKS {record['mean_oks']:.3f}" + (f", confident points within a cell {close:.1%} of "
                                                       f"{record['confident_points']}" if close is not None else "")


def lines(name: str, answer: HeatmapKeypoints) -> list[str]:
    names = answer.get("names") or [str(i) for i in range(len(answer["keypoints"]))]
    return [f"  {name}: {len(answer['keypoints'])} points"] + \
        [f"    {n} ({x:.1f}, {y:.1f}) {s:.3f}" for n, (x, y, s) in zip(names, answer["keypoints"], strict=True)]


def draw(canvas: Canvas, name: str, answer: HeatmapKeypoints) -> None:
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


def shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    """[batch, points, height, width], one map per declared point."""
    assert spec.keypoints is not None
    dims, points = real.shape, spec.keypoints.points
    if dims is None or (len(dims) == 4 and (dims[1] == points or not isinstance(dims[1], int))):
        return []
    return [project.problem(("outputs", name, "postprocess", "keypoints"), f"heatmap keypoints come as [batch, "
                            f"{points} points, height, width], one map per point; {name} is {list(dims)}")]


COCO_POINTS = 17
STRIDE = 4  # HRNet's, SimpleBaseline's and ViTPose's maps are a quarter of the input's size


def propose(dims: tuple[Dim, ...], inputs: list[Tensor], outputs: Sequence[Tensor] = ()) -> str | None:
    """[batch, 17, H / 4, W / 4] of a fixed-size image input: COCO's keypoints as the top-down models give them."""
    if len(dims) != 4 or dims[1] != COCO_POINTS:
        return None
    h, w = dims[2:]
    if not isinstance(h, int) or not isinstance(w, int):
        return None
    if not any(t.shape is not None and len(t.shape) == 4 and tuple(t.shape[2:]) == (h * STRIDE, w * STRIDE)
               for t in inputs):
        return None
    return (f"postprocess: {{keypoints: {{layout: heatmap, points: {COCO_POINTS}}}}}: {COCO_POINTS} maps a quarter "
            "of the input's size are COCO's keypoints as HRNet and ViTPose give them")
