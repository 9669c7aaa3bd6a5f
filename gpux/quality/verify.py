"""Verifies a built artifact against the FP32 reference on representative data where there is any: which
inputs (quality.calibrate), the reference's outputs, the comparison per output kind (quality.metrics) at the
precision the artifact executes at, and the verdict (verified, unverified, or a failure)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux.arrays import Feeds, Outputs
from gpux.config.load import Project
from gpux.documents import Generated, Judged, RateDoc, VerificationDoc
from gpux.errors import BuildFailed, GpuxError, ModelError, VerificationFailed
from gpux.quality.evidence import CONFIDENCE, RULES, loosened, shortfall, shown_lines, weigh
from gpux.quality.metrics import DEFAULTS, KEYS, LOSSY, Rule, Verification, compare, pooled_cosine, tolerances
from gpux.quality.references import REFERENCES
from gpux.quality.values import tree_ensembles

if TYPE_CHECKING:
    from gpux.config.steps import Postprocess
    from gpux.plan.targets import Target
    from gpux.quality.calibrate import Data
    from gpux.runtimes import ArtifactKind, Job


def classifications(project: Project) -> set[str]:
    """Outputs compared by top-k agreement along their last axis: `verify.classifications`, else outputs with
    declared labels but no boxes (a detector's classes are not its last axis: its boxes are compared as answers);
    and outputs whose post-processing answers top-k classes."""
    outputs = project.config.outputs or {}
    named = project.config.verify.classifications
    post = {n: s.postprocess for n, s in outputs.items() if s.postprocess is not None}
    declared = set(named) if named is not None else \
        {n for n, s in outputs.items() if s.labels is not None and getattr(post.get(n), "boxes", None) is None}
    return declared | {n for n, p in post.items() if p.topk is not None}


def postprocessing(project: Project) -> dict[str, Postprocess]:
    """The declared post-processing of each output that has one (its answers are compared too)."""
    return {n: s.postprocess for n, s in (project.config.outputs or {}).items() if s.postprocess is not None}


def judged(project: Project, sizes: dict[str, int]) -> Judged:
    """What a verdict depends on besides the thresholds (part of a cache key): which outputs are class scores
    (labeled, or answering top-k), the post-processing whose answers are compared, and what generated inputs
    look like (value ranges, sizes of symbolic dims) when no real data is declared."""
    from gpux.quality.calibrate import ranges

    generated: Generated | None = None if project.config.verify.data else {"ranges": ranges(project), "sizes": sizes}
    answers = {n: p.model_dump(mode="json") for n, p in postprocessing(project).items()}
    code = {p.python: _code_digest(project.root, p.python) for p in postprocessing(project).values() if p.python}
    out: Judged = {"classes": sorted(classifications(project)), "answers": answers, "generated": generated,
                   "evidence": RULES}
    if code:
        out["code"] = code
    return out


def image_sizes(project: Project, feeds: Sequence[Feeds]) -> list[tuple[int, int] | None]:
    """Each sample's (height, width) at the image input (the first one), None where there is none."""
    images = {n: s.preprocess.image for n, s in (project.config.inputs or {}).items()
              if s.preprocess is not None and s.preprocess.image is not None}
    if not images:
        return [None] * len(feeds)
    name, image = next(iter(images.items()))
    at = (2, 3) if image.layout == "nchw" else (1, 2)
    return [(int(f[name].shape[at[0]]), int(f[name].shape[at[1]])) if name in f and f[name].ndim == 4 else None
            for f in feeds]


def _code_digest(root: Path, target: str) -> str | None:
    """The sha256 of the file a python step's module is in, under `root` (its answers are judged by it)."""
    import hashlib

    module = root.joinpath(*target.split(":")[0].split("."))
    for path in (module.with_suffix(".py"), module / "__init__.py"):
        if path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()
    return None


def rules(project: Project, precision: str, names: Sequence[str]) -> dict[str, Rule]:
    """Each output's thresholds (verify:, then verify.outputs.NAME), kind, channel axis and whether its declared
    postprocess decodes it into answers (labels, boxes, texts); the others' float values are continuous."""
    from gpux.quality.agreement import answer_kind

    v = project.config.verify
    decoded = {n for n, p in postprocessing(project).items() if answer_kind(p) is not None}
    unknown = sorted((set(v.outputs) | set(v.classifications or ())) - set(names))
    if unknown:
        raise ModelError(f"{project.path}: verify names output {unknown[0]!r}, which the model does not have "
                         f"(outputs: {', '.join(names)})")
    out = {}
    for name in names:
        check = v.outputs.get(name)
        user = frozenset(k for k in KEYS for block in (v, check) if getattr(block, k, None) is not None)
        out[name] = Rule(tolerances(precision, v, check), check.kind if check else "auto",
                         check.axis if check else None, user, name in decoded)
    return out


# ---- running a verification ---------------------------------------------------------------------------
def reference(project: Project, source: Path | None = None) -> tuple[list[str], Callable[[Feeds], Outputs]]:
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
    """One line of a runtime's error, read as its runtime writes them (`gpux.runtimes.MESSAGES`)."""
    from gpux.runtimes import error_line

    return error_line(exc)


def reference_outputs(job: Job, run: Callable[[Feeds], Outputs], feeds: list[Feeds], data: str) -> list[Outputs]:
    """The reference's outputs on `feeds`; a model that rejects generated or declared inputs is a ModelError
    (no provider helps)."""
    from gpux.quality.calibrate import describe_generated
    from gpux.runtimes.onnxruntime import quiet_stderr

    try:
        with quiet_stderr():
            return [run(f) for f in feeds]
    except Exception as exc:  # the reference (ONNX Runtime, PyTorch) raises anything on inputs it refuses
        if data != "generated":
            raise ModelError(f"the model fails on the {data} inputs in ONNX Runtime: {short(exc)}") from exc
        raise GeneratedRejected(f"the model rejects the generated verification inputs ({describe_generated(job)}): "
                                f"{short(exc)}", hint=GENERATED_FIX) from exc


GENERATED_FIX = "declare sizes of symbolic dims (shapes:), value ranges of integer inputs (inputs.NAME.range), or " \
    "real samples (verify.data)"


class GeneratedRejected(ModelError):
    """The FP32 reference itself cannot run the inputs gpux generates (a model that wants real data): nothing to
    judge a lossy build on; a lossless one is built, unverified."""


@dataclass(frozen=True)
class Goal:
    """What verification will hold a build to: its inputs, the FP32 reference's outputs on them, and the
    cosine it asks for (what accuracy-aware quantization aims at)."""

    feeds: list[Feeds]
    reference: list[Outputs]
    min_cosine: float
    data: str

    def cosine(self, got: Sequence[Outputs], samples: Sequence[int] | None = None) -> float:
        """How verification would score `got` (the outputs on `samples` of the feeds, default all)."""
        reference = self.reference if samples is None else [self.reference[i] for i in samples]
        return pooled_cosine(reference, got)


def accuracy_goal(job: Job, target: Target) -> Goal:
    """What accuracy-aware quantization validates on: the declared calibration samples, else seeded generated
    inputs; never the samples verification judges on, so passing its own validation is not the verdict."""
    from gpux.quality import calibrate

    feeds = calibrate.calibration_samples(job.project, target, job.inputs)
    data = "calibration"
    if not feeds:
        feeds, data = calibrate.generated(job), "generated"
    _, run = reference(job.project, job.source)
    wanted = tolerances(execution_precision(target), job.project.config.verify)["min_cosine"]
    return Goal(feeds, reference_outputs(job, run, feeds, data), float(wanted or 0.0), data)


def run_verification(job: Job, kind: ArtifactKind, target: Target, artifact: Path,
                     opened: Callable[[Feeds], Outputs] | None = None) -> VerificationDoc:
    """Verify one built artifact at the precision it executes at, on representative data where declared (`opened`:
    the artifact as its build step opened it, `runtimes.Built`). A lossy (int8) artifact checked on generated data
    only is "unverified", whatever its metrics; a candidate runtime that cannot run the inputs fails the build (a
    fallback reason)."""
    verify = kind.verify_step()
    if verify is None:
        return {"status": "skipped", "skipped": f"{target.kind} cannot run on this machine"}
    try:
        runner = opened or verify(artifact, target)
    except GpuxError:
        raise
    except Exception as exc:  # runtimes raise anything on an artifact they cannot open (no common base class;
        # gpux's own runtimes/ raise RuntimeError for one too, so a gpux bug cannot be told apart here yet)
        raise BuildFailed(f"verification: {target.id} cannot be opened: {short(exc)}") from exc
    if isinstance(runner, str):
        return {"status": "skipped", "skipped": runner}
    try:
        names, data, reference_out, job = _reference_on_data(job, target)
    except GeneratedRejected as exc:  # a lossless artifact runs what the model runs: built, said unverified
        if execution_precision(target) != "fp32":
            raise
        return {"status": "unverified", "unverified": f"{exc.message}; {GENERATED_FIX}", "data": "generated",
                "precision": target.precision, "rejected": short(exc.__cause__ or exc)}
    from gpux.runtimes.onnxruntime import quiet_stderr

    try:
        with quiet_stderr():
            got = [runner(f) for f in data.feeds]
    except Exception as exc:  # runtimes raise anything on inputs they cannot run (no common base class)
        raise BuildFailed(f"verification: {target.id} fails on inputs the FP32 reference runs: {short(exc)}",
                          hint="the runtime may not support an operator or shape of this model") from exc
    precision = execution_precision(target)
    names = names or [f"output_{i}" for i in range(len(got[0]))]
    judged = rules(job.project, precision, names)
    result = compare(names, reference_out, got, precision, tolerances(precision, job.project.config.verify),
                     classifications(job.project), judged)
    from gpux.quality.agreement import Runs, add_answers
    from gpux.quality.values import judge_values

    result.failures += judge_values(result.outputs, {n: r.tol.get("min_rows_within") for n, r in judged.items()},
                                    data.representative)

    add_answers(result, postprocessing(job.project), Runs(names, reference_out, got), judged, data.representative,
                job.project.root, image_sizes(job.project, data.feeds))
    return verdict(job, target, result, data, judged)


def _reference_on_data(job: Job, target: Target) -> tuple[list[str], Data, list[Outputs], Job]:
    """The verification inputs, the reference's output names and outputs on them (generated inputs retried
    with larger undeclared dims once when the model rejects dims of 1), and the job as it ended up."""
    from gpux.quality import calibrate

    try:
        names, reference_run = reference(job.project, job.source)
    except GpuxError:
        raise
    except Exception as exc:  # ONNX Runtime lacks an operator another runtime has: nothing to compare with
        raise BuildFailed(f"{target.id} cannot be verified: the FP32 reference (ONNX Runtime) cannot load the "
                          f"model: {short(exc)}", hint="--no-verify runs it unverified") from exc
    data = calibrate.verification_data(job, target)
    key = REFERENCES.key(job.source or job.project.source, data.digest)
    kept = REFERENCES.get(key)
    if kept is not None:  # the candidate before this one was judged on the same rows against the same reference
        names, data, out, shapes = kept
        return names, data, out, job if shapes == job.shapes else dataclasses.replace(job, shapes=shapes)
    try:
        out = reference_outputs(job, reference_run, data.feeds, data.source)
    except ModelError:
        retry = calibrate.retry_shapes(job) if data.source == "generated" else None
        if retry is None:
            raise
        job = dataclasses.replace(job, shapes=retry)
        data = calibrate.verification_data(job, target)
        out = reference_outputs(job, reference_run, data.feeds, data.source)
        job.log(f"note: {target.id}: generated inputs with undeclared dims of 1 were invalid for the model; "
                f"verified with {calibrate.describe_generated(job)} (declare shapes: to choose)")
    check_output_shapes(job, names, data.feeds, out)
    REFERENCES.put(key, (names, data, out, job.shapes))
    return names, data, out, job



def verdict(job: Job, target: Target, result: Verification, data: Data,
            judged: Mapping[str, Rule] | None = None) -> VerificationDoc:
    """The record kept in the manifest: verified; unverified (lossy, on generated data only, or on too few real
    rows to show its floors: a warning, and its failures shown); or, on representative data or at a precision
    generated data can judge, a failure. What the rows show of each rate (its one-sided lower bound) is recorded,
    and the thresholds set looser than the defaults."""
    result.data, result.extra = data.source, {"data_digest": data.digest, "representative": data.representative,
                                              "rows": data.rows}
    if not data.representative:
        result.shapes = dict(job.shapes)
    trees = tree_ensembles(job.source) if result.precision != "fp32" else []
    confidence = job.project.config.verify.confidence
    weighed = weigh(result.outputs, {n: r.tol for n, r in (judged or {}).items()}, confidence) \
        if data.representative else []
    result.extra["evidence"] = {"confidence": confidence, "bound": "wilson", "rates": list(weighed)}
    result.extra["loosened"] = loosened(({k: r.tol.get(k) for k in r.user} for r in (judged or {}).values()),
                                        DEFAULTS.get(result.precision, DEFAULTS["fp32"]), confidence)
    why = unverified_why(result, data, weighed, confidence, trees)
    result.status = "unverified" if why else "verified"
    job.log(f"verify {target.id}: {result.summary()}")
    if not result.passed and (data.representative or not lossy(result.precision, trees)):
        lines = "\n".join(f"  {f}" for f in [*result.failures, *shown_lines(weighed, confidence)])
        failed = VerificationFailed(
            f"{target.id} failed verification against the FP32 reference on {data.source} inputs:\n{lines}",
            hint="loosen verify: thresholds in gpux.yml (verify.outputs.NAME for one output), choose another "
                 "precision, or build with --no-verify",
        )
        failed.verification = {**result.to_dict(), "status": "failed"}
        raise failed
    if why:
        result.extra["unverified"] = why
        seen = f"; on generated data it failed: {'; '.join(result.failures)}" if result.failures else ""
        job.log(f"warning: {target.id}: unverified: {why}{seen} ({UNVERIFIED_FIX})")
    return result.to_dict()


MIN_ROWS = 10  # real rows a lossy verdict needs where no rate is counted (dense outputs, judged by cosine)
UNVERIFIED_FIX = ("judge it on more real rows: verify.data, calibration data, or verify.derive (crops and flips of "
                  "each declared sample)")


def lossy(precision: str, trees: Sequence[str] = ()) -> bool:
    """Whether only real rows judge an artifact at `precision`: int8 and TensorRT's best, and any precision below
    fp32 of a tree ensemble (the rounding of its features moves them across its thresholds)."""
    return precision in LOSSY or (bool(trees) and precision != "fp32")


def unverified_why(result: Verification, data: Data, weighed: Sequence[RateDoc] = (),
                   confidence: float = CONFIDENCE, trees: Sequence[str] = ()) -> str:
    """Why an artifact cannot be called verified on this data ("" when it can): lossy (int8, best, a tree
    ensemble below fp32) on generated or calibration data, or on real rows too few to show a floor its answers
    meet; continuous outputs below fp32 on generated data, or on real rows too few to show their floor."""
    from gpux.quality.values import continuous, why_unverified

    if not lossy(result.precision, trees):
        values = [w for w in weighed if w["metric"] == "rows_within"]
        return why_unverified(result.precision, continuous(result.outputs), (), data.representative) or \
            shortfall(values, confidence)
    if not data.representative and data.source == "generated" and trees and result.precision not in LOSSY:
        return why_unverified(result.precision, (), trees, False)
    if data.source != "generated" and not data.representative:
        return f"an {result.precision} artifact checked on the samples it was calibrated on (nothing held out)"
    if not data.representative:
        return f"an {result.precision} artifact checked on generated data only"
    if weighed:
        return shortfall(list(weighed), confidence)
    if data.rows < MIN_ROWS:
        return f"an {result.precision} artifact checked on only {data.rows} real sample{'s' if data.rows != 1 else ''}"
    return ""


def check_output_shapes(job: Job, names: Sequence[str], feeds: list[Feeds], outputs: list[Outputs]) -> None:
    """Declared output shapes against what the reference returns: fixed dims equal, a named dim the same size
    wherever it appears (inputs included)."""
    declared = job.project.config.outputs or {}
    for feed, values in zip(feeds, outputs, strict=True):
        sizes: dict[str, int] = {}
        for name, t in job.inputs.items():
            for d, n in zip(t.shape or (), getattr(feed.get(name), "shape", ()), strict=False):
                if isinstance(d, str):
                    sizes.setdefault(d, int(n))
        for name, value in zip(names, values, strict=False):
            spec = declared.get(name)
            if spec is None or spec.shape is None:
                continue
            problem = shape_problem(list(spec.shape), tuple(getattr(value, "shape", ())), sizes)
            if problem:
                raise ModelError(f"{job.project.path}: outputs.{name}.shape: declared {list(spec.shape)} but the "
                                 f"model returns {list(value.shape)} ({problem})",
                                 hint=f"fix outputs.{name}.shape in gpux.yml, or leave it out")


def shape_problem(declared: list[Any], got: tuple[int, ...], sizes: dict[str, int]) -> str | None:
    if len(declared) != len(got):
        return f"rank {len(got)}, not {len(declared)}"
    for i, (d, n) in enumerate(zip(declared, got, strict=True)):
        if isinstance(d, int) and d >= 0 and d != n:
            return f"dim {i} is {n}, not {d}"
        if isinstance(d, str) and sizes.setdefault(d, n) != n:
            return f"dim {i} ({d}) is {n} where {d} is {sizes[d]}"
    return None


def execution_precision(target: Target) -> str:
    """The precision the artifact computes at: where its kind's runtime says (`ArtifactKind.precision`: OpenVINO's
    execution precision where it is below fp32), else the target's."""
    from gpux.runtimes import kind_of, resolve

    step = kind_of(target.kind).precision
    return target.precision if step is None else str(resolve(step)(target))
