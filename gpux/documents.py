"""The documents a verification, a plan and a build write, with typed fields (each output's metrics, agreement per
answer kind, evidence, the verification record, a lossy artifact's speed), read by every room that renders them.
Plain dicts at run time (TypedDicts): what lands on disk is the record as it is. Typing only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NotRequired, TypeAlias, TypedDict


class TopkAgreement(TypedDict):
    """Top-k answers (`agreement.topk_agreement`): over the rows whose reference ranks its best class."""

    k: int
    rows: int
    top1: NotRequired[float]
    topk_overlap: NotRequired[float]  # where k > 1

class BoxAgreement(TypedDict):
    """Boxes after NMS (`agreement.box_agreement`), pooled over rows."""

    rows: int
    reference_boxes: int
    artifact_boxes: int
    matched: int
    match_iou: float
    precision: float
    recall: float
    f1: float
    mean_iou: float | None
    confident_reference_boxes: int
    confident_artifact_boxes: int
    recall_confident: float | None
    precision_confident: float | None


class TextAgreement(TypedDict):
    """Texts (`agreement.text_agreement`): exact matches and the character error rate."""

    rows: int
    exact_match: float
    cer: float
    confident_rows: int
    exact_confident: float | None


class ExactAgreement(TypedDict):
    """A python step's answers (`agreement.exact_agreement`), compared as text."""

    rows: int
    exact_match: float


class VectorAgreement(TypedDict):
    """Embeddings (`agreement.vector_agreement`): each row's cosine of the artifact's vector with the reference's."""

    rows: int
    close: float  # the share of rows at close_at or more
    close_at: float
    least_cosine: float
    mean_cosine: float

Agreement: TypeAlias = TopkAgreement | BoxAgreement | TextAgreement | ExactAgreement | VectorAgreement


class AnswersRecord(TypedDict, total=False):
    """An output's answers against the reference's, as kept in its metrics: the kind's agreement, whether it was
    judged (real data), or why it was skipped."""

    kind: str
    skipped: str
    judged: bool
    rows: int
    k: int
    top1: float
    topk_overlap: float
    reference_boxes: int
    artifact_boxes: int
    matched: int
    match_iou: float
    precision: float
    recall: float
    f1: float
    mean_iou: float | None
    confident_reference_boxes: int
    confident_artifact_boxes: int
    recall_confident: float | None
    precision_confident: float | None
    exact_match: float
    cer: float
    confident_rows: int
    exact_confident: float | None
    close: float
    close_at: float
    least_cosine: float
    mean_cosine: float
    mean_oks: float | None
    mean_mask_iou: float | None


class ValuesRecord(TypedDict):
    """A continuous output's rows (`values.values_record`): the share whose worst move is within tolerance × scale."""

    rows: int
    rows_within: float
    moved: int
    tolerance: float
    scale: float
    max_rel: float  # the worst row's move over the scale (its move: the output's max_abs)
    worst_row: int
    judged: bool  # on real data


class OutputMetrics(TypedDict, total=False):
    """How close one output came to the reference (`metrics.compare`): its kind (exact, dense, scores,
    distribution), the tensor metrics, its worst slice, class-score agreement, and its answers'."""

    kind: str
    max_abs: float
    max_rel: float
    cosine: float
    within: float
    slice_axis: int
    slice_cosine: float
    worst_slice: int
    slices_below: int
    rows: int
    top1: float
    top5: float
    confident_rows: int
    top1_confident: float
    sum_error: float
    values: ValuesRecord
    answers: AnswersRecord


class RateDoc(TypedDict):
    """One counted rate of one output as the judged rows show it (`quality.evidence.weigh`), as records keep it:
    `agree` of `rows` (the `observed` rate), its one-sided lower `bound`, the `floor` it is held to, whether the rows
    show it, and the rows that would (None: none can)."""

    output: str
    metric: str
    label: str
    rows: int
    agree: int
    observed: float
    bound: float
    floor: float
    shown: bool
    needed: int | None


class Evidence(TypedDict):
    """What the judged rows show: the confidence, the bound used, and each counted rate."""

    confidence: float
    bound: str
    rates: list[RateDoc]


class Extra(TypedDict, total=False):
    """What a verdict adds to the comparison (`verify.verdict`): the data's digest and rows, the evidence, the
    thresholds set looser than the defaults, and why it is unverified."""

    data_digest: str
    representative: bool
    rows: int
    evidence: Evidence
    loosened: list[str]
    unverified: str


class VerificationDoc(Extra, total=False):
    """The verification record of an artifact (its manifest's `verification`): the verdict, precision,
    thresholds, data and each output's metrics; or why it was skipped or is unverified without a comparison."""

    status: str  # verified | unverified | failed | skipped
    passed: bool
    precision: str
    tolerances: dict[str, float | None]
    samples: int
    data: str
    shapes: dict[str, int] | None
    outputs: dict[str, OutputMetrics]
    failures: list[str]
    skipped: str
    rejected: str


class SpeedDoc(TypedDict):
    """A lossy artifact's speed beside a plain fp32 session of its source (`quality.speed`; info.vs_plain)."""

    speedup: float
    low: float
    high: float
    against: str


class AttemptDoc(TypedDict):
    """One provider's try as documents carry it (`run.fallback.Attempt.to_dict`, a --json document's attempts)."""

    provider: str
    stage: str  # probe | build | session | first-inference | placement | ok
    ok: bool
    reason: str
    fix: str | None


class TargetDoc(TypedDict):
    """One target as documents carry it (`plan.targets.Target.to_dict`; a manifest's `target`)."""

    id: str
    kind: str
    step: str  # the same as kind: what a store written before "kind" reads
    provider: str
    precision: str
    consumes: str
    options: dict[str, object]


class PlannedDoc(TargetDoc):
    """A planned target with its cache key and what the key covers (`artifacts.plan.Planned.to_dict`)."""

    key: str
    key_parts: dict[str, object]


class SelectionDoc(TypedDict):
    """What a command asked to run (`plan.select.Selection.to_dict`): the chain, where it came from."""

    chain: list[str]
    source: str
    strict: bool
    notes: list[str]


class AvailabilityDoc(TypedDict):
    """A provider's probe on this machine (`providers.row.Availability.to_dict`)."""

    provider: str
    status: str
    reason: str
    fix: str | None


class PlanDoc(TypedDict, total=False):
    """`gpux build --dry-run`'s document: the targets the provider would build (`artifacts.plan.BuildPlan`)."""

    name: str
    provider: str
    source: str
    targets: list[PlannedDoc]
    skipped: list[AttemptDoc]  # the providers of the selection passed over before it (probe, or a remembered build)
    instead: list[str]  # a lossy target that converts nothing of the model, planned as the fp32 artifact it makes
    selection: SelectionDoc
    available: AvailabilityDoc


class BuiltDoc(TypedDict):
    """One target built or found cached (`artifacts.build.TargetResult.to_dict`)."""

    target: TargetDoc
    key: str
    cached: bool
    reason: str
    seconds: float
    path: str
    size: int
    verification: VerificationDoc | None
    vs_plain: SpeedDoc | None


class BuildDoc(TypedDict, total=False):
    """`gpux build`'s document: what was built for which provider, what was asked, passed over and warned."""

    name: str
    provider: str
    targets: list[BuiltDoc]
    requested: SelectionDoc
    cannot_run: str | None
    attempts: list[AttemptDoc]
    warnings: list[str]


class ArtifactRow(TypedDict):
    """One artifact in the store as `gpux inspect` lists it: its state (current, tuned, stale, damaged), size,
    where it is, when it was built, its verdict and what it was keyed on."""

    id: str
    state: str
    problem: str | None
    size: int
    path: str
    built_at: str | None
    verification: VerificationDoc | None
    versions: object
    device: object
    info: Mapping[str, object] | None  # the build step's own document (its runtime's)



class LabelScore(TypedDict):
    label: str
    score: float


class OutputEntry(TypedDict, total=False):
    """One output in `gpux run --json`'s document: its dtype and shape, its values (or the -o file holding them),
    and, where gpux.yml gives it labels, the top classes of each row."""

    dtype: str
    shape: list[int]
    file: str
    data: object  # the values, as nested lists
    top: list[list[LabelScore]]



class PlacementDoc(TypedDict):
    """Which execution provider ran each node of one inference (`runtimes.onnxruntime.placement`)."""

    ep: str
    nodes: dict[str, int]  # execution provider -> nodes it ran
    total: int
    partitions: int  # runs of consecutive nodes off the CPU
    coverage: float  # the share of nodes `ep` ran


class VerifiedAs(TypedDict):
    """A session's artifact's verdict in short: verified / unverified / skipped, on which data."""

    status: str
    data: str | None
    skipped: str | None


class SessionReport(TypedDict, total=False):
    """What ran and why (`run.session.Session.report`): the providers asked for and tried, what runs, where, at
    which precision, its verdict, how long each phase took, and the runtime's own details."""

    requested: list[str]
    request_source: str
    chain: list[str]
    provider: str
    runs_on: str | None
    fell_back: bool
    attempts: list[AttemptDoc]
    warnings: list[str]
    placement: PlacementDoc | None
    phases: dict[str, float]
    runtime: Mapping[str, Any] | None  # the runner's details, as its runtime reports them
    precision: str
    execution_precision: str
    verification: VerifiedAs
    pipeline: list[str]  # a workspace's pipeline served as one model: its stages' models


class Generated(TypedDict):
    """What generated inputs look like: declared value ranges and the sizes of symbolic dims."""

    ranges: dict[str, tuple[float, float]]
    sizes: dict[str, int]


class Judged(TypedDict):
    """What a verdict depends on besides the thresholds (`verify.judged`, part of a cache key)."""

    classes: list[str]
    answers: dict[str, dict[str, Any]]  # each output's postprocess block, as pydantic dumps it to JSON
    generated: Generated | None
    evidence: str
    code: NotRequired[dict[str, str | None]]


def number(record: Mapping[str, object], key: str) -> float | None:
    """A record's metric named by a table (floors, counted rates): its value where it is a number, else None."""
    value = record.get(key)
    return value if isinstance(value, int | float) else None


__all__ = ["Agreement", "AnswersRecord", "BoxAgreement", "Evidence", "ExactAgreement", "Extra", "Generated", "Judged",
           "OutputMetrics", "RateDoc", "TextAgreement", "TopkAgreement", "ValuesRecord", "VectorAgreement",
           "VerificationDoc", "number"]
