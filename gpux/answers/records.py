"""The answers a file gets, as records with typed fields: a top-k class, a detector's box, a recognizer's text, an
embedding, a text region, and a file's answers by output name. They are plain dicts at run time (TypedDicts), so
what `--json`, `--save` and the server write is the record as it is. Typing only: nothing heavy is imported."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias, TypedDict

from gpux.arrays import Array


class Top(TypedDict):
    """One of the k best classes of a row (`post.topk`), best first."""

    label: str
    index: int
    score: float


class Box(Top):
    """One detected box after NMS (`post.box_answers`): its class, score and corners x1, y1, x2, y2."""

    box: list[float]


class Text(TypedDict):
    """A greedy CTC reading (`post.ctc_greedy`): the text and the mean probability of its kept steps."""

    text: str
    score: float


class Vector(TypedDict):
    """An embedding (`kinds.decode_embedding`): the row as one vector, of unit length where normalized."""

    vector: list[float]


class TextBox(TypedDict):
    """A text region (`text_boxes.decode`): its 4 corners [x, y] clockwise from the top left, and the mean
    probability inside it."""

    box: list[list[float]]
    score: float


# One output's answer: its kind's record or records (the built-in kinds' above; each newer kind's in its own module:
# keypoints.Pose, masks.Instance, segmentation.SegmentationMap, heatmaps.HeatmapKeypoints, obb.OrientedBox,
# tokens.Entity; a plug-in kind's its own), or the (activated) scores of an output without answers; an audio file's
# is one per window (`steps.Steps.file_answers`). A python step's is whatever its function returns.
Record: TypeAlias = Mapping[str, object]
Answer: TypeAlias = "Record | Sequence[Record] | Array | list[Answer]"
Answers: TypeAlias = "dict[str, Answer]"  # a file's answers: output name -> its answer

__all__ = ["Answer", "Answers", "Box", "Text", "TextBox", "Top", "Vector"]
