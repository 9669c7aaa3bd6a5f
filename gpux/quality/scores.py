"""Class-score agreement along an output's last axis: top-1, the reference's top-1 within the artifact's top-5,
top-1 where the reference is confident; a probability distribution's rows must still sum to 1."""

from __future__ import annotations

from typing import Any

from gpux.documents import OutputMetrics, number
from gpux.quality.pairs import finite_pair

CONFIDENT = 0.5  # a reference row is confident when its top probability reaches this
TIE = 1e-4  # a reference row whose top two differ by less (relative) has no top-1 to agree with


def scores(name: str, ref: list[Any], out: list[Any], tol: dict[str, float | None], kind: str,
            metrics: OutputMetrics) -> list[str]:
    """Class-score agreement along the last axis: top-1, the reference's top-1 within the artifact's top-5,
    top-1 where the reference is confident; a distribution's rows must still sum to 1."""
    import numpy as np

    k = ref[0].shape[-1] if ref[0].ndim else 0
    if k < 2 or not ref[0].size:
        return []
    table = np.concatenate([_score_rows(a, b, k, kind) for a, b in zip(ref, out, strict=True)], axis=1)
    ranked = table[0] > 0  # rows the reference cannot rank (all non-finite, its top two tied) count neither way
    if not ranked.any():
        return []
    agree, top5, confident, sum_error = table[1, ranked] > 0, table[2, ranked] > 0, table[3, ranked] > 0, \
        table[4, ranked]
    rows = int(ranked.sum())
    metrics["rows"] = rows
    metrics["top1"] = float(agree.mean())
    if k > 5:
        metrics["top5"] = float(top5.mean())
    metrics["confident_rows"] = int(confident.sum())
    if confident.any():
        metrics["top1_confident"] = float(agree[confident].mean())
    if kind == "distribution":
        metrics["sum_error"] = float(sum_error.max())
    problems = []
    for key, label in (("top1", "top-1 agreement"), ("top5", "top-5 agreement (reference top-1 in top-5)"),
                       ("top1_confident", "top-1 agreement where the reference is confident")):
        floor, value = tol.get(f"min_{key}"), number(metrics, key)
        if floor is not None and value is not None and value < floor:
            n = metrics["confident_rows"] if key == "top1_confident" else rows
            problems.append(f"{name}: {label} {value:.1%} < min_{key} {floor:.0%} ({n} rows)")
    floor = tol.get("max_sum_error")
    if kind == "distribution" and floor is not None and metrics["sum_error"] > floor:
        problems.append(f"{name}: probabilities no longer sum to 1 (off by up to {metrics['sum_error']:.3g} > "
                        f"max_sum_error {floor:g})")
    return problems


def _score_rows(a: Any, b: Any, k: int, kind: str) -> Any:
    """Per row of one sample: [ranked, top-1 agrees, reference top-1 in the top-5, reference confident, how far
    the artifact's row is from summing to 1]."""
    import numpy as np

    if finite_pair(a, b):
        r, g = (x.reshape(-1, k) for x in (a, b))
    else:
        r, g = (np.asarray(x, np.float64).reshape(-1, k) for x in (a, b))
        r, g = np.where(np.isfinite(r), r, -np.inf), np.where(np.isfinite(g), g, -np.inf)
    top2 = -np.partition(-r, 1, axis=-1)[:, :2]
    with np.errstate(invalid="ignore"):
        ranked = np.isfinite(top2[:, 0]) & (top2[:, 0] - top2[:, 1] > TIE * np.maximum(np.abs(top2[:, 0]), 1.0))
        best = r.argmax(-1)
        top5 = (np.argpartition(-g, 5, axis=-1)[:, :5] == best[:, None]).any(-1) if k > 5 else ranked
        confident = (r if kind == "distribution" else _softmax(r)).max(-1) >= CONFIDENT
        off = np.nan_to_num(np.abs(g.sum(-1, dtype=np.float64) - 1), nan=np.inf, posinf=np.inf)
    return np.stack([ranked, best == g.argmax(-1), top5, confident, off]).astype(np.float64)


def _softmax(x: Any) -> Any:
    import numpy as np

    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
