"""Task-level agreement: the answers a user sees (top-k classes, boxes after NMS, text), decoded from the FP32
reference's and the artifact's outputs by the declared post-processing (gpux.answers.post, the one place that
decodes) and compared per answer kind, one row of `KINDS` each.

Boxes are compared in the model's input pixels (verification data are tensors, already pre-processed): no
mapping back to an original image is needed to tell whether two detectors agree."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from gpux.answers.decoding import Decoding
from gpux.config.kinds import AnswerKind, kind_of, record_kind, step
from gpux.config.steps import Boxes, Postprocess
from gpux.documents import (
    AnswersRecord,
    BoxAgreement,
    ExactAgreement,
    TextAgreement,
    TopkAgreement,
    VectorAgreement,
    number,
)
from gpux.quality.metrics import Rule, Verification
from gpux.quality.polygons import pairwise_polygon_iou
from gpux.quality.scores import CONFIDENT, TIE

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from gpux.arrays import Array

MATCH_IOU = 0.5  # an artifact box matches a reference box of the same label overlapping at least this much
MARGIN = 0.1  # a confident box scores at least this much over the score threshold (and CONFIDENT)
CLOSE = 0.99  # an embedding keeps its direction at this cosine with the reference's or more

# What the judge steps hand `compare` per row (in the model's input pixels):
JudgedTop: TypeAlias = "tuple[int, list[tuple[int, float]]]"  # k, and the best classes' (index, score), best first
# boxes [N, 4] (or corners [N, 4, 2]), scores [N], classes [N], the score from which a box is confident, and for
# pose detections and instance masks each detection's keypoints or mask
JudgedBoxes: TypeAlias = "tuple[Array, Array, Array, float] | tuple[Array, Array, Array, float, Array]"
JudgedText: TypeAlias = "tuple[str, bool] | str"  # a text and whether the row reads it confidently; or a text
IoU: TypeAlias = "Callable[[ArrayLike, ArrayLike], Array]"  # boxes [N, ...] x boxes [M, ...] -> IoU [N, M]


def answer_kind(spec: Postprocess) -> str | None:
    """The kind an output's answers record names (None: values only, judged by the tensor metrics)."""
    kind = kind_of(spec)
    return kind.record if kind is not None else None


# ---- top-k classes -----------------------------------------------------------------------------------------------
def judge_topk(row: Array, how: Decoding) -> JudgedTop:
    """k, and the (index, score) of the best classes, best first: k of them, at least 2 (to tell a tie)."""
    from gpux.answers.post import activate, topk

    k = how.block_as(int)
    return k, [(a["index"], a["score"]) for a in topk(activate(row, *how.activation), max(k, 2), None)]


def topk_agreement(reference: Sequence[JudgedTop], got: Sequence[JudgedTop]) -> TopkAgreement:
    """Top-1 label agreement and the overlap of the k best labels (the fraction of the reference's top-k in the
    artifact's top-k), over rows whose reference ranks its best class (a tie at the top counts neither way)."""
    import math

    k = reference[0][0] if reference else 1
    rows = [(r, g) for (_, r), (_, g) in zip(reference, got, strict=True)
            if math.isfinite(r[0][1]) and (len(r) < 2 or r[0][1] - r[1][1] > TIE * max(abs(r[0][1]), 1.0))]
    out: TopkAgreement = {"k": k, "rows": len(rows)}
    if rows:
        out["top1"] = sum(r[0][0] == g[0][0] for r, g in rows) / len(rows)
        if k > 1:
            out["topk_overlap"] = sum(len({i for i, _ in r[:k]} & {i for i, _ in g[:k]}) / k for r, g in rows) / \
                len(rows)
    return out


# ---- boxes -------------------------------------------------------------------------------------------------------
def judge_boxes(row: Array, how: Decoding) -> tuple[Array, Array, Array, float]:
    """The boxes, scores and classes after NMS (a raw grid's over an input of `how.size`: height, width; None: the
    square its anchors make), and the score from which a box is confident."""
    from gpux.answers import post

    block = how.block_as(Boxes)
    layout = post.BOX_LAYOUTS[block.layout]
    if row.shape[layout.channels_axis - 1] < layout.others + 1:
        raise ValueError("fewer than 4 box coordinates and one class")
    if layout.angle or layout.heads:  # oriented boxes (corners, matched by rotated IoU); one output per stride
        from gpux.answers import heads, obb

        return (*(obb if layout.angle else heads).judge(row, how), confident_score(block.score))
    return (*post.decode_boxes(row, block, how.activation, how.size), confident_score(block.score))


def confident_score(threshold: float) -> float:
    """A box is confident at CONFIDENT or more and MARGIN above the score threshold: a box near the threshold
    comes and goes under any rounding, as a hesitant class does."""
    return max(CONFIDENT, threshold + MARGIN)


def pairwise_iou(a: ArrayLike, b: ArrayLike) -> Array:
    """IoU of every box in `a` [N, 4] with every box in `b` [M, 4] (x1, y1, x2, y2): [N, M]."""
    import numpy as np

    a, b = np.asarray(a, np.float64).reshape(-1, 4), np.asarray(b, np.float64).reshape(-1, 4)
    w = (np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])).clip(0)
    h = (np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])).clip(0)
    area_a = (a[:, 2] - a[:, 0]).clip(0) * (a[:, 3] - a[:, 1]).clip(0)
    area_b = (b[:, 2] - b[:, 0]).clip(0) * (b[:, 3] - b[:, 1]).clip(0)
    union = area_a[:, None] + area_b[None, :] - w * h
    return np.where(union > 0, w * h / np.where(union > 0, union, 1), 0.0)


def match(reference: JudgedBoxes, got: JudgedBoxes, iou_of: IoU | None = None) -> list[tuple[int, int, float]]:
    """Greedy matching by the artifact's score: each artifact box (best first) takes the unmatched reference box
    of its label it overlaps most, at IoU >= MATCH_IOU. (artifact box, reference box, IoU) of each match."""
    import numpy as np

    (rb, _, rc), (gb, gs, gc) = reference[:3], got[:3]
    iou = (iou_of or pairwise_iou)(gb, rb) * (np.asarray(gc)[:, None] == np.asarray(rc)[None, :])
    taken = np.zeros(len(rb), bool)
    matches = []
    for i in np.argsort(-np.asarray(gs), kind="stable"):
        row = np.where(taken, -1.0, iou[i])
        j = int(row.argmax()) if row.size else -1
        if j >= 0 and row[j] >= MATCH_IOU:
            taken[j] = True
            matches.append((int(i), j, float(row[j])))
    return matches


def compare_boxes(reference: Sequence[JudgedBoxes], got: Sequence[JudgedBoxes]) -> BoxAgreement:
    """Boxes by IoU; oriented boxes (judged as their corners, [N, 4, 2]) by rotated IoU."""
    import numpy as np

    rotated = any(np.asarray(r[0]).ndim == 3 for r in reference)
    return box_agreement(reference, got, pairwise_polygon_iou if rotated else None)


def polygon_agreement(reference: Sequence[JudgedBoxes], got: Sequence[JudgedBoxes]) -> BoxAgreement:
    """Text regions compared as boxes are (box_agreement), matched by polygon IoU."""
    return box_agreement(reference, got, pairwise_polygon_iou)


def box_agreement(reference: Sequence[JudgedBoxes], got: Sequence[JudgedBoxes], iou_of: IoU | None = None
                  ) -> BoxAgreement:
    """The artifact's boxes against the reference's, pooled over rows: precision, recall, F1 and the mean IoU
    of the matches; and on confident boxes (decode_boxes' 4th value), the share of the reference's the artifact
    finds and the share of the artifact's the reference has (no false box added). No boxes on either side agree
    (F1 1); boxes where the reference has none give precision 0."""
    import numpy as np

    n_ref, n_got = sum(len(r[0]) for r in reference), sum(len(g[0]) for g in got)
    ious, ref_confident, got_confident = [], [0, 0], [0, 0]  # [confident, of them matched]
    for r, g in zip(reference, got, strict=True):
        matched = match(r, g, iou_of)
        ious += [x for _, _, x in matched]
        cut = r[3] if len(r) > 3 else CONFIDENT
        for scores, index, tally in ((r[1], 1, ref_confident), (g[1], 0, got_confident)):
            confident = np.asarray(scores) >= cut
            hit = {m[index] for m in matched}
            tally[0] += int(confident.sum())
            tally[1] += sum(1 for k in np.flatnonzero(confident) if int(k) in hit)
    precision = len(ious) / n_got if n_got else 1.0
    recall = len(ious) / n_ref if n_ref else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"rows": len(reference), "reference_boxes": n_ref, "artifact_boxes": n_got, "matched": len(ious),
            "match_iou": MATCH_IOU, "precision": precision, "recall": recall, "f1": f1,
            "mean_iou": sum(ious) / len(ious) if ious else None,
            "confident_reference_boxes": ref_confident[0], "confident_artifact_boxes": got_confident[0],
            "recall_confident": ref_confident[1] / ref_confident[0] if ref_confident[0] else None,
            "precision_confident": got_confident[1] / got_confident[0] if got_confident[0] else None}


# ---- text --------------------------------------------------------------------------------------------------------
def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions that turn `a` into `b`."""
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def judge_text(row: Array, how: Decoding) -> tuple[str, bool]:
    return decode_text(row, how.spec)


@functools.lru_cache(maxsize=8)  # a list per class count and blank (declared: tests/test_state.py)
def _class_texts(classes: int, blank: int) -> list[str]:  # a character per class past Latin-1, the blank none
    return [chr(0x100 + i) if i != blank else "" for i in range(classes)]


def decode_text(row: Array, spec: Postprocess) -> tuple[str, bool]:
    """Greedy CTC decoding of one row with one character per class (its index as a code point): strings compare
    as the class sequences they are, whatever the charset file holds. And whether the row reads it confidently:
    every character it keeps (every step, where it keeps none) at a probability of CONFIDENT or more."""
    import numpy as np

    from gpux.answers.post import activate, ctc_greedy

    assert spec.ctc is not None
    axis = spec.ctc.axis
    classes = row.shape[0 if axis == 1 else -1]
    blank = spec.ctc.blank % classes
    text = str(ctc_greedy(row, _class_texts(classes, blank), blank, axis, (spec.softmax, spec.sigmoid))["text"])
    probs = activate(row, spec.softmax, spec.sigmoid, axis=-1 if axis != 1 else 0)
    probs = probs.T if axis == 1 else probs
    best, p = probs.argmax(axis=1), probs.max(axis=1)
    kept = np.concatenate([[True], best[1:] != best[:-1]]) & (best != blank)  # repeats collapsed, blanks dropped
    return text, bool((p[kept] if kept.any() else p).min(initial=1.0) >= CONFIDENT)


def text_agreement(reference: Sequence[JudgedText], got: Sequence[JudgedText]) -> TextAgreement:
    """Exact-match rate of the strings (all of them, and those the reference reads confidently: judged), and the
    character error rate: edits over the reference's characters. A row is a (text, confident) pair or a text."""
    ref = [r if isinstance(r, tuple) else (r, True) for r in reference]
    pairs = [(r, g[0] if isinstance(g, tuple) else g) for (r, _), g in zip(ref, got, strict=True)]
    chars = sum(len(r) for r, _ in pairs)
    edits = sum(edit_distance(r, g) for r, g in pairs)
    sure = [r == g for (r, g), (_, confident) in zip(pairs, ref, strict=True) if confident]
    return {"rows": len(pairs), "exact_match": sum(r == g for r, g in pairs) / len(pairs) if pairs else 1.0,
            "cer": edits / chars if chars else float(edits > 0), "confident_rows": len(sure),
            "exact_confident": sum(sure) / len(sure) if sure else None}


def exact_agreement(reference: Sequence[str], got: Sequence[str]) -> ExactAgreement:
    """The share of answers that read the same (a python step's, as canonical text)."""
    return {"rows": len(reference), "exact_match": sum(a == b for a, b in zip(reference, got, strict=True)) /
            len(reference) if reference else 1.0}


SLACK = 1e-9  # rounding of a mean: 44/55 is 0.7999999999999999, which meets a floor of 0.8


# ---- judging ------------------------------------------------------------------------------------------------------
def rows_of(arrays: Sequence[Array], rank: int) -> list[Array]:
    """Every batch row of an output over the samples, each of rank `rank`."""
    import numpy as np

    return [row for a in arrays for row in np.asarray(a).reshape(-1, *np.asarray(a).shape[a.ndim - rank:])]


def _batch_first(array: Any, axis: int) -> Any:
    import numpy as np

    a = np.asarray(array)
    return np.moveaxis(a, axis, 0) if axis and a.ndim > axis else a


def _decoded(kind: AnswerKind, how: Decoding, arrays: Sequence[Any], sizes: Sequence[Any] | None,
             others: Sequence[dict[str, Any]] | None = None) -> list[Any]:
    """Every row's judged answer over the samples, each sample's decoded over its own input size where given, with
    the same row of each other output its step reads (`others`: per sample, name -> that output)."""
    import dataclasses

    judge = step(kind, "judge")
    assert judge is not None  # (add_answers reads the kinds that judge)
    rank = getattr(how.block, "row_rank", None) or kind.rank  # a block may read rows of another rank (YOLOv5's heads)
    sized = sizes if sizes is not None and len(sizes) == len(arrays) else [None] * len(arrays)
    out = []
    for i, (a, size) in enumerate(zip(arrays, sized, strict=True)):
        read = {n: rows_of([o], o.ndim - 1) for n, o in (others[i] if others else {}).items()}
        out += [judge(x, dataclasses.replace(how, size=size, others={n: r[k] for n, r in read.items()}))
                for k, x in enumerate(rows_of([a], rank or a.ndim - 1))]
    return out


class Runs(NamedTuple):
    """The outputs compared: their names, and per sample the reference's outputs and the artifact's."""

    names: Sequence[str]
    reference: Sequence[Sequence[Array]]
    got: Sequence[Sequence[Array]]


def add_answers(result: Verification, posts: Mapping[str, Postprocess], runs: Runs, rules: Mapping[str, Rule],
                judged: bool, root: Path | None = None, sizes: Sequence[tuple[int, int] | None] | None = None) -> None:
    """Compare the answers of every output with declared post-processing, as its kind judges and compares them
    (gpux.config.kinds); a metric under its floor is a failure naming the output, the metric, its value and the
    floor (`judged` false: recorded only, as on generated inputs, whose answers mean nothing). `sizes`: each
    sample's image input (height, width), where a raw box grid is decoded over it."""
    from gpux.answers.kinds import decoding

    names, reference, got = runs
    for j, name in enumerate(names):
        spec = posts.get(name)
        kind = kind_of(spec)
        how = decoding(spec, root) if spec is not None else None
        if spec is None or kind is None or kind.judge is None or name not in result.outputs or how is None:
            continue
        ref = [_batch_first(r[j], spec.batch_axis) for r in reference]  # a time-major output's rows: its axis 1
        out = [_batch_first(g[j], spec.batch_axis) for g in got]
        if not all(a.ndim >= kind.rank and a.size > 0 and a.ndim > 0 for a in ref):
            continue
        reads = [n for n in getattr(spec.block, "reads", ()) if n in names]
        ref_others = [{n: _batch_first(r[names.index(n)], 0) for n in reads} for r in reference]
        got_others = [{n: _batch_first(g[names.index(n)], 0) for n in reads} for g in got]
        tol = rules[name].tol if name in rules else result.tolerances
        settings = {k: tol[k] for k in kind.settings if tol.get(k) is not None}
        try:
            answers = _decoded(kind, how, ref, sizes, ref_others)
            compare = step(kind, "compare")
            assert compare is not None  # (a kind that judges compares)
            metrics = compare(answers, _decoded(kind, how, out, sizes, got_others), **settings)
        except ValueError as exc:  # a raw grid whose size is not told (tensors given, no image input)
            result.outputs[name]["answers"] = {"kind": kind.record, "skipped": str(exc)}
            continue
        record: AnswersRecord = {"kind": kind.record, **metrics, "judged": judged}
        result.outputs[name]["answers"] = record
        _judge(result, name, kind, record, answers if judged else None, rules)
    result.passed = not result.failures


def _judge(result: Verification, name: str, kind: AnswerKind, record: AnswersRecord, answers: list[Any] | None,
           rules: Mapping[str, Rule]) -> None:
    """The failures of one output's answers: the reference's saying nothing, each metric past its floor."""
    if answers is None:  # not judged
        return
    empty = said(answers) if (said := step(kind, "empty")) is not None else None
    if empty:
        result.failures.append(f"{name}: {empty} on every verification sample, so its postprocess does not read "
                               "what the model returns (check the layout, axis and activation declared)")
    tol = rules[name].tol if name in rules else result.tolerances
    for metric, key, label in kind.floors:
        floor, value = tol.get(key), number(record, metric)
        low = key.startswith("min_")
        if floor is None or value is None or (value >= floor - SLACK if low else value <= floor + SLACK):
            continue
        counts = step(kind, "counts")
        words = counts(record) if counts is not None else f"{record.get('rows')} rows"
        result.failures.append(f"{name}: {label} {value:.6g} {'<' if low else '>'} {key} {floor:g} ({words})")


def no_text(answers: Sequence[JudgedText]) -> str | None:
    """Every text the reference reads is empty (a row is a (text, confident) pair or a text)."""
    texts = [a[0] if isinstance(a, tuple) else a for a in answers]
    return "every text the reference reads is empty" if texts and not any(texts) else None


def no_box_area(answers: Sequence[JudgedBoxes]) -> str | None:
    """Every box the reference finds is zero-sized (none found is an answer)."""
    import numpy as np

    found = [np.asarray(b) for b, *_ in answers]
    if any(b.ndim == 3 for b in found):  # corners: their bounds
        found = [np.concatenate([b.min(1), b.max(1)], 1) for b in found]
    boxes = np.concatenate([np.asarray(b, np.float64).reshape(-1, 4) for b in found or [np.asarray(())]])
    if len(boxes) and not ((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])).any():
        return "every box the reference finds is zero-sized"
    return None


def degenerate(kind: str, answers: Sequence[object]) -> str | None:
    """What makes the reference's answers over every sample say nothing, by the record's kind name."""
    row = record_kind(kind)
    return said(answers) if row is not None and (said := step(row, "empty")) is not None else None


def box_counts(record: AnswersRecord) -> str:
    return (f"answers after NMS: {record['matched']} of {record['reference_boxes']} reference boxes matched "
            f"at IoU >= {record['match_iou']:g} by {record['artifact_boxes']} artifact boxes "
            f"({record['confident_reference_boxes']} and {record['confident_artifact_boxes']} confident), "
            f"{record['rows']} rows")


def text_counts(record: AnswersRecord) -> str:
    return f"{record['confident_rows']} of {record['rows']} rows read confidently"


def topk_counts(record: AnswersRecord) -> str:
    return f"{record['rows']} rows, top-{record['k']}"


def rows_counts(record: AnswersRecord) -> str:
    return f"{record['rows']} rows"


def close_counts(record: AnswersRecord) -> str:
    return f"{record['rows']} rows at cosine >= {record['close_at']:g}"


def vector_agreement(reference: Sequence[Array], got: Sequence[Array], row_cosine: float = CLOSE) -> VectorAgreement:
    """Per row, the cosine of the artifact's vector with the reference's: the share at `row_cosine` or more
    (counted, so its one-sided bound says what the rows show: evidence.RATES), the least and the mean."""
    import numpy as np

    cos = []
    for r, g in zip(reference, got, strict=True):
        r64, g64 = np.asarray(r, np.float64), np.asarray(g, np.float64)
        n = float(np.linalg.norm(r64) * np.linalg.norm(g64))
        cos.append(float(r64 @ g64 / n) if n > 0 else float(np.array_equal(r64, g64)))
    return {"rows": len(cos), "close": sum(c >= row_cosine for c in cos) / len(cos) if cos else 1.0,
            "close_at": row_cosine,
            "least_cosine": min(cos, default=1.0), "mean_cosine": sum(cos) / len(cos) if cos else 1.0}
