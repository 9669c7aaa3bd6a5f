"""Throughput means batches: `gpux tune --objective throughput` measures each opened candidate at larger batch sizes
too (one caller, rows stacked in the model's batch dimension), up to the declared maximum, beside its batch-1 row."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpux.config.load import Project
from gpux.model.tensor import Tensor

SIZES = (4, 8, 16)  # tried where the batch dimension is free and no smaller maximum is declared


def batch_dim(project: Project, inputs: dict[str, Tensor]) -> tuple[str, int] | None:
    """(name, largest size to try) of the inputs' shared symbolic first dimension, None where there is none, or
    `shapes:` fixes it."""
    firsts = {t.shape[0] if t.shape else None for t in inputs.values()}
    if len(firsts) != 1:
        return None
    (dim,) = firsts
    if not isinstance(dim, str):
        return None
    declared = project.config.shapes.get(dim)
    if isinstance(declared, int):
        return None
    return dim, int(declared.max) if declared is not None else SIZES[-1]


def batched(project: Project, opened: list[tuple[Any, Any]]) -> list[tuple[Any, Any, Any]]:
    """(its Outcome, Outcome, OpenedRow) at each batch size past 1 for every opened candidate: the outcome copied
    with its `batch`, the row's feeds of that many rows (its batch-1 inputs repeated)."""
    import numpy as np

    from gpux.errors import Failure, classify

    if not opened:
        return []
    found = batch_dim(project, opened[0][1].session.inputs)
    if found is None:
        return []
    _, largest = found
    out = []
    for outcome, row in opened:
        for size in (s for s in SIZES if s <= largest):
            feeds = {k: np.ascontiguousarray(np.repeat(v, size, axis=0)) for k, v in row.feeds.items()}
            try:
                row.session.run_feeds(feeds)
            except Exception as exc:  # a runtime's error (they share no base class): a fixed batch size, no larger
                if classify(exc) is Failure.BUG:
                    raise
                break
            out.append((outcome, dataclasses.replace(outcome, batch=size, row={}),
                        dataclasses.replace(row, feeds=feeds)))
    return out
