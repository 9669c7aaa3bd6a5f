"""What a benchmark row says of its artifact's verification: the verdict, and every accuracy figure of the record
(the worst value of each metric over the outputs), as `run --benchmark` and `gpux tune` show them."""

from __future__ import annotations

from collections.abc import Callable

from gpux.bench.records import Accuracy
from gpux.documents import VerificationDoc, number


def accuracy_of(verification: VerificationDoc) -> Accuracy | None:
    """Every accuracy figure of a verification record: the worst value of each metric over the outputs
    (cosine, max-abs, worst slice, top-1, top-5, confident top-1), the record per output, its verdict, the data
    it was judged on and the thresholds; None when nothing was compared."""
    outputs = verification.get("outputs") or {}
    if not outputs:
        return None

    def worst(key: str, pick: Callable[..., float | None] = min) -> float | None:
        return pick((x for o in outputs.values() if (x := number(o, key)) is not None), default=None)

    acc: Accuracy = {
            "min_cosine": worst("cosine"), "max_abs": worst("max_abs", max), "slice_cosine": worst("slice_cosine"),
            "top1": worst("top1"), "top5": worst("top5"), "top1_confident": worst("top1_confident"),
            "status": verification_status(verification), "data": verification.get("data"),
            "samples": verification.get("samples"), "representative": verification.get("representative"),
            "tolerances": verification.get("tolerances"), "outputs": outputs,
            "evidence": verification["evidence"]["rates"] if "evidence" in verification else None,
            "unverified": verification.get("unverified"), "loosened": verification.get("loosened")}
    return acc


def verification_status(verification: VerificationDoc | None) -> str:
    """verified | unverified (a lossy artifact checked on generated data only) | skipped, as the manifest's
    verification says; a manifest from before its `status` key is verified when it passed."""
    v: VerificationDoc = verification or {}
    if "status" in v:
        return str(v["status"])
    return "verified" if v.get("passed") else "skipped"
