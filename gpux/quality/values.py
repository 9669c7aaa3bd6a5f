"""How a continuous output is judged (values no declared postprocess decodes into labels, boxes or texts: regression
values, scores, embeddings, maps): each row's worst move against the FP32 reference, over the reference's scale,
and the share of rows that stay within a tolerance of it, a counted rate judged by its one-sided bound on real
rows only; and the models whose every output a lossy precision changes (tree ensembles, whose thresholds the
rounding of their inputs moves) (docs/verification.md, Continuous outputs)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gpux.documents import OutputMetrics, ValuesRecord
from gpux.report import percent

SPREAD = (1.0, 99.0)  # the percentiles whose distance is an output's scale: robust to a few outliers
SCALE_VALUES = 4096  # reference values kept per sample to find the scale (evenly spaced: memory stays small)
NEGLIGIBLE = 1e-5  # a scale below this is this: a reference of zeros is judged in absolute terms
TREE_OPS = ("TreeEnsemble", "TreeEnsembleRegressor", "TreeEnsembleClassifier")  # ai.onnx.ml
ML_DOMAIN = "ai.onnx.ml"
MODEL_OPSET = 8  # ModelProto.opset_import (OperatorSetIdProto: domain 1)


def row_moves(ref: Sequence[Any], out: Sequence[Any]) -> tuple[Any, float]:
    """Each row's worst absolute move (rows along each sample's first axis; a scalar is one row) and the output's
    scale: the distance between the reference's 1st and 99th percentiles over every row, else (a constant output)
    its largest magnitude, at least NEGLIGIBLE. One sample at a time; values not finite on both sides count 0
    here (the tensor metrics fail them)."""
    import numpy as np

    moves, kept = [], []
    for a, b in zip(ref, out, strict=True):
        r, g = (np.asarray(x, np.float64) for x in (a, b))
        if not r.size:  # no rows (a dynamic output that is empty on this sample)
            continue
        rows = r.shape[0] if r.ndim else 1
        r, g = r.reshape(rows, -1), g.reshape(rows, -1)
        both = np.isfinite(r) & np.isfinite(g)
        moves.append(np.abs(np.where(both, g, 0.0) - np.where(both, r, 0.0)).max(1, initial=0.0))
        finite = r[both]
        kept.append(finite[::max(1, -(-finite.size // SCALE_VALUES))])
    values = np.concatenate(kept) if kept else np.zeros(0)
    if not values.size:
        return np.concatenate(moves) if moves else np.zeros(0), NEGLIGIBLE
    low, high = np.percentile(values, SPREAD)
    scale = float(high - low) or float(np.abs(values).max())
    return np.concatenate(moves), max(scale, NEGLIGIBLE)


def values_record(ref: Sequence[Any], out: Sequence[Any], tolerance: float) -> ValuesRecord:
    """One continuous output's rows against the reference: how many, the share whose worst value stays within
    `tolerance` × the scale, the worst row's move over the scale and where it is."""
    moves, scale = row_moves(ref, out)
    within = moves <= tolerance * scale
    worst = int(moves.argmax()) if moves.size else 0
    return {"rows": int(moves.size), "rows_within": float(within.mean()) if moves.size else 1.0,
            "moved": int(moves.size - within.sum()), "tolerance": tolerance, "scale": scale,
            "max_rel": float(moves.max(initial=0.0)) / scale, "worst_row": worst, "judged": False}


def judge_values(outputs: dict[str, OutputMetrics], floors: dict[str, float | None], judged: bool) -> list[str]:
    """Mark each continuous output's rows judged (real data) or recorded only (generated inputs, whose rows mean
    nothing to a user); a share of rows under its floor, on real data, is a failure naming the output."""
    problems = []
    for name, metrics in outputs.items():
        record = metrics.get("values")
        if record is None:
            continue
        record["judged"] = judged
        floor = floors.get(name)
        if judged and floor is not None and record["rows_within"] < floor:
            problems.append(f"{name}: {record['moved']} of {record['rows']} rows move by more than "
                            f"{percent(record['tolerance'])} of the output's scale ({record['scale']:.4g}): rows "
                            f"within {record['rows_within']:.1%} < min_rows_within {floor:.0%}; worst row "
                            f"{record['worst_row']} by {metrics['max_abs']:.4g} ({percent(record['max_rel'])} of the "
                            "scale)")
    return problems


def continuous(outputs: dict[str, OutputMetrics]) -> list[str]:
    """The outputs judged as continuous values (those with a values record)."""
    return [n for n, o in outputs.items() if "values" in o]


def tree_ensembles(path: Path) -> list[str]:
    """The ai.onnx.ml tree ensemble operators of an ONNX model's graph (read from the wire format, mapped, weights
    skipped; only a model that imports the ai.onnx.ml opset is walked); [] for a file that is not ONNX."""
    import mmap

    from gpux.model.wire import MODEL_GRAPH, WireError, fields

    found: set[str] = set()
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            top = [(n, v) for n, v in fields(view) if n in (MODEL_GRAPH, MODEL_OPSET) and isinstance(v, memoryview)]
            if any(_text(v, 1) == ML_DOMAIN for n, v in top if n == MODEL_OPSET):
                found = {op for n, g in top if n == MODEL_GRAPH for op, domain in _nodes(g)
                         if domain == ML_DOMAIN and op in TREE_OPS}
            del top
    except (OSError, ValueError, WireError, IndexError):  # not an ONNX file (a PyTorch source, empty): no trees
        return []
    return sorted(found)


def _text(buf: memoryview, number: int) -> str:
    from gpux.model.wire import fields

    return next((bytes(v).decode("utf-8", "replace") for n, v in fields(buf) if n == number
                 and isinstance(v, memoryview)), "")


def _nodes(graph: memoryview) -> Iterable[tuple[str, str]]:
    """(op_type, domain) of each node of a GraphProto (field 1; NodeProto: op_type 4, domain 7)."""
    from gpux.model.wire import fields

    for n, node in fields(graph):
        if n != 1 or not isinstance(node, memoryview):
            continue
        yield _text(node, 4), _text(node, 7)


def why_unverified(precision: str, names: Sequence[str], trees: Sequence[str], representative: bool) -> str:
    """Why a build below fp32 of continuous outputs, or of a tree ensemble, is not verified on generated inputs
    ("" on real rows: their bound decides)."""
    if representative or precision == "fp32" or not (names or trees):
        return ""
    if trees:
        return (f"an {precision} artifact of a tree ensemble ({', '.join(trees)}) checked on generated data only: "
                f"{precision} rounds the features its thresholds compare, so only real rows (verify.data) judge it")
    return (f"an {precision} artifact checked on generated data only, and {', '.join(names)} "
            f"{'is a continuous output' if len(names) == 1 else 'are continuous outputs'} (values no answer "
            "decodes): only real rows (verify.data) show what a user reads off them")
