"""The outputs a per-stride box layout names (`boxes: {layout: picodet | yolov5_heads, heads: [...]}`) against
their shapes: each one there, of its layout's rank, the cells of each stride's grid over the input (gpux.answers.heads
decodes them). Checked against the declared shapes when steps are bound, and against the real outputs on a sample
(gpux.model.fit)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias, TypeGuard

from gpux.model.tensor import Dim

if TYPE_CHECKING:
    from gpux.config.blocks import Boxes

Shapes: TypeAlias = Mapping[str, tuple[Dim, ...] | None]  # each output's shape (None: not known; dims may be names)


def cells(size: tuple[int, int], stride: int) -> tuple[int, int]:
    """(rows, columns) of a stride's grid over an input of `size` (height, width)."""
    return math.ceil(size[0] / stride), math.ceil(size[1] / stride)


def head_misfit(block: Boxes, name: str, shapes: Shapes, size: tuple[int, int] | None) -> tuple[str, str] | None:
    """(the field, why) where the outputs a block names are missing or cannot be its layout's heads: `shapes`
    gives each output's shape (None: not known; dims may be names), `size` the input's (height, width) where
    known. None: they fit."""
    heads = block.heads or []  # set for picodet and yolov5_heads (Boxes checks it)
    fields = [("heads", n) for n in heads] + [("distributions", n) for n in block.distributions or ()]
    missing = [(f, n) for f, n in fields if n not in shapes]
    if missing:
        return missing[0][0], f"{missing[0][1]!r} is not an output of the model (outputs: {', '.join(shapes)})"
    if name not in heads:
        return "heads", f"the output that declares the step, {name!r}, is not one of its heads"
    check = _picodet_misfit if block.layout == "picodet" else _yolov5_misfit
    return check(block, shapes, size)


def _picodet_misfit(block: Boxes, shapes: Shapes, size: tuple[int, int] | None) -> tuple[str, str] | None:
    classes: int | None = None
    for stride, s, d in zip(block.strides, block.heads or [], block.distributions or [], strict=True):
        hs, ds = shapes[s], shapes[d]
        if hs is not None and (len(hs) != 3 or (_int(hs[2]) and classes not in (None, hs[2]))):
            return "heads", f"{s} is {list(hs)}; picodet's class scores come as [batch, cells, classes], the same " \
                            "classes at every stride"
        classes = hs[2] if hs is not None and _int(hs[2]) else classes
        if ds is not None and (len(ds) != 3 or (_int(ds[2]) and (ds[2] % 4 or ds[2] < 8))):
            return "distributions", f"{d} is {list(ds)}; picodet's box distributions come as [batch, cells, 4 x " \
                                    "(reg_max + 1)]"
        if hs is not None and ds is not None and _int(hs[1]) and _int(ds[1]) and hs[1] != ds[1]:
            return "distributions", f"{d} has {ds[1]} cells, its scores {s} {hs[1]}: name them in the same order"
        if size is not None and hs is not None and _int(hs[1]) and hs[1] != math.prod(cells(size, stride)):
            return "strides", _strides(size, stride, f"{math.prod(cells(size, stride))} cells", f"{s} has {hs[1]}")
    return None


def _yolov5_misfit(block: Boxes, shapes: Shapes, size: tuple[int, int] | None) -> tuple[str, str] | None:
    for stride, h, a in zip(block.strides, block.heads or [], block.levels_anchors, strict=True):
        shape = shapes[h]
        if shape is None:
            continue
        if len(shape) != 5 or (_int(shape[4]) and shape[4] < 6):
            return "heads", f"{h} is {list(shape)}; yolov5_heads come as [batch, anchors, height, width, 5 + classes]"
        if _int(shape[1]) and shape[1] != len(a) // 2:
            return "anchors", f"{h} has {shape[1]} anchors per cell, and {len(a) // 2} are declared for stride {stride}"
        if size is not None and all(_int(d) for d in shape[2:4]) and tuple(shape[2:4]) != cells(size, stride):
            rows, columns = cells(size, stride)
            return "strides", _strides(size, stride, f"a {rows}x{columns} grid", f"{h} is {list(shape)}")
    return None


def _strides(size: tuple[int, int], stride: int, makes: str, but: str) -> str:
    return (f"stride {stride} over the {size[1]}x{size[0]} input makes {makes}, but {but}; declare the stride of "
            "each head, in order")


def _int(d: Dim) -> TypeGuard[int]:
    return isinstance(d, int)
