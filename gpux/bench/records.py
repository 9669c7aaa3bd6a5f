"""The records the benchmark's and tune's modules pass each other, typed: a row of a benchmark document's `results`
(what `run --benchmark --json` prints, and what tune measures each candidate into), its accuracy, its speedup over
the plain session, the inputs its stages ran on, and tune's baseline and limiting layers (gpux.lock.json). They are
TypedDicts: the documents are these records as they are, so files and JSON output keep their shape."""

from __future__ import annotations

from typing import Any, TypedDict

from gpux.documents import AttemptDoc, OutputMetrics, RateDoc


class Figures(TypedDict, total=False):
    """A row's statistics as `gpux.bench.protocol.summarize` makes them (every key; a baseline document read back
    may lack some): latencies in seconds, throughput per second."""

    count: int
    min: float
    max: float
    mean: float
    std: float
    cv_pct: float
    p50: float
    p90: float
    p95: float
    p99: float
    p99_9: float | None
    throughput: float | None  # None: a stage alone (no measured window of its own)
    batch: int
    concurrency: int
    percentile_method: str
    warnings: list[str]
    stable: bool
    mad: float
    iqr: float
    median_ci: list[float]
    ci_level: float
    stalls: int
    stall_threshold: float


class Gate(TypedDict):
    """The --baseline gate's outcome, as the benchmark document records it."""

    file: str | None
    max_regression_pct: float
    regressions: list[str]
    notes: list[str]


class Speedup(TypedDict):
    """A candidate against the plain session: the ratio of their figures, the least and greatest ratio of a round,
    the median round ratio (what candidates are ranked by) and the rounds it is over (gpux.bench.rounds.speedup)."""

    speedup: float
    low: float
    high: float
    paired: float
    rounds: int


class Accuracy(TypedDict, total=False):
    """Every accuracy figure of a verification record (gpux.bench.accuracy.accuracy_of, which writes every key): the
    worst value of each metric over the outputs, the verdict, what it was judged on, and the record's own parts as it
    has them."""

    min_cosine: float | None
    max_abs: float | None
    slice_cosine: float | None
    top1: float | None
    top5: float | None
    top1_confident: float | None
    status: str  # verified | unverified | skipped
    data: str | None  # what it was judged on
    samples: int | None
    representative: bool | None
    tolerances: dict[str, float | None] | None  # the thresholds it was judged by
    outputs: dict[str, OutputMetrics]  # output -> its metrics, as the verification record (the manifest) has them
    evidence: list[RateDoc] | None  # the counted rates' bounds (gpux.quality.evidence.weigh)
    unverified: str | None  # why a lossy artifact is unverified
    loosened: list[str] | None


class Said(TypedDict, total=False):
    """Which inputs the stages ran on (gpux.bench.stages.stage_inputs): files, a generated image, or tensors."""

    kind: str  # files | generated | tensors
    files: list[str]
    size: list[int]  # a generated image's height and width
    note: str


class Pipelined(TypedDict):
    """Files per second the way `gpux run NAME FOLDER` answers them."""

    files_per_s: float
    files: int
    batch: int | None


class RowFacts(TypedDict, total=False):
    """What a row of a benchmark document says beside its figures, as the row has them (gpux.bench.protocol.result_row
    takes them by name)."""

    error: str
    fix: str | None
    failures: list[str]  # one line per failing metric of a verification
    accuracy: Accuracy | None
    build_info: dict[str, Any] | None  # what the build step reported (its manifest's `info`)
    requested: str
    runs_on: str
    request_source: str
    attempts: list[AttemptDoc]  # gpux.run.fallback.Attempt, as --json writes it
    artifact: str | None
    artifact_size: int | None
    verification_status: str
    artifact_sha256: str | None
    options: dict[str, Any]  # what the runtime opened (its runner's details)
    versions: dict[str, str | None] | None
    shapes: dict[str, list[int]]
    # rows timed through the declared steps (gpux.bench.stages.Split.summary)
    stages: dict[str, Figures | None]  # stage -> its figures (None: not declared), end_to_end: the row's own
    stage_latencies_ms: dict[str, list[float]]
    inputs: Said
    pipelined: Pipelined | None
    # what tune adds to a candidate's row
    round_scores: list[float]
    vs_plain_ort: Speedup | None


class Row(RowFacts, total=False):
    """One entry of a benchmark document's `results`: every row has provider, precision, status, stats (None: not
    measured), phases and latencies_ms, then its facts."""

    provider: str
    precision: str
    status: str  # ok | fell back to X | unavailable | failed verification | baseline
    stats: Figures | None  # None: not measured
    phases: dict[str, float | None]
    latencies_ms: list[float]


class Baseline(TypedDict, total=False):
    """The plain session tune measures against, as gpux.lock.json records it (`error`: why there is none)."""

    what: str
    source: str
    error: str
    p50: float
    throughput: float
    p50_ms: float | None
    p99_ms: float | None
    median_ci_ms: list[float | None]
    round_spread: list[float]
    rounds: int


class RankedOn(TypedDict):
    """What a build ranked layers on: its calibration samples and their digest."""

    samples: int
    digest: str


class Layer(TypedDict):
    """One layer as int8 hurts it: signal-to-quantization-noise in and out of it (dB), and what it lost."""

    layer: str
    in_db: float
    out_db: float
    lost_db: float


class Limiting(TypedDict):
    """The layers int8 hurts most on one provider, as its first mixed-precision build ranked them."""

    ranked_by: str
    ranked_on: RankedOn
    settings: str
    layers: list[Layer]


__all__ = ["Accuracy", "Baseline", "Figures", "Gate", "Layer", "Limiting", "Pipelined", "RankedOn", "Row", "RowFacts",
           "Said", "Speedup"]
