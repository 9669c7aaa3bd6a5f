"""Semantic maps (`postprocess: {segmentation: {labels: ...}}`): a segmenter's scores per class and pixel, [batch,
classes, H, W] (logits or probabilities; one channel: a foreground's), or its class indexes [batch, H, W]. Decoded
as HF's post-processing does (`interpolate(..., mode="bilinear", align_corners=False)`, then the best class): each
original pixel's centre taken through the preprocess's placement into the map (the letterbox padding left out, a
crop's cut-away edges clamped to the nearest cells), its scores interpolated there; class indexes nearest. Answered
as the class map's size, the classes present (most pixels first) and the map itself as a PNG (8-bit greys, 16-bit
past 255 classes), base64.

Verified on the maps at the model's own resolution: pixels that agree, mean IoU over the classes either map holds,
and the rows whose maps agree on AGREE_AT of their pixels or more (counted, so the evidence bound applies)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.arrays import Array
from gpux.config.blocks import Segmentation
from gpux.config.load import Project
from gpux.config.steps import Postprocess
from gpux.errors import ModelError, Problem
from gpux.model.tensor import Dim, Tensor

if TYPE_CHECKING:
    from gpux.answers.draw import Canvas

AGREE_AT = 0.99  # a row's class maps agree where this share of their pixels is the same class, or more
FAST_CLASSES = 4096  # class indexes spanning more than this are counted by np.unique instead of a confusion table


class SegmentClass(TypedDict):
    """One class present in a class map: its label, index and how many of the map's pixels are that class."""

    label: str
    index: int
    pixels: int


class SegmentationMap(TypedDict):
    """A semantic segmenter's answer (`decode`): the class map's [height, width], the classes present (most pixels
    first), and the map as a PNG, base64 (`class_map` reads it back)."""

    size: list[int]
    classes: list[SegmentClass]
    png: str


class SegmentationAgreement(TypedDict):
    """The artifact's class maps against the reference's (`compare`), pooled over rows."""

    rows: int
    pixels: int
    classes: int  # classes in either map
    pixel_agreement: float
    mean_iou: float
    rows_agree: float  # the share of rows agreeing on agree_at of their pixels or more
    agree_at: float
    least_agreement: float


def own_map(row: Array, block: Segmentation, activation: tuple[bool, bool]) -> Array:
    """The class of each cell at the map's own size, [h, w] int64: the best channel, a one-channel map's
    foreground at `threshold`, or the indexes as they are."""
    import numpy as np

    a = np.asarray(row)
    if block.layout == "classes":
        return a.reshape(a.shape[-2:]).astype(np.int64)
    if a.shape[0] == 1:
        return (post.activate(a[0], *activation) >= block.threshold).astype(np.int64)
    return a.argmax(axis=0).astype(np.int64)


def _taps(pixels: int, scale: float, offset: float, canvas: int, cells: int) -> tuple[Array, Array, Array]:
    """Along one axis: each original pixel's centre in map cells, as the two cells it falls between (edges clamped)
    and its weight on the second."""
    import numpy as np

    at = ((np.arange(pixels) + 0.5) * scale + offset) * cells / canvas - 0.5
    at = np.clip(at, 0, cells - 1)
    first = np.minimum(np.floor(at).astype(np.intp), max(cells - 2, 0))
    return first, np.minimum(first + 1, cells - 1), (at - first).astype(np.float32)


def _nearest(pixels: int, scale: float, offset: float, canvas: int, cells: int) -> Array:
    import numpy as np

    at = ((np.arange(pixels) + 0.5) * scale + offset) * cells / canvas
    return np.clip(np.floor(at).astype(np.intp), 0, cells - 1)


CHUNK = 1 << 22  # values interpolated at once: pixels x classes


def original_map(row: Array, how: Decoding) -> Array:
    """The class of each pixel of the original image, [height, width] int64, through `how.image`: each pixel's
    centre mapped into the map, the scores interpolated there (bilinear), the best class. Where the four cells around
    a pixel share their best class it is the pixel's (a weighted mean of scores that class leads everywhere), so
    the scores are interpolated only between cells whose classes differ."""
    import numpy as np

    a, block, p = np.asarray(row), how.block_as(Segmentation), how.image
    assert p is not None  # decode maps a row back only through an image's placement
    mh, mw = a.shape[-2:]
    ch, cw = p.canvas or (mh, mw)
    if block.layout == "classes":
        ys, xs = (_nearest(p.height, p.scale_y, p.offset_y, ch, mh), _nearest(p.width, p.scale_x, p.offset_x, cw, mw))
        return a.reshape(mh, mw).astype(np.int64)[np.ix_(ys, xs)]
    (y0, y1, fy), (x0, x1, fx) = (_taps(p.height, p.scale_y, p.offset_y, ch, mh),
                                  _taps(p.width, p.scale_x, p.offset_x, cw, mw))
    scores = a.astype(np.float32) if a.shape[0] > 1 else post.activate(a, *how.activation)
    cells = np.ascontiguousarray(scores.transpose(1, 2, 0))  # [h, w, classes]: each cell's scores side by side

    def at(rows: Array, cols: Array) -> Array:  # the scores interpolated at pixels (rows, cols): [pixels, classes]
        wy, wx = fy[rows, None], fx[cols, None]
        return (cells[y0[rows], x0[cols]] * ((1 - wy) * (1 - wx)) + cells[y0[rows], x1[cols]] * ((1 - wy) * wx)
                + cells[y1[rows], x0[cols]] * (wy * (1 - wx)) + cells[y1[rows], x1[cols]] * (wy * wx))

    if a.shape[0] == 1:
        rows, cols = np.indices((p.height, p.width)).reshape(2, -1)
        return (at(rows, cols)[:, 0] >= block.threshold).astype(np.int64).reshape(p.height, p.width)
    best = scores.argmax(axis=0)
    corners = [best[np.ix_(y, x)] for y in (y0, y1) for x in (x0, x1)]
    out = corners[0].astype(np.int64)
    rows, cols = np.nonzero((corners[0] != corners[1]) | (corners[0] != corners[2]) | (corners[0] != corners[3]))
    step = max(1, CHUNK // a.shape[0])
    for i in range(0, len(rows), step):
        out[rows[i:i + step], cols[i:i + step]] = at(rows[i:i + step], cols[i:i + step]).argmax(axis=1)
    return out


def png(mask: Array) -> str:
    """A class map as a PNG (8-bit, or 16-bit past 255 classes), base64."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    if mask.size and (mask.min() < 0 or mask.max() > 65535):
        raise ModelError(f"segmentation: the model gives class indexes {int(mask.min())}..{int(mask.max())}, beyond "
                         "a class map's 0..65535", hint="answer its class scores (layout: scores) instead")
    dtype = np.uint8 if not mask.size or mask.max() < 256 else np.uint16
    out = io.BytesIO()
    Image.fromarray(mask.astype(dtype)).save(out, "PNG")
    return base64.b64encode(out.getvalue()).decode()


def class_map(answer: SegmentationMap) -> Array:
    """The class map [height, width] of a segmentation answer (its PNG decoded)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(base64.b64decode(answer["png"]))), np.int64)


def decode(row: Array, how: Decoding) -> SegmentationMap:
    import numpy as np

    mask = original_map(row, how) if how.image is not None else own_map(row, how.block_as(Segmentation),
                                                                            how.activation)
    values, counts = np.unique(mask, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    classes: list[SegmentClass] = [{"label": post.label(how.labels, int(values[i])), "index": int(values[i]),
                                    "pixels": int(counts[i])} for i in order]
    return {"size": list(mask.shape), "classes": classes, "png": png(mask)}


def judge(row: Array, how: Decoding) -> Array:
    """The class map at the model's own resolution."""
    return own_map(row, how.block_as(Segmentation), how.activation)


def _confusion(reference: list[Array], got: list[Array]) -> Array:
    """[classes, classes] pixel counts over every row (reference class, artifact class), classes renumbered."""
    import numpy as np

    low = min((int(m.min()) for m in [*reference, *got] if m.size), default=0)
    high = max((int(m.max()) for m in [*reference, *got] if m.size), default=0)
    if high - low < FAST_CLASSES:
        k, shift = high - low + 1, low
        pairs = [(np.asarray(r) - shift) * k + (np.asarray(g) - shift) for r, g in zip(reference, got, strict=True)]
    else:
        values = np.unique(np.concatenate([np.ravel(m) for m in [*reference, *got]]))
        k = len(values)
        pairs = [np.searchsorted(values, r) * k + np.searchsorted(values, g) for r, g in zip(reference, got,
                                                                                              strict=True)]
    table = np.zeros(k * k, np.int64)
    for pair in pairs:
        table += np.bincount(pair.ravel(), minlength=k * k)
    return table.reshape(k, k)


def compare(reference: list[Array], got: list[Array]) -> SegmentationAgreement:
    """The artifact's class maps against the reference's, pooled over rows: the share of pixels of the same class,
    the mean over classes (in either map) of their IoU, and the share of rows agreeing on AGREE_AT of pixels."""
    import numpy as np

    for r, g in zip(reference, got, strict=True):
        if np.shape(r) != np.shape(g):
            raise ValueError(f"class maps of {list(np.shape(r))} and {list(np.shape(g))} pixels")
    table = _confusion(reference, got)
    inter = np.diag(table).astype(np.float64)
    union = table.sum(axis=0) + table.sum(axis=1) - inter
    present = union > 0
    rows = [float((np.asarray(r) == np.asarray(g)).mean()) if np.size(r) else 1.0
            for r, g in zip(reference, got, strict=True)]
    pixels = int(table.sum())
    return {"rows": len(rows), "pixels": pixels, "classes": int(present.sum()),
            "pixel_agreement": float(inter.sum() / pixels) if pixels else 1.0,
            "mean_iou": float((inter[present] / union[present]).mean()) if present.any() else 1.0,
            "rows_agree": sum(x >= AGREE_AT for x in rows) / len(rows) if rows else 1.0, "agree_at": AGREE_AT,
            "least_agreement": min(rows, default=1.0)}


def counts(record: SegmentationAgreement) -> str:
    return f"{record['rows']} rows, {record['pixels']} pixels, {record['classes']} classes"


def text(record: SegmentationAgreement) -> str:
    return (f"class maps agree on {record['pixel_agreement']:.2%} of pixels, mean IoU {record['mean_iou']:.3f} "
            f"({record['rows_agree']:.0%} of {record['rows']} rows at >= {record['agree_at']:.0%})")


def lines(name: str, answer: SegmentationMap) -> list[str]:
    h, w = answer["size"]
    total = max(h * w, 1)
    return [f"  {name}: {w}x{h}, {len(answer['classes'])} class{'es' if len(answer['classes']) != 1 else ''}"] + \
        [f"    {c['label']} {c['pixels']} px ({c['pixels'] / total:.1%})" for c in answer["classes"]]


SHOWN = 5  # classes named in a --save picture's caption


def draw(canvas: Canvas, name: str, answer: SegmentationMap) -> None:
    """Each class present filled over the picture, half seen through, in its index's colour; the largest named
    with their share in the caption."""
    import numpy as np
    from PIL import Image

    from gpux.answers.draw import PALETTE

    mask = class_map(answer)
    for c in answer["classes"]:
        shade = Image.fromarray(np.where(mask == c["index"], 110, 0).astype(np.uint8))
        canvas.pen.bitmap((0, 0), shade, fill=PALETTE[c["index"] % len(PALETTE)])
    total = max(mask.size, 1)
    canvas.lines.append(f"{name}: " + ", ".join(f"{c['label']} {c['pixels'] / total:.0%}"
                                                for c in answer["classes"][:SHOWN]))


def shape(project: Project, name: str, spec: Postprocess, labels: list[str] | None, real: Tensor) -> list[Problem]:
    """scores: [batch, classes, H, W]; classes: [batch, H, W] or [batch, 1, H, W]; labels against the classes,
    declared once."""
    block, dims, at = spec.segmentation, real.shape, ("outputs", name, "postprocess", "segmentation")
    assert block is not None
    if dims is None:
        return []
    scores = block.layout == "scores"
    fits = len(dims) == 4 if scores else len(dims) == 3 or (len(dims) == 4 and dims[1] in (1, None))
    if not fits:
        said = "[batch, classes, height, width]" if scores else "[batch, height, width] class indexes"
        return [project.problem(at, f"a segmentation's {block.layout} come as {said}; {name} is {list(dims)}")]
    output = (project.config.outputs or {}).get(name)
    if block.labels is not None and output is not None and output.labels is not None:
        return [project.problem((*at, "labels"), f"{name} declares labels: too; declare them once")]
    channels = dims[1]
    if scores and labels is not None and isinstance(channels, int) and block.class_misfit(channels, len(labels)):
        where = (*at, "labels") if block.labels is not None else ("outputs", name, "labels")
        return [project.problem(where, f"{block.class_misfit(channels, len(labels))} ({name} has {channels} "
                                "channels in the model)")]
    return []


def propose(dims: tuple[Dim, ...], inputs: list[Tensor], outputs: Sequence[Tensor] = ()) -> str | None:
    """[batch, classes, H, W] at exactly an image input's H, W (fixed, or named alike), with more than one channel
    and other than the input's (an image-to-image model gives those): a semantic segmenter."""
    if len(dims) != 4 or not isinstance(dims[1], int) or dims[1] < 2 or dims[1] == 3:
        return None
    if not any(t.shape is not None and len(t.shape) == 4 and tuple(t.shape[2:]) == tuple(dims[2:]) and
               t.shape[1] != dims[1] for t in inputs):
        return None
    return (f"postprocess: {{segmentation: {{}}}}: {dims[1]} channels at the input's own size are a semantic "
            "segmenter's class scores")
