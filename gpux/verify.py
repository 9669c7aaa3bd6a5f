"""Compares a built artifact's outputs with the FP32 reference: max-abs, max-rel, cosine, top-1 agreement."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpux.config import Verify

# default tolerances per precision; a value set in `verify:` overrides it for every precision
DEFAULTS: dict[str, dict[str, float | None]] = {
    "fp32": {"atol": 1e-4, "rtol": 1e-3, "min_cosine": 0.9999, "min_top1": 1.0},
    "fp16": {"atol": None, "rtol": None, "min_cosine": 0.999, "min_top1": 0.75},
    "bf16": {"atol": None, "rtol": None, "min_cosine": 0.995, "min_top1": 0.75},  # 8-bit mantissa
    "best": {"atol": None, "rtol": None, "min_cosine": 0.999, "min_top1": 0.75},
    "int8": {"atol": None, "rtol": None, "min_cosine": 0.98, "min_top1": 0.5},
}
KEYS = ("atol", "rtol", "min_cosine", "min_top1")


def tolerances(precision: str, verify: Verify) -> dict[str, float | None]:
    tol = dict(DEFAULTS.get(precision, DEFAULTS["fp32"]))
    for key in KEYS:
        value = getattr(verify, key)
        if value is not None:
            tol[key] = value
    if tol["atol"] is None and tol["rtol"] is not None:
        tol["atol"] = 0.0
    if tol["rtol"] is None and tol["atol"] is not None:
        tol["rtol"] = 0.0
    return tol


@dataclass
class Verification:
    passed: bool
    precision: str
    tolerances: dict[str, float | None]
    outputs: dict[str, dict[str, Any]]
    failures: list[str]
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "precision": self.precision, "tolerances": self.tolerances,
                "samples": self.samples, "outputs": self.outputs, "failures": self.failures}

    def summary(self) -> str:
        worst = min((o["cosine"] for o in self.outputs.values()), default=1.0)
        abs_ = max((o["max_abs"] for o in self.outputs.values()), default=0.0)
        top1 = [o["top1"] for o in self.outputs.values() if o.get("top1") is not None]
        parts = [f"max-abs {abs_:.3g}", f"cosine {worst:.6f}"]
        if top1:
            parts.append(f"top-1 {min(top1):.0%}")
        return ("passed" if self.passed else "FAILED") + " (" + ", ".join(parts) + ")"


def looks_like_scores(arr: Any) -> bool:
    return arr.dtype.kind == "f" and arr.ndim >= 2 and 2 <= arr.shape[-1] <= 1_000_000


def compare(names: Sequence[str], reference: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]],
            precision: str, tol: dict[str, float | None]) -> Verification:
    """`reference[i][j]`: sample i, output j. Metrics pooled over samples."""
    import numpy as np

    outputs: dict[str, dict[str, Any]] = {}
    failures: list[str] = []
    for j, name in enumerate(names):
        ref = [np.asarray(r[j]) for r in reference]
        out = [np.asarray(g[j]) for g in got]
        if any(a.shape != b.shape for a, b in zip(ref, out, strict=True)):
            failures.append(f"{name}: shape {out[0].shape} differs from the reference {ref[0].shape}")
            continue
        if ref[0].dtype.kind not in "fiub":
            equal = all(np.array_equal(a, b) for a, b in zip(ref, out, strict=True))
            outputs[name] = {"max_abs": 0.0, "max_rel": 0.0, "cosine": 1.0 if equal else 0.0, "top1": None}
            if not equal:
                failures.append(f"{name}: values differ from the reference")
            continue
        r = np.concatenate([a.astype(np.float64).ravel() for a in ref])
        g = np.concatenate([b.astype(np.float64).ravel() for b in out])
        diff = np.abs(g - r)
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(r).max()) if r.size else 0.0
        max_rel = max_abs / scale if scale > 0 else max_abs
        denom = float(np.linalg.norm(r) * np.linalg.norm(g))
        cosine = float(r @ g / denom) if denom > 0 else (1.0 if max_abs == 0 else 0.0)
        if not np.all(np.isfinite(g)):
            failures.append(f"{name}: non-finite values (NaN/inf) in the output")
        top1 = None
        if looks_like_scores(ref[0]):
            agree = [np.argmax(a, axis=-1) == np.argmax(b, axis=-1) for a, b in zip(ref, out, strict=True)]
            top1 = float(np.concatenate([x.ravel() for x in agree]).mean())
        outputs[name] = {"max_abs": max_abs, "max_rel": max_rel, "cosine": cosine, "top1": top1}
        if tol["atol"] is not None:
            limit = tol["atol"] + (tol["rtol"] or 0.0) * np.abs(r)
            bad = int(np.count_nonzero(diff > limit))
            if bad:
                failures.append(f"{name}: {bad} of {r.size} values outside atol {tol['atol']:g} + rtol "
                                f"{tol['rtol']:g}·|ref| (max-abs {max_abs:.3g})")
        if tol["min_cosine"] is not None and cosine < tol["min_cosine"]:
            failures.append(f"{name}: cosine {cosine:.6f} < min_cosine {tol['min_cosine']}")
        if top1 is not None and tol["min_top1"] is not None and top1 < tol["min_top1"]:
            failures.append(f"{name}: top-1 agreement {top1:.0%} < min_top1 {tol['min_top1']:.0%}")
    return Verification(not failures, precision, tol, outputs, failures, len(reference))

