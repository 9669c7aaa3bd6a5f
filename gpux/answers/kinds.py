"""The decode steps of the built-in kinds named by gpux.config.kinds (top-k classes, detector boxes, CTC text, an
embedding's vector, a python step's answer), each handed a row and its `Decoding` (gpux.answers.decoding)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

from gpux.answers import post
from gpux.answers.decoding import Decoding
from gpux.answers.records import Answer, Box, Text, Top, Vector
from gpux.arrays import Array
from gpux.config.kinds import AnswerKind
from gpux.config.steps import Boxes, Ctc, Embedding, Postprocess


class Decode(Protocol):
    """A kind's decode step (gpux.config.kinds.AnswerKind.decode): one batch row → its answer."""

    def __call__(self, row: Array, how: Decoding, /) -> Answer: ...


@cache
def decoder(kind: AnswerKind) -> Decode:
    """The decode step the kind's row names, as the answers room calls it (resolved once per kind)."""
    from pkgutil import resolve_name

    found: Decode = resolve_name(kind.decode)  # the row's promise: a function of Decode's shape
    return found


def decoding(spec: Postprocess, root: Path | None) -> Decoding | None:
    """How the rows of an output are judged on tensors (no labels, no placement): a python step's function imported
    from `root` (None where a python step has no folder to come from)."""
    if spec.python is None:
        return Decoding(spec=spec, root=root)
    if root is None:
        return None
    from gpux.answers.python import resolve

    return Decoding(spec=spec, function=resolve(root, spec.python), root=root)


def decode_topk(row: Array, how: Decoding) -> list[Top]:
    return post.topk(post.activate(row, *how.activation), how.block_as(int), how.labels)


def decode_boxes(row: Array, how: Decoding) -> list[Box]:
    block = how.block_as(Boxes)
    layout = post.BOX_LAYOUTS[block.layout]
    if layout.angle or layout.heads:  # oriented boxes; one output per stride
        from gpux.answers import heads, obb

        return (obb if layout.angle else heads).decode(row, how)
    boxes, scores, classes = post.decode_boxes(row, block, how.activation, how.canvas)
    boxes = how.image.to_original(boxes) if how.image is not None else boxes
    return post.box_answers(boxes, scores, classes, how.labels)


def decode_ctc(row: Array, how: Decoding) -> Text:
    block = how.block_as(Ctc)
    return post.ctc_greedy(row, how.labels or [], block.blank, block.axis, how.activation)


def vector(row: Array, how: Decoding) -> Array:
    """The row flattened to one float32 vector, of unit length where the block normalizes (a zero vector stays)."""
    import numpy as np

    v = post.activate(row, *how.activation).reshape(-1).astype(np.float32)
    if how.block_as(Embedding).normalize:
        n = float(np.linalg.norm(v.astype(np.float64)))
        v = v / n if n > 0 else v
    return v


def decode_embedding(row: Array, how: Decoding) -> Vector:
    return {"vector": [float(x) for x in vector(row, how)]}


def judge_embedding(row: Array, how: Decoding) -> Array:
    return vector(row, how)


def encode_vectors(answers: Sequence[Vector]) -> Array:
    """A batch's embeddings as one FP32 tensor [rows, dims]."""
    import numpy as np

    return np.asarray([a["vector"] for a in answers], np.float32)


def decode_python(row: Array, how: Decoding) -> Answer:
    from gpux.answers.python import call

    assert how.spec.python is not None and how.root is not None and how.function is not None
    return call(how.function, how.spec.python, how.root, row)


def judge_python(row: Array, how: Decoding) -> str:
    """A python step's answer as text compared exactly (floats to 4 digits)."""
    from gpux.answers.python import canonical

    return canonical(decode_python(row, how))
