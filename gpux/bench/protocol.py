"""The benchmark protocol of gpux: how inference is warmed up, timed, summarized, compared and reported.

Runtime-independent (it is handed zero-argument callables) and comparable with trtexec,
onnxruntime_perf_test and OpenVINO benchmark_app: warm up until a least count AND a least time are met,
measure until a least count AND a least duration are met (optionally capped), pool the latencies of N
worker threads, and report throughput as samples over the measured wall window. Latencies are seconds.
"""

from __future__ import annotations

import bisect
import csv
import io
import itertools
import math
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing import Unpack

    from gpux.bench.records import Figures, Row, RowFacts

SCHEMA_VERSION = 1
PERCENTILE_METHOD = "linear (type 7)"  # numpy.percentile's default
CI_LEVEL = 0.95  # distribution-free confidence interval of the median (order statistics)
Z = 1.959964  # normal quantile for CI_LEVEL
PRECISE_PCT = 5.0  # a median known to within ±this percent (CI half-width) is "stable"
STALL_IQR = 3.0  # a call slower than Q3 + STALL_IQR × IQR and than STALL_MEDIAN × the median is a stall
STALL_MEDIAN = 2.0  # (an outlier: counted apart from the spread, which sub-microsecond timer steps dominate)
STALL_NOTE_PCT = 5.0  # stalls above this share of calls are worth a line
WINDOWS = 10  # consecutive windows whose medians show drift within a run
MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to the standard deviation of a normal

Infer = Callable[[], object]


@dataclass(frozen=True, kw_only=True)
class Protocol:
    """How long to warm up and measure; ``max_*`` cap the measurement, counts are pooled over workers."""

    warmup: int = 10
    warmup_seconds: float = 0.2
    runs: int = 100
    seconds: float = 3.0
    max_runs: int | None = None
    max_seconds: float | None = None
    concurrency: int = 1
    batch: int = 1

    def __post_init__(self) -> None:
        lows = dict(warmup=0, warmup_seconds=0, runs=1, seconds=0, max_runs=1, concurrency=1, batch=1)
        failed = [f"{k} >= {lo}" for k, lo in lows.items() if (v := getattr(self, k)) is not None and v < lo]
        if self.max_seconds is not None and self.max_seconds <= 0:
            failed.append("max_seconds > 0")
        if failed:
            raise ValueError(f"invalid benchmark protocol: need {', '.join(failed)}")


@dataclass(kw_only=True)
class Phases:
    """Wall time of each phase of a run, in seconds; None where a phase did not happen."""

    build_s: float | None = None
    load_s: float | None = None
    first_inference_s: float | None = None
    warmup_s: float | None = None
    measure_s: float | None = None
    compile_s: float | None = None  # part of load_s: torch.compile's first call, where the runtime compiles

    @property
    def time_to_ready_s(self) -> float | None:
        if self.load_s is None or self.first_inference_s is None:
            return None
        return self.load_s + self.first_inference_s

    def to_dict(self) -> dict[str, float | None]:
        return {**asdict(self), "time_to_ready_s": self.time_to_ready_s}


@dataclass
class Measurement:
    """Raw outcome of :func:`measure`: latencies of the measured calls and the window they span."""

    latencies_s: list[float]
    wall_s: float
    warmup_runs: int
    warmup_s: float


def _phase(fns: Sequence[Infer], clock: Callable[[], int], min_n: int, min_s: float,
           cap_n: int | None, cap_s: float | None) -> tuple[list[list[int]], int]:
    """Run every fn in its own worker until the pooled stop rule holds; return deltas (ns) per worker
    and the elapsed window (ns). Clock reads: one for the window start, then two per call."""
    last_n, min_ns = min_n - 1, min_s * 1e9  # last_n: 0-based index of the call that meets the count
    cap = sys.maxsize if cap_n is None else cap_n
    cap_ns = math.inf if cap_s is None else cap_s * 1e9
    # A call's ticket is its 0-based index in the pool: it caps the count exactly and tells the worker
    # when the least count is met. itertools.count.__next__ is atomic under the GIL: no lock needed.
    tickets, stop = itertools.count(), [False]
    outs: list[list[int]] = [[] for _ in fns]
    ends = [0] * len(fns)
    errors: list[BaseException] = []

    def work(i: int, start: int) -> None:
        fn, append, e = fns[i], outs[i].append, start
        try:
            while not stop[0] and (k := next(tickets)) < cap:
                s = clock()
                fn()
                e = clock()
                append(e - s)
                el = e - start
                if (k >= last_n and el >= min_ns) or el >= cap_ns:
                    stop[0] = True
        except BaseException as exc:  # whatever a call raises (Ctrl-C too) stops every worker, raised by the caller
            errors.append(exc)
            stop[0] = True
        ends[i] = e

    if len(fns) == 1:
        start = clock()
        work(0, start)
    else:
        gate, box = threading.Barrier(len(fns) + 1), [0]

        def run(i: int) -> None:
            gate.wait()
            work(i, box[0])

        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns))]
        for t in threads:
            t.start()
        start = box[0] = clock()
        try:
            gate.wait()
            for t in threads:
                t.join()
        finally:  # an interrupt in this thread must not leave workers running
            stop[0] = True
    if errors:
        raise errors[0]
    return outs, max(ends) - start


def measure(infer: Infer | Sequence[Infer], protocol: Protocol, *,
            clock: Callable[[], int] = time.perf_counter_ns) -> Measurement:
    """Warm up, then measure ``infer``: one thread-safe callable shared by the workers, or one per worker.

    ``clock`` returns nanoseconds. Counts are pooled over workers; pooled latencies are interleaved in
    approximate time order (worker sample j of n ranked by j/n) for the stability windows.
    """
    p = protocol
    if callable(infer):
        fns: list[Infer] = [infer] * p.concurrency
    else:
        fns = list(infer)
        if len(fns) != p.concurrency:
            raise ValueError(f"got {len(fns)} callables for concurrency {p.concurrency}")
    warmup_runs, warmup_ns = 0, 0
    if p.warmup > 0 or p.warmup_seconds > 0:
        outs, warmup_ns = _phase(fns, clock, p.warmup, p.warmup_seconds, None, None)
        warmup_runs = sum(map(len, outs))
    outs, wall_ns = _phase(fns, clock, p.runs, p.seconds, p.max_runs, p.max_seconds)
    deltas = outs[0] if len(outs) == 1 else [
        d for _, d in sorted(((j + 0.5) / len(o), d) for o in outs for j, d in enumerate(o))]
    return Measurement([d / 1e9 for d in deltas], wall_ns / 1e9, warmup_runs, warmup_ns / 1e9)


def median_ci(sorted_values: Sequence[float]) -> tuple[float, float]:
    """A distribution-free CI_LEVEL confidence interval of the median: the order statistics at ranks
    n/2 ∓ Z·√n/2 (the normal approximation of the binomial); the full range below 6 samples."""
    n = len(sorted_values)
    if n < 6:
        return sorted_values[0], sorted_values[-1]
    half = Z * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))
    return sorted_values[lo], sorted_values[hi]


def drift_ci(latencies_s: Sequence[float]) -> tuple[float, float] | None:
    """The 2nd and 9th of the medians of 10 consecutive windows (≈98 % of a typical window's median lies
    between them): how far the median wanders while the machine's load changes, which the samples' own
    interval, treating calls as independent, does not see. None below WINDOWS × 10 samples."""
    n = len(latencies_s)
    if n < WINDOWS * 10:
        return None
    bounds = [i * n // WINDOWS for i in range(WINDOWS + 1)]
    medians = sorted(statistics.median(latencies_s[a:b]) for a, b in itertools.pairwise(bounds))
    return medians[1], medians[-2]


def summarize(latencies_s: Sequence[float], wall_s: float, *, batch: int = 1, concurrency: int = 1) -> Figures:
    """Statistics of per-call latencies (gpux.bench.records.Figures: every key); throughput = len(latencies) *
    batch / wall_s."""
    if not latencies_s:
        raise ValueError("no latencies to summarize")
    if wall_s <= 0:
        raise ValueError(f"wall time must be positive, got {wall_s}")
    xs = sorted(latencies_s)
    n = len(xs)
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs) if n > 1 else 0.0
    import numpy as np

    q1, p50, q3, p90, p95, p99, p999 = (float(v) for v in np.percentile(xs, [25, 50, 75, 90, 95, 99, 99.9]))
    ci = median_ci(xs)
    drift = drift_ci(latencies_s)
    if drift is not None:
        ci = min(ci[0], drift[0]), max(ci[1], drift[1])
    half_pct = (ci[1] - ci[0]) / 2 / p50 * 100 if p50 > 0 else 0.0
    threshold = max(q3 + STALL_IQR * (q3 - q1), STALL_MEDIAN * p50)
    stalls = n - bisect.bisect_right(xs, threshold)
    warnings = []
    if half_pct > PRECISE_PCT:
        warnings.append(f"the median is known to ±{half_pct:.1f}% only ({CI_LEVEL:.0%} CI); measure longer "
                        f"(--duration, --runs) before comparing")
    if stalls * 100 > STALL_NOTE_PCT * n:
        warnings.append(f"{stalls} of {n} calls stalled (slower than {threshold * 1e3:.3f} ms); the tail "
                        f"(p99, max) reflects them, the median does not")
    return {
        "count": n, "min": xs[0], "max": xs[-1], "mean": mean, "std": std,
        "cv_pct": std / mean * 100 if mean > 0 else 0.0, "p50": p50, "p90": p90, "p95": p95, "p99": p99,
        "p99_9": p999 if n >= 1000 else None, "throughput": n * batch / wall_s, "batch": batch,
        "concurrency": concurrency, "percentile_method": PERCENTILE_METHOD, "warnings": warnings,
        "stable": half_pct <= PRECISE_PCT, "mad": MAD_TO_SIGMA * statistics.median(abs(x - p50) for x in xs),
        "iqr": q3 - q1, "median_ci": list(ci), "ci_level": CI_LEVEL, "stalls": stalls, "stall_threshold": threshold,
    }


def result_row(provider: str, precision: str, stats: Figures | None, phases: Phases, *, status: str = "ok",
               latencies_s: Sequence[float] = (), **facts: Unpack[RowFacts]) -> Row:
    """One entry of a benchmark document's ``results``; its ``facts`` (e.g. ``error``) are kept as given."""
    return {
        "provider": provider, "precision": precision, "status": status,
        "stats": stats, "phases": phases.to_dict(),
        "latencies_ms": [round(x * 1e3, 6) for x in latencies_s], **facts,
    }


def make_document(results: list[Row], environment: dict[str, Any] | None = None) -> dict[str, Any]:
    """A benchmark JSON document: ``{"schema", "environment", "results"}``."""
    return {"schema": SCHEMA_VERSION, "environment": environment or {}, "results": results}


def compare_baseline(current: dict[str, Any], baseline: dict[str, Any], max_regression_pct: float, *,
                     notes: list[str] | None = None) -> list[str]:
    """Regressions of ``current`` against ``baseline`` (empty list = pass).

    Rows match on (provider, precision). A row regresses when its median latency rose by more than
    ``max_regression_pct`` AND its confidence interval lies wholly above the baseline's, so a difference
    the noise of either run could explain never fails the gate. A row ok in the baseline and not ok now
    regresses too. The tail (p99) and throughput changes are told in ``notes``, not gated: on a shared
    machine the tail of a short run is its stalls. Rows that cannot be compared are notes as well.
    """
    for doc, name in ((current, "current"), (baseline, "baseline")):
        if doc.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"{name} document has schema {doc.get('schema')!r}, expected {SCHEMA_VERSION}")

    def key(row: Row) -> tuple[str, str]:
        return str(row.get("provider", "?")), str(row.get("precision", "?"))

    base = {key(r): r for r in baseline.get("results", [])}
    found: list[str] = []
    said: list[str] = notes if notes is not None else []
    for row in current.get("results", []):
        label, ref = "/".join(key(row)), base.get(key(row))
        if ref is None:
            said.append(f"{label} has no baseline row; not compared")
        elif row.get("status") != "ok" or ref.get("status") != "ok":
            if ref.get("status") == "ok":
                found.append(f"{label}: status {row.get('status')!r}, baseline was 'ok'")
            else:
                said.append(f"{label} baseline status {ref.get('status')!r}; not compared")
        else:
            _compare_row(label, _figures(row), _figures(ref), max_regression_pct, found, said)
    return found


def _figures(row: Row) -> Figures:
    stats = row.get("stats")
    return stats if stats is not None else {}


def _compare_row(label: str, cur: Figures, ref: Figures, limit: float, found: list[str],
                 said: list[str]) -> None:
    c, b = cur.get("p50"), ref.get("p50")
    if not c or not b:
        said.append(f"{label}: no median; not compared")
        return
    c_ci, b_ci = cur.get("median_ci") or (c, c), ref.get("median_ci") or (b, b)
    change = (c - b) / b * 100
    shown = (f"median {c * 1e3:.4f} ms [{c_ci[0] * 1e3:.4f}, {c_ci[1] * 1e3:.4f}] vs {b * 1e3:.4f} ms "
             f"[{b_ci[0] * 1e3:.4f}, {b_ci[1] * 1e3:.4f}] in the baseline ({change:+.1f}%)")
    if change > limit and c_ci[0] > b_ci[1]:
        found.append(f"{label} {shown}: slower by more than {limit:g}% and beyond both {CI_LEVEL:.0%} intervals")
    elif change > limit:
        said.append(f"{label} {shown}: intervals overlap, within noise; measure longer to tell")
    for metric, x, y, sign in (("p99", cur.get("p99"), ref.get("p99"), 1),
                               ("throughput", cur.get("throughput"), ref.get("throughput"), -1)):
        if x and y and sign * (x - y) / y * 100 > limit:
            said.append(f"{label} {metric} {(x - y) / y * 100:+.1f}% (not gated: tail and throughput of a short "
                        f"run move with the machine's load)")


MS = 1e3
# CSV columns: (header with its unit, where the value is in a result row, scale)
CSV_COLUMNS: list[tuple[str, tuple[str | int, ...], float | None]] = [
    ("provider", ("provider",), None), ("precision", ("precision",), None), ("status", ("status",), None),
    ("requested", ("requested",), None), ("runs_on", ("runs_on",), None),
    ("count", ("stats", "count"), None), ("batch", ("stats", "batch"), None),
    ("concurrency", ("stats", "concurrency"), None),
    *[(f"{m}_ms", ("stats", m), MS) for m in ("p50", "p90", "p95", "p99", "p99_9", "min", "max", "mean", "std",
                                               "mad", "iqr")],
    ("median_ci_low_ms", ("stats", "median_ci", 0), MS), ("median_ci_high_ms", ("stats", "median_ci", 1), MS),
    ("cv_pct", ("stats", "cv_pct"), None), ("stalls", ("stats", "stalls"), None),
    ("stall_threshold_ms", ("stats", "stall_threshold"), MS), ("throughput_per_s", ("stats", "throughput"), None),
    *[(f"{p}_s", ("phases", f"{p}_s"), None) for p in ("build", "load", "first_inference", "warmup", "measure",
                                                        "time_to_ready")],
    ("artifact", ("artifact",), None), ("artifact_size_bytes", ("artifact_size",), None),
    ("error", ("error",), None),
]


def _cell(row: Row, path: tuple[str | int, ...], scale: float | None) -> Any:
    value: Any = row
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return ""
    if value is None:
        return ""
    return value * scale if scale is not None and isinstance(value, int | float) else value


# rows measured through declared steps (`stages`) add the median of each stage
STAGE_COLUMNS = [(f"{s}_p50_ms", ("stages", s, "p50"), MS) for s in ("preprocess", "inference", "postprocess")]


def to_csv(rows: list[Row]) -> str:
    """CSV of result rows, one fixed column per figure with its unit in the header (raw latencies left out)."""
    columns = CSV_COLUMNS + (STAGE_COLUMNS if any(r.get("stages") for r in rows) else [])
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([name for name, _, _ in columns])
    writer.writerows([[_cell(r, path, scale) for _, path, scale in columns] for r in rows])
    return buf.getvalue()

