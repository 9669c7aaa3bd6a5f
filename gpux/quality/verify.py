"""Compares a built artifact's outputs with the FP32 reference, per output kind: dense outputs by max-abs,
max-rel, cosine and the fraction within tolerance; class-score outputs also by top-1 agreement."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpux.config.load import Project
from gpux.config.schema import Verify
from gpux.errors import BuildFailed, GpuxError, InputError, ModelError, VerificationFailed, error_lines, first_line

if TYPE_CHECKING:
    from gpux.plan.targets import Target
    from gpux.runtimes import Job, Step

# default tolerances per execution precision; a value set in `verify:` overrides it for every precision
DEFAULTS: dict[str, dict[str, float | None]] = {
    "fp32": {"atol": 1e-4, "rtol": 1e-3, "min_within": 0.999, "min_cosine": 0.9999, "min_top1": 1.0},
    "bf16": {"atol": None, "rtol": None, "min_within": None, "min_cosine": 0.995, "min_top1": 0.75},
    "fp16": {"atol": None, "rtol": None, "min_within": None, "min_cosine": 0.999, "min_top1": 0.75},
    "best": {"atol": None, "rtol": None, "min_within": None, "min_cosine": 0.999, "min_top1": 0.75},
    "int8": {"atol": None, "rtol": None, "min_within": None, "min_cosine": 0.98, "min_top1": 0.5},
}
KEYS = ("atol", "rtol", "min_within", "min_cosine", "min_top1")
NEGLIGIBLE = 1e-5  # an output whose reference and error both stay below this is not judged by cosine


def tolerances(precision: str, verify: Verify) -> dict[str, float | None]:
    tol = dict(DEFAULTS.get(precision, DEFAULTS["fp32"]))
    for key in KEYS:
        value = getattr(verify, key, None)
        if value is not None:
            tol[key] = value
    if tol["atol"] is None and tol["rtol"] is not None:
        tol["atol"] = 0.0
    if tol["rtol"] is None and tol["atol"] is not None:
        tol["rtol"] = 0.0
    if tol["atol"] is not None and tol["min_within"] is None:
        tol["min_within"] = 1.0
    return tol


@dataclass
class Verification:
    passed: bool
    precision: str
    tolerances: dict[str, float | None]
    outputs: dict[str, dict[str, Any]]
    failures: list[str]
    samples: int
    data: str = "generated"  # where the inputs came from: generated, verify.data, --file
    shapes: dict[str, int] | None = None  # sizes generated inputs gave symbolic dims

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "precision": self.precision, "tolerances": self.tolerances,
                "samples": self.samples, "data": self.data, "shapes": self.shapes, "outputs": self.outputs,
                "failures": self.failures}

    def summary(self) -> str:
        worst = min((o["cosine"] for o in self.outputs.values()), default=1.0)
        abs_ = max((o["max_abs"] for o in self.outputs.values()), default=0.0)
        top1 = [o["top1"] for o in self.outputs.values() if o.get("top1") is not None]
        parts = [f"max-abs {abs_:.3g}", f"cosine {worst:.6f}"]
        if top1:
            parts.append(f"top-1 {min(top1):.0%}")
        parts.append(f"{self.samples} {self.data} sample{'s' if self.samples != 1 else ''}")
        return ("passed" if self.passed else "FAILED") + f" at {self.precision} (" + ", ".join(parts) + ")"


def classifications(project: Project) -> set[str]:
    """Outputs compared by top-1 agreement: `verify.classifications`, else outputs with declared labels."""
    named = project.config.verify.classifications
    if named is not None:
        return set(named)
    return {n for n, s in (project.config.outputs or {}).items() if s.labels is not None}


def compare(names: Sequence[str], reference: Sequence[Sequence[Any]], got: Sequence[Sequence[Any]],
            precision: str, tol: dict[str, float | None], classes: set[str] | None = None) -> Verification:
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
        top1 = None
        if name in (classes or set()) and ref[0].ndim >= 1 and ref[0].size:
            agree = [np.argmax(a, axis=-1) == np.argmax(b, axis=-1) for a, b in zip(ref, out, strict=True)]
            top1 = float(np.concatenate([np.ravel(x) for x in agree]).mean())
        metrics, problems = _dense(name, ref, out, tol)
        outputs[name] = {**metrics, "top1": top1}
        failures += problems
        if top1 is not None and tol["min_top1"] is not None and top1 < tol["min_top1"]:
            failures.append(f"{name}: top-1 agreement {top1:.0%} < min_top1 {tol['min_top1']:.0%}")
    return Verification(not failures, precision, tol, outputs, failures, len(reference))


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


def _dense(name: str, ref: list[Any], out: list[Any], tol: dict[str, float | None]) -> tuple[dict, list[str]]:
    """Metrics of one numeric output; NaN/inf in the same places with the same values count as agreement."""
    import numpy as np

    r = np.concatenate([a.astype(np.float64).ravel() for a in ref])
    g = np.concatenate([b.astype(np.float64).ravel() for b in out])
    finite_r, finite_g = np.isfinite(r), np.isfinite(g)
    same_special = ~finite_r & ~finite_g & ((np.isnan(r) & np.isnan(g)) | (r == g))
    problems = []
    mismatched = int(np.count_nonzero((finite_r != finite_g) | (~finite_r & ~finite_g & ~same_special)))
    if mismatched:
        problems.append(f"{name}: {mismatched} of {r.size} values are NaN/inf in only one of reference and "
                        f"artifact")
    both = finite_r & finite_g
    r, g = r[both], g[both]
    diff = np.abs(g - r)
    max_abs = float(diff.max()) if diff.size else 0.0
    scale = float(np.abs(r).max()) if r.size else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    cosine = _cosine(r, g, max_abs)
    within = 1.0
    if tol["atol"] is not None and r.size:
        within = float(np.count_nonzero(diff <= tol["atol"] + (tol["rtol"] or 0.0) * np.abs(r)) / r.size)
        if tol["min_within"] is not None and within < tol["min_within"]:
            bad = r.size - round(within * r.size)
            problems.append(f"{name}: {bad} of {r.size} values outside atol {tol['atol']:g} + rtol "
                            f"{tol['rtol']:g}·|ref| (within {within:.2%} < min_within {tol['min_within']:.2%}; "
                            f"max-abs {max_abs:.3g})")
    negligible = scale < NEGLIGIBLE and max_abs < NEGLIGIBLE  # cosine of rounding noise means nothing
    if tol["min_cosine"] is not None and cosine < tol["min_cosine"] and not negligible:
        problems.append(f"{name}: cosine {cosine:.6f} < min_cosine {tol['min_cosine']}")
    return {"max_abs": max_abs, "max_rel": max_rel, "cosine": cosine, "within": within}, problems


# ---- running a verification ---------------------------------------------------------------------------
def reference(project: Project, source: Any = None) -> tuple[list[str], Callable[[dict[str, Any]], list[Any]]]:
    """Output names and the FP32 reference: the source model itself (ONNX Runtime CPU, no graph
    optimization; a PyTorch source runs in PyTorch)."""
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.runtimes import resolve

    fmt = source_format(project)
    if fmt in TORCH_FORMATS:
        runner = resolve("gpux.runtimes.torch_export:reference_runner")(project.source, fmt)
        return list((project.config.outputs or {}).keys()), runner
    from gpux.runtimes import onnxruntime as ort

    ref = ort.create_session(source or project.source, "CPUExecutionProvider", None, level="disabled")
    return ref.output_names, ref.run


def short(exc: BaseException) -> str:
    """One line of a runtime's error: ONNX Runtime's status message without its source location."""
    import re

    lines = error_lines(exc)
    if lines and lines[0].startswith("Exception from"):  # OpenVINO: source locations first, the reason last
        from gpux.runtimes.openvino import reason

        return first_line(exc, reason(exc))
    text = lines[0] if lines else ""
    text = text.split("Status Message:")[-1]
    text = re.sub(r"Load model from \S+ failed:", "", text)
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"/onnxruntime_src/\S+:\d+ (\S+\([^)]*\)( \[with [^\]]*\])? )?", "", text)
    return first_line(exc, text.strip())


def reference_outputs(job: Job, run: Callable[[dict[str, Any]], list[Any]], feeds: list[dict[str, Any]],
                      data: str) -> list[Any]:
    """The reference's outputs on `feeds`; a model that rejects generated or declared inputs is a ModelError
    (no provider helps), one that rejects the inputs in hand an InputError."""
    from gpux.quality.calibrate import describe_generated
    from gpux.runtimes.onnxruntime import quiet_stderr

    try:
        with quiet_stderr():
            return [run(f) for f in feeds]
    except Exception as exc:
        if data == "--file":
            raise InputError(f"the model rejected the inputs: {short(exc)}") from None
        if data != "generated":
            raise ModelError(f"the model fails on the {data} inputs in ONNX Runtime: {short(exc)}") from None
        raise ModelError(f"the model rejects the generated verification inputs ({describe_generated(job)}): "
                         f"{short(exc)}", hint="declare sizes of symbolic dims (shapes:), value ranges of integer "
                         "inputs (inputs.NAME.range), or real samples (verify.data)") from None


@dataclass(frozen=True)
class Goal:
    """What verification will hold a build to: its inputs, the FP32 reference's outputs on them, and the
    cosine it asks for (what accuracy-aware quantization aims at)."""

    feeds: list[dict[str, Any]]
    reference: list[Any]
    min_cosine: float
    data: str

    def cosine(self, got: Sequence[Sequence[Any]], samples: Sequence[int] | None = None) -> float:
        """How verification would score `got` (the outputs on `samples` of the feeds, default all)."""
        reference = self.reference if samples is None else [self.reference[i] for i in samples]
        return pooled_cosine(reference, got)


def accuracy_goal(job: Job, target: Target) -> Goal:
    from gpux.quality import calibrate

    feeds, data = (job.samples, "--file") if job.samples else calibrate.verification_feeds(job)
    _, run = reference(job.project, job.source)
    wanted = tolerances(execution_precision(target), job.project.config.verify)["min_cosine"]
    return Goal(feeds, reference_outputs(job, run, feeds, data), float(wanted or 0.0), data)


def run_verification(job: Job, step: Step, target: Target, artifact: Any) -> dict[str, Any]:
    """Verify one built artifact on the job's samples (or verify.data, or generated inputs) at the
    precision it executes at; a candidate runtime that cannot run them fails the build (a fallback reason)."""
    from gpux.quality import calibrate
    from gpux.runtimes import resolve

    if step.verify is None:
        return {"skipped": f"{target.step} cannot run on this machine"}
    try:
        runner = resolve(step.verify)(artifact, target)
    except GpuxError:
        raise
    except Exception as exc:
        raise BuildFailed(f"verification: {target.id} cannot be opened: {short(exc)}") from None
    if isinstance(runner, str):
        return {"skipped": runner}
    try:
        names, reference_run = reference(job.project, job.source)
    except GpuxError:
        raise
    except Exception as exc:  # ONNX Runtime lacks an operator another runtime has: nothing to compare with
        raise BuildFailed(f"{target.id} cannot be verified: the FP32 reference (ONNX Runtime) cannot load the "
                          f"model: {short(exc)}", hint="--no-verify runs it unverified") from None
    feeds, data = (job.samples, "--file") if job.samples else calibrate.verification_feeds(job)
    try:
        reference_out = reference_outputs(job, reference_run, feeds, data)
    except ModelError:
        retry = calibrate.retry_shapes(job) if data == "generated" else None
        if retry is None:
            raise
        job = dataclasses.replace(job, shapes=retry)
        feeds, data = calibrate.verification_feeds(job)
        reference_out = reference_outputs(job, reference_run, feeds, data)
        job.log(f"note: {target.id}: generated inputs with undeclared dims of 1 were invalid for the model; "
                f"verified with {calibrate.describe_generated(job)} (declare shapes: to choose)")
    from gpux.runtimes.onnxruntime import quiet_stderr

    try:
        with quiet_stderr():
            got = [runner(f) for f in feeds]
    except Exception as exc:
        raise BuildFailed(f"verification: {target.id} fails on inputs the FP32 reference runs: {short(exc)}",
                          hint="the runtime may not support an operator or shape of this model") from None
    precision = execution_precision(target)
    tol = tolerances(precision, job.project.config.verify)
    result = compare(names or [f"output_{i}" for i in range(len(got[0]))], reference_out, got, precision, tol,
                     classifications(job.project))
    result.data = data
    if data == "generated":
        result.shapes = {k: v for k, v in job.shapes.items()}
    job.log(f"verify {target.id}: {result.summary()}")
    if not result.passed:
        lines = "\n".join(f"  {f}" for f in result.failures)
        raise VerificationFailed(
            f"{target.id} failed verification against the FP32 reference:\n{lines}",
            hint="loosen verify: tolerances in gpux.yml, or build with --no-verify",
        )
    return result.to_dict()


def execution_precision(target: Target) -> str:
    """The precision the artifact computes at: OpenVINO's execution precision where it is below fp32."""
    if target.step != "openvino-ir" or target.precision == "int8":
        return target.precision
    from gpux.providers.options import OpenVINOOptions
    from gpux.runtimes.openvino_options import openvino_execution_precision

    hint = openvino_execution_precision(OpenVINOOptions.model_validate(target.options))
    return {"bf16": "bf16", "f16": "fp16"}.get(hint, target.precision)
