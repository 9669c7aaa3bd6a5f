"""Post-processing of one output row: activations, top-k classes, detector boxes (the layouts of
config.steps.BOX_LAYOUTS) with class-aware NMS, greedy CTC decoding.
Answers are plain lists and dicts (JSON as they are)."""

from __future__ import annotations

from typing import Any

from gpux.config.steps import BOX_LAYOUTS, Boxes, Postprocess


def softmax(x: Any, axis: int = -1) -> Any:
    import numpy as np

    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sigmoid(x: Any) -> Any:
    import numpy as np

    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def activate(x: Any, softmax_: bool, sigmoid_: bool, axis: int = -1) -> Any:
    import numpy as np

    x = np.asarray(x, np.float32)
    return softmax(x, axis) if softmax_ else sigmoid(x) if sigmoid_ else x


def label(labels: list[str] | None, index: int) -> str:
    return labels[index] if labels and index < len(labels) else str(index)


def topk(scores: Any, k: int, labels: list[str] | None) -> list[dict[str, Any]]:
    """The `k` best of a 1-D row of class scores, best first: [{label, index, score}]."""
    import numpy as np

    row = np.asarray(scores).reshape(-1)
    k = min(k, row.size)
    best = np.argpartition(-row, k - 1)[:k]
    best = best[np.argsort(-row[best], kind="stable")]
    return [{"label": label(labels, int(i)), "index": int(i), "score": float(row[i])} for i in best]


def nms(boxes: Any, scores: Any, iou: float) -> Any:
    """Indices of the boxes kept by greedy non-maximum suppression, best first: each kept box suppresses the
    rest that overlap it by more than `iou` (one vectorized IoU per kept box)."""
    import numpy as np

    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1).clip(0) * (y2 - y1).clip(0)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        i, rest = order[0], order[1:]
        keep.append(i)
        w = (np.minimum(x2[i], x2[rest]) - np.maximum(x1[i], x1[rest])).clip(0)
        h = (np.minimum(y2[i], y2[rest]) - np.maximum(y1[i], y1[rest])).clip(0)
        inter = w * h
        union = areas[i] + areas[rest] - inter
        order = rest[inter <= iou * np.where(union > 0, union, 1)]
    return np.asarray(keep, np.int64)


def decode_boxes(pred: Any, spec: Boxes, activation: tuple[bool, bool] = (False, False)) -> tuple[Any, Any, Any]:
    """One output row in the declared layout (config.steps.BOX_LAYOUTS) → (boxes x1 y1 x2 y2 [N, 4], scores [N],
    classes [N]) at or above the score threshold after class-aware NMS, best first, at most spec.max."""
    import numpy as np

    layout = BOX_LAYOUTS[spec.layout]
    pred = np.asarray(pred, np.float32)
    rows = pred if layout.channels_axis == 1 else pred.T  # [channels, anchors]
    scores_all = activate(rows[layout.coords:], *activation, axis=0)
    classes = scores_all.argmax(axis=0)
    scores = scores_all[classes, np.arange(rows.shape[1])]
    if layout.objectness:
        scores = scores * activate(rows[4], False, activation[1])
    keep = scores >= spec.score
    cx, cy, w, h = rows[:4, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    scores, classes = scores[keep], classes[keep]
    if not scores.size:
        return boxes, scores, classes
    # one NMS for every class: each class's boxes shifted apart so that boxes of different classes never overlap
    shift = classes[:, None].astype(np.float32) * (float(np.abs(boxes).max()) + 1)
    kept = nms(boxes + shift, scores, spec.iou)[:spec.max]
    return boxes[kept], scores[kept], classes[kept]


def ctc_greedy(pred: Any, texts: list[str], blank: int, axis: int, activation: tuple[bool, bool]) -> dict[str, Any]:
    """Greedy CTC decoding of one row ([time, classes], or [classes, time] for axis 1): the best class per step,
    repeats collapsed, blanks dropped, each class's text joined. The score is the mean of the kept steps' best
    probability (PaddleOCR's confidence), 0 where no step is kept."""
    import numpy as np

    probs = activate(pred, *activation, axis=-1 if axis != 1 else 0)
    probs = probs.T if axis == 1 else probs
    best, p = probs.argmax(axis=1), probs.max(axis=1)
    kept = np.ones(best.shape, bool)
    kept[1:] = best[1:] != best[:-1]
    kept &= best != blank % probs.shape[1]
    text = "".join(texts[i] for i in best[kept])
    return {"text": text, "score": round(float(p[kept].astype(np.float64).mean()), 6) if kept.any() else 0.0}


def box_answers(boxes: Any, scores: Any, classes: Any, labels: list[str] | None) -> list[dict[str, Any]]:
    return [{"label": label(labels, int(c)), "index": int(c), "score": round(float(s), 6),
             "box": [round(float(v), 2) for v in b]} for b, s, c in zip(boxes, scores, classes, strict=True)]


def answer(row: Any, spec: Postprocess, labels: list[str] | None, placement: Any = None) -> Any:
    """One output row's answer as its postprocess declares: boxes (mapped back through `placement`, the image
    input's pre.Placement, where given), text, the top-k classes, or the activated scores."""
    activation = (spec.softmax, spec.sigmoid)
    if spec.boxes is not None:
        boxes, scores, classes = decode_boxes(row, spec.boxes, activation)
        boxes = placement.to_original(boxes) if placement is not None else boxes
        return box_answers(boxes, scores, classes, labels)
    if spec.ctc is not None:
        return ctc_greedy(row, labels or [], spec.ctc.blank, spec.ctc.axis, activation)
    if spec.topk is not None:
        return topk(activate(row, *activation), spec.topk, labels)
    return activate(row, *activation)
