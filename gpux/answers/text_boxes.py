"""Text regions of a DB (differentiable binarization) detector's probability map, as PaddleOCR's DB post-processing
finds them: the map thresholded (and dilated by one pixel where declared), each 8-connected region's minimum-area
rectangle, scored by the mean probability inside it, grown back out by area x unclip / perimeter (the offset a
rectangle's rounded outline makes), answered as 4 corners clockwise from the top left in the original's pixels.
numpy and Pillow only: the regions are labeled by runs, the rectangles found on their convex hulls."""

from __future__ import annotations

from gpux.answers.decoding import Decoding
from gpux.answers.records import TextBox
from gpux.arrays import Array
from gpux.config.blocks import TextBoxes


def decode(row: Array, how: Decoding) -> list[TextBox]:
    """One map [1, H, W] → its text regions, mapped back through the image's Placement (clipped to the image)."""
    import numpy as np

    quads, scores = regions(row, how.block_as(TextBoxes))
    p = how.image
    if p is not None and len(quads):
        quads = quads.astype(np.float64)
        quads[..., 0] = ((quads[..., 0] - p.offset_x) / p.scale_x).clip(0, p.width)
        quads[..., 1] = ((quads[..., 1] - p.offset_y) / p.scale_y).clip(0, p.height)
    return [{"box": [[round(float(x), 2), round(float(y), 2)] for x, y in q], "score": round(float(s), 6)}
            for q, s in zip(quads, scores, strict=True)]


def judge(row: Array, how: Decoding) -> tuple[Array, Array, Array, float]:
    """The regions in the map's pixels as the box comparison takes them: (quads, scores, one class, the score from
    which a region is confident: the box threshold + 0.1)."""
    import numpy as np

    block = how.block_as(TextBoxes)
    quads, scores = regions(row, block)
    return quads, scores, np.zeros(len(scores), np.int64), min(1.0, block.box_threshold + 0.1)


def regions(row: Array, block: TextBoxes) -> tuple[Array, Array]:
    """(quads [N, 4, 2] in map pixels, scores [N]) of one map [1, H, W] (or [H, W])."""
    import numpy as np

    pred = np.asarray(row, np.float32).reshape(np.asarray(row).shape[-2:])
    bitmap = pred > block.threshold
    if block.dilate:  # a 2x2 kernel anchored at its corner: each pixel takes its left, upper and upper-left ones
        grown = bitmap.copy()
        grown[1:] |= bitmap[:-1]
        grown[:, 1:] |= bitmap[:, :-1]
        grown[1:, 1:] |= bitmap[:-1, :-1]
        bitmap = grown
    quads, scores = [], []
    for ys, xs in components(bitmap)[:block.max]:
        box, short = min_area_box(np.stack([xs, ys], axis=1).astype(np.float64))
        if short < block.min_size:
            continue
        score = mean_inside(pred, box)
        if score < block.box_threshold:
            continue
        box, short = unclipped(box, block.unclip)
        if short < block.min_size + 2:
            continue
        quads.append(box)
        scores.append(score)
    return np.asarray(quads, np.float32).reshape(-1, 4, 2), np.asarray(scores, np.float32)


def components(bitmap: Array) -> list[tuple[Array, Array]]:
    """The (ys, xs) of the first and last pixel of each run of each 8-connected region of a boolean map (what its
    convex hull needs), the largest region first: runs of each row, joined with the runs they touch in the row
    above (union-find over runs)."""
    import numpy as np

    padded = np.zeros((bitmap.shape[0], bitmap.shape[1] + 2), np.int8)
    padded[:, 1:-1] = bitmap
    edges = np.diff(padded, axis=1)
    rows, starts = np.nonzero(edges == 1)
    ends = np.nonzero(edges == -1)[1]  # exclusive; the same order as the starts (row-major)
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first = np.searchsorted(rows, np.arange(bitmap.shape[0] + 1))  # each row's first run
    for r in range(1, bitmap.shape[0]):
        above = range(first[r - 1], first[r])
        j0 = 0
        for i in range(first[r], first[r + 1]):
            for j in above[j0:]:  # runs overlap (8-connected) when each starts before the other ends, one apart
                if ends[j] < starts[i]:
                    j0 += 1
                    continue
                if starts[j] > ends[i]:
                    break
                a, b = root(i), root(j)
                if a != b:
                    parent[a] = b
    groups: dict[int, list[int]] = {}
    for i in range(len(rows)):
        groups.setdefault(root(i), []).append(i)
    out = []
    for runs in groups.values():  # a region's hull is its runs' end pixels': only those are kept
        run = np.asarray(runs)
        out.append((int((ends[run] - starts[run]).sum()), np.concatenate([rows[run], rows[run]]),
                    np.concatenate([starts[run], ends[run] - 1])))
    return [(ys, xs) for _, ys, xs in sorted(out, key=lambda c: -c[0])]


def hull(points: Array) -> Array:
    """The convex hull of [N, 2] points, counter-clockwise (Andrew's monotone chain); a point or a line for fewer."""
    import numpy as np

    pts = np.unique(points, axis=0)
    if len(pts) < 3:
        return pts

    def half(seq: Array) -> list[Array]:
        out: list[Array] = []
        for p in seq:
            while len(out) >= 2 and (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1]) - \
                    (out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(pts[::-1])
    return np.asarray(lower[:-1] + upper[:-1])


def min_area_box(points: Array) -> tuple[Array, float]:
    """The minimum-area rectangle around points [N, 2] (one side along an edge of their hull), as 4 corners
    [top-left, top-right, bottom-right, bottom-left] the way PaddleOCR orders them, and its shorter side."""
    import numpy as np

    h = hull(points)
    if len(h) < 3:
        lo, hi = points.min(axis=0), points.max(axis=0)
        return order(np.array([lo, [hi[0], lo[1]], hi, [lo[0], hi[1]]])), float(min(hi - lo))
    edges = np.diff(np.vstack([h, h[:1]]), axis=0)
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    best = None
    for a in angles:
        c, s = np.cos(a), np.sin(a)
        turned = h @ np.array([[c, -s], [s, c]])  # the hull with this edge direction along x
        lo, hi = turned.min(axis=0), turned.max(axis=0)
        area = float(np.prod(hi - lo))
        if best is None or area < best[0] - 1e-9:
            best = (area, a, lo, hi)
    assert best is not None
    _, a, lo, hi = best
    c, s = np.cos(a), np.sin(a)
    corners = np.array([lo, [hi[0], lo[1]], hi, [lo[0], hi[1]]]) @ np.array([[c, s], [-s, c]])
    return order(corners), float(min(hi - lo))


def order(corners: Array) -> Array:
    """PaddleOCR's get_mini_boxes order: by x, the left two top then bottom, the right two likewise, as [left-top,
    right-top, right-bottom, left-bottom]."""
    import numpy as np

    p = corners[np.argsort(corners[:, 0], kind="stable")]
    left = (p[0], p[1]) if p[1][1] > p[0][1] else (p[1], p[0])
    right = (p[2], p[3]) if p[3][1] > p[2][1] else (p[3], p[2])
    return np.array([left[0], right[0], right[1], left[1]])


def mean_inside(pred: Array, box: Array) -> float:
    """The mean probability over the pixels of the box's polygon (its corners truncated to pixels, as
    box_score_fast fills it), within the map."""
    import numpy as np
    from PIL import Image, ImageDraw

    h, w = pred.shape
    x0, x1 = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1)), int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    y0, y1 = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1)), int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    mask = Image.new("L", (x1 - x0 + 1, y1 - y0 + 1), 0)
    shifted = (box - [x0, y0]).astype(np.int32)
    ImageDraw.Draw(mask).polygon([(int(x), int(y)) for x, y in shifted], fill=1, outline=1)
    m = np.asarray(mask, bool)
    region = pred[y0:y1 + 1, x0:x1 + 1]
    return float(region[m].mean()) if m.any() else 0.0


def unclipped(box: Array, ratio: float) -> tuple[Array, float]:
    """The rectangle grown by area x ratio / perimeter on every side (the minimum-area rectangle of its outline
    offset with round joins), and its shorter side."""
    import numpy as np

    x, y = box[:, 0], box[:, 1]
    area = abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2
    sides = np.linalg.norm(box - np.roll(box, -1, axis=0), axis=1)
    grow = area * ratio / float(sides.sum()) if sides.sum() > 0 else 0.0
    along = (box[1] - box[0]) / (sides[0] or 1)
    across = (box[3] - box[0]) / (sides[3] or 1)
    grown = box + grow * np.array([-along - across, along - across, along + across, -along + across])
    return order(grown), float(min(sides[0], sides[1]) + 2 * grow)
