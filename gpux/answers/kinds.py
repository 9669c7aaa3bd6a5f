"""What a kind's steps are handed (`Decoding`), and the decode steps of the built-in kinds named by
gpux.config.kinds: top-k classes, detector boxes, CTC text, an embedding's vector, a python step's answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar, cast

from gpux.answers import post
from gpux.answers.pre import Placement
from gpux.answers.records import Answer, Box, Text, Top, Vector
from gpux.arrays import Array
from gpux.config.kinds import AnswerKind
from gpux.config.steps import Block, Boxes, Ctc, Embedding, Postprocess

if TYPE_CHECKING:
    from gpux.answers.text import Spans

B = TypeVar("B")

# Where a file's item sits in its feeds (gpux.answers.steps.Steps.feeds): an image's Placement, a text's Spans
Where: TypeAlias = "Placement | Spans"


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """How a row is decoded: the output's postprocess and its kind's own block, its labels (a ctc output's text per
    class), the image input's pre.Placement (answers mapped back to the original's pixels; None: kept in the
    input's), the input's (height, width) where the row was judged on tensors, a python step's function, and the
    row of each other output its block `reads` (masks' prototypes)."""

    spec: Postprocess
    labels: list[str] | None = None
    placement: Where | None = None
    size: tuple[int, int] | None = None
    function: Callable[..., object] | None = None
    root: Path | None = None
    others: Mapping[str, Array] = field(default_factory=dict)  # the same row of each other output the step reads

    @property
    def block(self) -> Block | None:
        return self.spec.block

    def block_as(self, kind: type[B]) -> B:
        """The kind's own block, read as the config type of the built-in kind whose step reads it (a plug-in kind
        that reuses a built-in step gives a block with its fields; an output without a block here is a bug)."""
        block = self.spec.block
        if block is None:
            raise TypeError(f"an output without a kind's block decoded as {kind.__name__}")
        return block if isinstance(block, kind) else cast(B, block)  # duck-typed: a plug-in's look-alike block

    @property
    def activation(self) -> tuple[bool, bool]:
        return self.spec.softmax, self.spec.sigmoid

    @property
    def image(self) -> Placement | None:
        """Where the original image sits in the input (None: answers stay in the input's pixels, or the input is
        not an image: a text's Spans)."""
        return self.placement if isinstance(self.placement, Placement) else None

    @property
    def canvas(self) -> tuple[int, int] | None:
        """(height, width) of the input the row answers: the image placement's canvas, else the judged size."""
        return self.image.canvas if self.image is not None else self.size


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
