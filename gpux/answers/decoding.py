"""What a kind's steps are handed: `Decoding`, how a row is decoded (its output's postprocess and block, labels,
where the file's item sits in its feeds, the other outputs its block reads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar, cast

from gpux.answers.pre import Placement
from gpux.arrays import Array
from gpux.config.steps import Block, Postprocess

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
