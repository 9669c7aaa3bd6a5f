"""The classification extension: an output's top-k classes as "score:index[:label]" strings, labels from gpux.yml."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpux.serve.errors import BadRequest

if TYPE_CHECKING:
    from gpux.config.load import Project



def labels_of(project: Project) -> dict[str, list[str]]:
    """Each output's labels as gpux.yml declares them, else as the model names them (`Project.labels_of`)."""
    names = [*(project.config.outputs or {}), *project.derived.labels]
    return {name: found for name in names if (found := project.labels_of(name)) is not None}


def class_count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"output '{name}': classification must be a positive integer, got {value!r}")
    return value


def classify(name: str, array: np.ndarray, k: int, labels: list[str] | None) -> np.ndarray:
    """Top-k over the last axis, best first: BYTES of shape [..., k]."""
    if array.dtype.kind not in "fiub" or array.ndim == 0:
        raise BadRequest(f"output '{name}' ({array.dtype}, shape {list(array.shape)}) cannot be classified")
    rows = array.reshape(-1, array.shape[-1])
    k = min(k, rows.shape[1])
    top = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    out = np.empty(top.shape, dtype=object)
    for r, c in np.ndindex(top.shape):
        i = int(top[r, c])
        label = f":{labels[i]}" if labels and i < len(labels) else ""
        out[r, c] = f"{float(rows[r, i]):f}:{i}{label}".encode()
    return out.reshape((*array.shape[:-1], k))
