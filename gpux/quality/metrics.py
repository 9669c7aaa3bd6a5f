"""How close an artifact's outputs are to the FP32 reference's, per output kind: every numeric output by max-abs,
the fraction within tolerance, cosine and its worst slice along the channel axis (a block of channels that
collapses fails even when the whole tensor agrees); class scores also by top-1, top-5 and confident top-1
agreement; probability distributions also by their sums."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpux.documents import Extra, OutputMetrics, VerificationDoc, number
from gpux.quality.pairs import dot, finite_pair
from gpux.quality.scores import scores

# Default thresholds per execution precision; `verify:` overrides them for every output, `verify.outputs.NAME`
# for one. None: not judged. Top-k metrics apply to class scores only, sums to probability distributions only,
# answer metrics (quality.agreement) to outputs with declared post-processing, on real data only. Below fp32 a
# classifier is judged where it matters (top-1 where the reference is confident, the reference's top-1 within the
# top-5 everywhere), not by top-1 over every row: rows where the reference itself hesitates between two classes
# flip under any lossy precision (bf16 flips ~5 % of real photo crops, all of them hesitant ones). A continuous
# output (quality.values) is judged by its rows: the share whose worst value stays within row_tolerance of its scale.
TENSOR_KEYS = ("atol", "rtol", "min_within", "min_cosine", "min_slice_cosine", "min_top1", "min_top5",
               "min_top1_confident", "max_sum_error")
ANSWER_KEYS = ("min_topk_overlap", "min_box_f1", "min_box_iou", "min_exact_match", "max_cer", "min_box_recall",
               "min_box_precision", "row_cosine", "min_rows_close")
ROW_KEYS = ("row_tolerance", "min_rows_within")  # continuous outputs (quality.values), judged on real rows only
KEYS = TENSOR_KEYS + ANSWER_KEYS + ROW_KEYS
_ROWS: dict[str, tuple[tuple[float | None, ...], tuple[float | None, ...]]] = {  # TENSOR_KEYS, ANSWER_KEYS
    "fp32": ((1e-4, 1e-3, 0.999, 0.9999, None, 1.0, 1.0, 1.0, 1e-3),
             (0.98, 0.98, 0.99, 0.99, 0.005, 0.99, 0.99, 0.99, 0.99)),
    "fp16": ((None, None, None, 0.999, 0.99, None, 0.99, 0.99, 5e-3),
             (0.9, 0.95, 0.9, 0.99, 0.01, 0.99, 0.99, 0.99, 0.99)),
    "bf16": ((None, None, None, 0.995, 0.98, None, 0.99, 0.99, 0.02),
             (0.8, 0.9, 0.85, 0.99, 0.01, 0.99, 0.99, 0.99, 0.99)),
    "int8": ((None, None, None, 0.98, 0.9, None, 0.99, 0.99, 0.05),
             (0.7, 0.9, 0.8, 0.99, 0.01, 0.99, 0.99, 0.99, 0.99)),
}
_ROW_DEFAULTS: dict[str, tuple[float | None, ...]] = {"fp32": (0.01, None), "fp16": (0.01, 0.99),
                                                     "bf16": (0.02, 0.99), "int8": (0.02, 0.99)}  # ROW_KEYS
DEFAULTS: dict[str, dict[str, float | None]] = {p: dict(zip(KEYS, (*t, *a, *_ROW_DEFAULTS[q]), strict=True))
                                                for p, q, (t, a) in (*((p, p, r) for p, r in _ROWS.items()),
                                                                     ("best", "fp16", _ROWS["fp16"]))}  # best: fp16's
LOSSY = frozenset({"int8", "best"})  # verified only on representative data (else "unverified"); TensorRT's best
# may pick int8 kernels
NEGLIGIBLE = 1e-5  # an output (or slice) whose reference and error both stay below this is not judged by cosine
MIN_SLICE_VALUES = 16  # slices smaller than this (pooled over samples) are too noisy to judge alone


def tolerances(precision: str, *overrides: Any) -> dict[str, float | None]:
    """The thresholds at `precision`, each override (a `verify:` block, then a `verify.outputs.NAME` block)
    replacing the values it sets."""
    tol = dict(DEFAULTS.get(precision, DEFAULTS["fp32"]))
    for block in overrides:
        for key in KEYS:
            value = getattr(block, key, None)
            if value is not None:
                tol[key] = value
    if tol["atol"] is None and tol["rtol"] is not None:
        tol["atol"] = 0.0
    if tol["rtol"] is None and tol["atol"] is not None:
        tol["rtol"] = 0.0
    if tol["atol"] is not None and tol["min_within"] is None:
        tol["min_within"] = 1.0
    return tol


CLASS_METRICS_ONLY = ("min_cosine", "min_slice_cosine")  # not judged by default on class scores below fp32


@dataclass(frozen=True)
class Rule:
    """How one output is judged: its thresholds, its kind (auto, dense, scores, distribution), the axis its
    slices are taken along (None: the smallest non-batch axis of an output of rank 3 or more), which
    thresholds the user set (the others are defaults) and whether a declared postprocess decodes it into answers
    (labels, boxes, texts: else a dense float output is continuous values, judged by its rows)."""

    tol: dict[str, float | None]
    kind: str = "auto"
    axis: int | None = None
    user: frozenset[str] = frozenset()
    answers: bool = False

    def for_kind(self, kind: str, precision: str) -> dict[str, float | None]:
        """Class scores below fp32 are judged by what a user sees (top-1, top-5, confident top-1, sums), not
        by the cosine of logits, unless a cosine threshold was set."""
        if kind not in ("scores", "distribution") or precision == "fp32":
            return self.tol
        return {k: (None if k in CLASS_METRICS_ONLY and k not in self.user else v) for k, v in self.tol.items()}


@dataclass(kw_only=True)
class Verification:
    passed: bool
    precision: str
    tolerances: dict[str, float | None]
    outputs: dict[str, OutputMetrics]
    failures: list[str]
    samples: int
    data: str = "generated"  # where the inputs came from: verify.data, calibration hold-out, generated
    shapes: dict[str, int] | None = None  # sizes generated inputs gave symbolic dims
    status: str = "verified"  # verified | unverified (lossy, generated data only)
    extra: Extra = field(default_factory=lambda: Extra())  # the verdict's: data digest, evidence, notes

    def to_dict(self) -> VerificationDoc:
        return {"status": self.status, "passed": self.passed, "precision": self.precision,
                "tolerances": self.tolerances, "samples": self.samples, "data": self.data, "shapes": self.shapes,
                "outputs": self.outputs, "failures": self.failures, **self.extra}

    def summary(self) -> str:
        return summary(self.to_dict())


def summary(v: VerificationDoc) -> str:
    """One line of a verification record: verdict, precision, the worst of each metric, the data."""
    outs = list((v.get("outputs") or {}).values())
    parts = [f"max-abs {max((o['max_abs'] for o in outs), default=0.0):.3g}",
             f"cosine {min((o['cosine'] for o in outs), default=1.0):.6f}"]
    for key, label, fmt in (("slice_cosine", "worst slice", ".4f"), ("top1", "top-1", ".0%"),
                            ("top5", "top-5", ".0%"), ("top1_confident", "confident top-1", ".0%"),
                            ("sum_error", "sum error", ".3g")):
        values = [x for x in (number(o, key) for o in outs) if x is not None]
        if values:
            worst = max(values) if key == "sum_error" else min(values)
            parts.append(f"{label} {worst:{fmt}}")
    from gpux.report import answer_parts, values_parts, weakest

    parts += values_parts(v.get("outputs") or {}) + answer_parts(v.get("outputs") or {})
    shown = weakest(v["evidence"]["rates"] if "evidence" in v else [])
    parts += [shown] if shown else []
    n = v.get("samples", 0)
    parts.append(f"{n} {v.get('data', 'generated')} sample{'s' if n != 1 else ''}")
    status = v.get("status") or ("verified" if v.get("passed") else "failed")
    verdict = {"verified": "passed", "unverified": "unverified"}.get(status, "FAILED") if v.get("passed") else \
        ("unverified, and it FAILED" if status == "unverified" else "FAILED")
    return f"{verdict} at {v.get('precision')} (" + ", ".join(parts) + ")"


def compare(names: Sequence[str], reference: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]],
            precision: str, tol: dict[str, float | None], classes: set[str] | None = None,
            rules: Mapping[str, Rule] | None = None) -> Verification:
    """`reference[i][j]`: sample i, output j. Metrics pooled over samples; `rules` override `tol` per output and
    say its kind (default: outputs in `classes` are class scores, rows that sum to 1 are distributions)."""
    import numpy as np

    outputs: dict[str, OutputMetrics] = {}
    failures: list[str] = []
    for j, name in enumerate(names):
        ref = [np.asarray(r[j]) for r in reference]
        out = [np.asarray(g[j]) for g in got]
        if any(a.shape != b.shape for a, b in zip(ref, out, strict=True)):
            failures.append(f"{name}: shape {out[0].shape} differs from the reference {ref[0].shape}")
            continue
        if ref[0].dtype.kind not in "fiub":
            equal = all(np.array_equal(a, b) for a, b in zip(ref, out, strict=True))
            outputs[name] = {"kind": "exact", "max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0 if equal else 0.0}
            if not equal:
                failures.append(f"{name}: values differ from the reference")
            continue
        rule = (rules or {}).get(name) or Rule(tol, user=frozenset(KEYS))
        kind = output_kind(ref, rule.kind, name in (classes or set()))
        judged = rule.for_kind(kind, precision)
        metrics, problems = _dense(name, ref, out, judged)
        metrics["kind"] = kind
        problems += _slices(name, ref, out, Rule(judged, rule.kind, rule.axis), metrics)
        if kind in ("scores", "distribution"):
            problems += scores(name, ref, out, judged, kind, metrics)
        elif ref[0].dtype.kind == "f" and not rule.answers and judged.get("row_tolerance") is not None:
            from gpux.quality.values import values_record

            record = values_record(ref, out, float(judged["row_tolerance"] or 0.0))
            if record["rows"]:  # an output empty on every sample has no rows to judge
                metrics["values"] = record
        outputs[name] = metrics
        failures += problems
    return Verification(passed=not failures, precision=precision, tolerances=tol, outputs=outputs, failures=failures,
                        samples=len(reference))


def output_kind(ref: list[Any], declared: str, named: bool) -> str:
    """dense, scores (declared, or named in classifications/labels) or distribution (rows of non-negative values
    that sum to 1 along the last axis, as a softmax writes them)."""
    import numpy as np

    a = ref[0]
    classes = a.dtype.kind == "f" and a.ndim >= 1 and a.shape[-1] >= 2 and a.size > 0 and \
        len({x.shape[-1] for x in ref}) == 1  # top-k needs a class axis the samples share
    if declared != "auto" or not classes:
        return declared if declared != "auto" and (classes or declared == "dense") else "dense"
    def sums_to_one(x: Any) -> bool:  # one sample at a time: derived rows make many
        rows = np.asarray(x, np.float64).reshape(-1, a.shape[-1])
        return bool(np.isfinite(rows).all() and rows.min() >= -1e-6 and np.abs(rows.sum(-1) - 1).max() <= 1e-3)

    if all(sums_to_one(x) for x in ref):
        return "distribution"
    return "scores" if named else "dense"


def _cosine(r: Any, g: Any, max_abs: float) -> float:
    """Cosine similarity of two finite float64 vectors (both zero: 1 when they agree)."""
    import numpy as np

    denom = float(np.linalg.norm(r) * np.linalg.norm(g))
    return float(r @ g / denom) if denom > 0 else (1.0 if max_abs == 0 else 0.0)


def pooled_cosine(reference: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]]) -> float:
    """The worst float output's cosine, pooled over samples as `compare` computes it (`reference[i][j]`: sample
    i, output j); outputs whose reference and error stay below NEGLIGIBLE are not judged."""
    import numpy as np

    worst = 1.0
    for j in range(len(reference[0]) if reference else 0):
        if np.asarray(reference[0][j]).dtype.kind != "f":
            continue
        r = np.concatenate([np.asarray(x[j], np.float64).ravel() for x in reference])
        g = np.concatenate([np.asarray(x[j], np.float64).ravel() for x in got])
        both = np.isfinite(r) & np.isfinite(g)
        r, g = r[both], g[both]
        max_abs = float(np.abs(g - r).max()) if r.size else 0.0
        if not r.size or max(float(np.abs(r).max()), max_abs) < NEGLIGIBLE:
            continue
        worst = min(worst, _cosine(r, g, max_abs))
    return worst


def _dense(name: str, ref: list[Any], out: list[Any], tol: dict[str, float | None]) \
        -> tuple[OutputMetrics, list[str]]:
    """Metrics of one numeric output, pooled over samples one sample at a time (memory stays one sample's);
    NaN/inf in the same places with the same values count as agreement."""
    import numpy as np

    t = {"values": 0, "mismatched": 0, "finite": 0, "max_abs": 0.0, "scale": 0.0, "rg": 0.0, "rr": 0.0, "gg": 0.0,
         "within": 0}
    for a, b in zip(ref, out, strict=True):
        t["values"] += a.size
        if finite_pair(a, b):
            r, g = a.ravel(), b.ravel()
        else:
            r, g = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
            finite_r, finite_g = np.isfinite(r), np.isfinite(g)
            same_special = ~finite_r & ~finite_g & ((np.isnan(r) & np.isnan(g)) | (r == g))
            t["mismatched"] += int(np.count_nonzero((finite_r != finite_g) | (~finite_r & ~finite_g & ~same_special)))
            both = finite_r & finite_g
            r, g = r[both], g[both]
        if not r.size:
            continue
        diff = np.abs(g - r)
        t["finite"] += r.size
        t["max_abs"], t["scale"] = max(t["max_abs"], float(diff.max())), max(t["scale"], float(np.abs(r).max()))
        t["rg"], t["rr"], t["gg"] = t["rg"] + dot(r, g), t["rr"] + dot(r, r), t["gg"] + dot(g, g)
        if tol["atol"] is not None:
            t["within"] += int(np.count_nonzero(diff <= tol["atol"] + (tol["rtol"] or 0.0) * np.abs(r)))
    problems = []
    if t["mismatched"]:
        problems.append(f"{name}: {t['mismatched']} of {t['values']} values are NaN/inf in only one of reference and "
                        f"artifact")
    max_abs, scale = t["max_abs"], t["scale"]
    max_rel = max_abs / scale if scale > 0 else max_abs
    cosine = _cosine_of(t["rg"], t["rr"], t["gg"], max_abs)
    within = 1.0
    if tol["atol"] is not None and t["finite"]:
        within = t["within"] / t["finite"]
        if tol["min_within"] is not None and within < tol["min_within"]:
            problems.append(f"{name}: {t['finite'] - t['within']} of {t['finite']} values outside atol {tol['atol']:g} "
                            f"+ rtol {tol['rtol']:g}·|ref| (within {within:.2%} < min_within {tol['min_within']:.2%}; "
                            f"max-abs {max_abs:.3g})")
    negligible = scale < NEGLIGIBLE and max_abs < NEGLIGIBLE  # cosine of rounding noise means nothing
    if tol["min_cosine"] is not None and cosine < tol["min_cosine"] and not negligible:
        problems.append(f"{name}: cosine {cosine:.6f} < min_cosine {tol['min_cosine']}")
    return {"max_abs": max_abs, "max_rel": max_rel, "cosine": cosine, "within": within}, problems


def _cosine_of(rg: float, rr: float, gg: float, max_abs: float) -> float:
    """Cosine similarity from the dot products of two vectors (both zero: 1 when they agree)."""
    import math

    denom = math.sqrt(rr) * math.sqrt(gg)
    return rg / denom if denom > 0 else (1.0 if max_abs == 0 else 0.0)


def slice_axis(shape: tuple[int, ...], declared: int | None) -> int | None:
    """The axis slices are taken along: the declared one, else the smallest axis after the first (ties: the
    earlier) of an output of rank 3 or more, with at least 2 entries."""
    if declared is not None:
        return declared % len(shape) if shape else None
    if len(shape) < 3:
        return None
    sizes = [(n, i) for i, n in enumerate(shape) if i > 0 and n >= 2]
    return min(sizes)[1] if sizes else None


def _slices(name: str, ref: list[Any], out: list[Any], rule: Rule, metrics: OutputMetrics) -> list[str]:
    """The worst slice's cosine along the channel axis (pooled over samples, one sample at a time), and which
    slices fall short."""
    import numpy as np

    axis = slice_axis(ref[0].shape, rule.axis)
    if axis is None or len({x.shape for x in ref}) > 1 or not ref[0].shape[axis]:
        return []  # samples of different shapes have no common slices
    n = ref[0].shape[axis]
    if ref[0].size // n * len(ref) < MIN_SLICE_VALUES:
        return []
    sums = np.zeros((6, n))  # r·g, r·r, g·g, max |r|, max |g - r|, finite values: per slice
    for a, b in zip(ref, out, strict=True):
        if finite_pair(a, b):
            r, g = (np.moveaxis(x, axis, 0).reshape(n, -1) for x in (a, b))
            sums[5] += r.shape[1]
        else:
            r, g = (np.moveaxis(x.astype(np.float64), axis, 0).reshape(n, -1) for x in (a, b))
            both = np.isfinite(r) & np.isfinite(g)
            r, g = np.where(both, r, 0.0), np.where(both, g, 0.0)
            sums[5] += both.sum(1)
        sums[:3] += dot(r, g, rows=True), dot(r, r, rows=True), dot(g, g, rows=True)
        sums[3] = np.maximum(sums[3], np.abs(r).max(1, initial=0.0))
        sums[4] = np.maximum(sums[4], np.abs(g - r).max(1, initial=0.0))
    cosines = [(_cosine_of(sums[0, i], sums[1, i], sums[2, i], sums[4, i]), i) for i in range(n)
               if sums[5, i] and max(sums[3, i], sums[4, i]) >= NEGLIGIBLE]
    if not cosines:
        return []
    worst, where = min(cosines)
    metrics["slice_axis"], metrics["slice_cosine"], metrics["worst_slice"] = axis, worst, where
    floor = rule.tol.get("min_slice_cosine")
    if floor is None:
        return []
    below = sorted(i for c, i in cosines if c < floor)
    metrics["slices_below"] = len(below)
    if not below:
        return []
    return [f"{name}: {len(below)} of {n} slices along axis {axis} have cosine < min_slice_cosine {floor} "
            f"(indices {spans(below)}; worst {worst:.4f} at {where}): a block of channels the whole-tensor cosine "
            f"hides"]


def spans(indices: list[int]) -> str:
    """Sorted indices as runs: [1, 2, 3, 7] -> '1..3, 7' (at most 6 runs shown)."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(f"{a}..{b}" if b > a else str(a) for a, b in runs[:6])
    return text + (f", … ({len(runs) - 6} more runs)" if len(runs) > 6 else "")
