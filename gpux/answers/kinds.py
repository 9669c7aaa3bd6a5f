"""What a kind's steps are handed (`Decoding`), and the decode steps of the built-in kinds named by
gpux.config.kinds: top-k classes, detector boxes, CTC text, an embedding's vector, a python step's answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux.answers import post
from gpux.answers.records import Answer, Box, Text, Top, Vector
from gpux.config.steps import Postprocess


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """How a row is decoded: the output's postprocess and its kind's own block, its labels (a ctc output's text per
    class), the image input's pre.Placement (answers mapped back to the original's pixels; None: kept in the
    input's), the input's (height, width) where the row was judged on tensors, a python step's function, and the
    row of each other output its block `reads` (masks' prototypes)."""

    spec: Postprocess
    labels: list[str] | None = None
    placement: Any = None
    size: tuple[int, int] | None = None
    function: Any = None
    root: Path | None = None
    others: Mapping[str, Any] = field(default_factory=dict)  # the same row of each other output the step reads

    @property
    def block(self) -> Any:
        return self.spec.block

    @property
    def activation(self) -> tuple[bool, bool]:
        return self.spec.softmax, self.spec.sigmoid

    @property
    def canvas(self) -> tuple[int, int] | None:
        """(height, width) of the input the row answers: the placement's canvas, else the judged size."""
        return self.placement.canvas if self.placement is not None else self.size


def decoding(spec: Postprocess, root: Path | None) -> Decoding | None:
    """How the rows of an output are judged on tensors (no labels, no placement): a python step's function imported
    from `root` (None where a python step has no folder to come from)."""
    if spec.python is None:
        return Decoding(spec=spec, root=root)
    if root is None:
        return None
    from gpux.answers.python import resolve

    return Decoding(spec=spec, function=resolve(root, spec.python), root=root)


def decode_topk(row: Any, how: Decoding) -> list[Top]:
    return post.topk(post.activate(row, *how.activation), how.block, how.labels)


def decode_boxes(row: Any, how: Decoding) -> list[Box]:
    layout = post.BOX_LAYOUTS[how.block.layout]
    if layout.angle or layout.heads:  # oriented boxes; one output per stride
        from gpux.answers import heads, obb

        return (obb if layout.angle else heads).decode(row, how)
    boxes, scores, classes = post.decode_boxes(row, how.block, how.activation, how.canvas)
    boxes = how.placement.to_original(boxes) if how.placement is not None else boxes
    return post.box_answers(boxes, scores, classes, how.labels)


def decode_ctc(row: Any, how: Decoding) -> Text:
    return post.ctc_greedy(row, how.labels or [], how.block.blank, how.block.axis, how.activation)


def vector(row: Any, how: Decoding) -> Any:
    """The row flattened to one float32 vector, of unit length where the block normalizes (a zero vector stays)."""
    import numpy as np

    v = post.activate(row, *how.activation).reshape(-1).astype(np.float32)
    if how.block.normalize:
        n = float(np.linalg.norm(v.astype(np.float64)))
        v = v / n if n > 0 else v
    return v


def decode_embedding(row: Any, how: Decoding) -> Vector:
    return {"vector": [float(x) for x in vector(row, how)]}


def judge_embedding(row: Any, how: Decoding) -> Any:
    return vector(row, how)


def encode_vectors(answers: list[Any]) -> Any:
    """A batch's embeddings as one FP32 tensor [rows, dims]."""
    import numpy as np

    return np.asarray([a["vector"] for a in answers], np.float32)


def decode_python(row: Any, how: Decoding) -> Answer:
    from gpux.answers.python import call

    assert how.spec.python is not None and how.root is not None
    return call(how.function, how.spec.python, how.root, row)


def judge_python(row: Any, how: Decoding) -> str:
    """A python step's answer as text compared exactly (floats to 4 digits)."""
    from gpux.answers.python import canonical

    return canonical(decode_python(row, how))
