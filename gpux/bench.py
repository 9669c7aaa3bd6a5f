"""The benchmark protocol of gpux: how inference is warmed up, timed, summarized, compared and reported.

Runtime-independent (it is handed zero-argument callables) and comparable with trtexec,
onnxruntime_perf_test and OpenVINO benchmark_app: warm up until a least count AND a least time are met,
measure until a least count AND a least duration are met (optionally capped), pool the latencies of N
worker threads, and report throughput as samples over the measured wall window. Latencies are seconds.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1
PERCENTILE_METHOD = "linear (type 7)"
CV_WARN_PCT = 2.5  # coefficient of variation above which a result is flagged as noisy
STABILITY_WINDOWS = 5  # measured samples are split into this many consecutive windows
STABILITY_TOL = 0.10  # the last 3 window medians must agree within this fraction

Infer = Callable[[], object]


@dataclass(frozen=True)
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


@dataclass
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
class Stats:
    """Summary of per-call latencies (seconds) and throughput (samples per second)."""

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
    throughput: float
    batch: int = 1
    concurrency: int = 1
    percentile_method: str = PERCENTILE_METHOD
    warnings: list[str] = field(default_factory=list)
    stable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        except BaseException as exc:
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


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) of ascending values, linear interpolation between closest ranks
    (Hyndman-Fan type 7, numpy's default)."""
    n = len(sorted_values)
    if n == 0:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    h = (n - 1) * (q / 100)  # same rounding as numpy: fraction first
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    a, b, t = sorted_values[lo], sorted_values[hi], h - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def _stability(latencies_s: Sequence[float]) -> tuple[bool, float | None]:
    """Whether the medians of the last 3 of STABILITY_WINDOWS windows agree, and their spread."""
    n = len(latencies_s)
    if n < STABILITY_WINDOWS:
        return False, None
    bounds = [i * n // STABILITY_WINDOWS for i in range(STABILITY_WINDOWS + 1)]
    medians = [statistics.median(latencies_s[a:b]) for a, b in itertools.pairwise(bounds)][-3:]
    lo, hi = min(medians), max(medians)
    spread = (hi - lo) / lo if lo > 0 else (0.0 if hi == 0 else math.inf)
    return spread <= STABILITY_TOL, spread


def summarize(latencies_s: Sequence[float], wall_s: float, *, batch: int = 1, concurrency: int = 1) -> Stats:
    """Statistics of per-call latencies; throughput = len(latencies) * batch / wall_s."""
    if not latencies_s:
        raise ValueError("no latencies to summarize")
    if wall_s <= 0:
        raise ValueError(f"wall time must be positive, got {wall_s}")
    xs = sorted(latencies_s)
    n = len(xs)
    mean = statistics.fmean(xs)
    std = statistics.stdev(xs) if n > 1 else 0.0
    cv = std / mean * 100 if mean > 0 else 0.0
    stable, spread = _stability(latencies_s)
    warnings = []
    if cv > CV_WARN_PCT:
        warnings.append(f"high variance: CV {cv:.2f}% > {CV_WARN_PCT}%; results may not be repeatable")
    if spread is None:
        warnings.append(f"too few samples ({n}) to judge stability")
    elif not stable:
        warnings.append(f"not stable: last 3 window medians differ by {spread * 100:.1f}%"
                        f" (> {STABILITY_TOL * 100:.0f}%); measure longer")
    return Stats(
        count=n, min=xs[0], max=xs[-1], mean=mean, std=std, cv_pct=cv,
        p50=percentile(xs, 50), p90=percentile(xs, 90), p95=percentile(xs, 95), p99=percentile(xs, 99),
        p99_9=percentile(xs, 99.9) if n >= 1000 else None,
        throughput=n * batch / wall_s, batch=batch, concurrency=concurrency,
        warnings=warnings, stable=stable,
    )


def result_row(provider: str, precision: str, stats: Stats | None, phases: Phases, *, status: str = "ok",
               latencies_s: Sequence[float] = (), **extra: Any) -> dict[str, Any]:
    """One entry of a benchmark document's ``results``; ``extra`` keys (e.g. ``error``) are kept as-is."""
    return {
        "provider": provider, "precision": precision, "status": status,
        "stats": None if stats is None else stats.to_dict(), "phases": phases.to_dict(),
        "latencies_ms": [round(x * 1e3, 6) for x in latencies_s], **extra,
    }


def make_document(results: list[dict[str, Any]], environment: dict[str, Any] | None = None) -> dict[str, Any]:
    """A benchmark JSON document: ``{"schema", "environment", "results"}``."""
    return {"schema": SCHEMA_VERSION, "environment": environment or {}, "results": results}


def environment_facts() -> dict[str, Any]:
    """Cheap facts about the host, from the standard library only."""
    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "os": platform.system(), "os_release": platform.release(), "platform": platform.platform(),
        "machine": platform.machine(), "python": platform.python_version(),
        "python_implementation": platform.python_implementation(), "cpu_model": cpu,
        "logical_cores": os.cpu_count(), "available_cpus": len(affinity(0)) if affinity else None,
    }


def compare_baseline(current: dict[str, Any], baseline: dict[str, Any], max_regression_pct: float, *,
                     notes: list[str] | None = None) -> list[str]:
    """Regressions of ``current`` against ``baseline`` beyond ``max_regression_pct`` (empty list = pass).

    Rows match on (provider, precision); p50 and p99 regress upward, throughput downward. A row ok in
    the baseline and not ok now is a regression; rows that cannot be compared (absent from the baseline,
    not ok in it, a metric missing) are not failures: they are appended to ``notes`` when it is given.
    """
    for doc, name in ((current, "current"), (baseline, "baseline")):
        if doc.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"{name} document has schema {doc.get('schema')!r}, expected {SCHEMA_VERSION}")
    def key(row: dict[str, Any]) -> tuple[str, str]:
        return str(row.get("provider", "?")), str(row.get("precision", "?"))

    base = {key(r): r for r in baseline.get("results", [])}
    found: list[str] = []
    said: list[str] = notes if notes is not None else []
    for row in current.get("results", []):
        label, ref = "/".join(key(row)), base.get(key(row))
        if ref is None:
            said.append(f"note: {label} has no baseline row; not compared")
            continue
        if row.get("status") != "ok" or ref.get("status") != "ok":
            if ref.get("status") == "ok":
                found.append(f"{label}: status {row.get('status')!r}, baseline was 'ok'")
            else:
                said.append(f"note: {label} baseline status {ref.get('status')!r}; not compared")
            continue
        cur_s, ref_s = row.get("stats") or {}, ref.get("stats") or {}
        for metric, worse_up in (("p50", True), ("p99", True), ("throughput", False)):
            c, b = cur_s.get(metric), ref_s.get(metric)
            if c is None or not b:
                said.append(f"note: {label} {metric} missing; not compared")
                continue
            change = (c - b) / b * 100 * (1 if worse_up else -1)
            if change > max_regression_pct:
                shown = (f"{c * 1e3:.3f} ms vs {b * 1e3:.3f} ms" if worse_up else f"{c:.1f}/s vs {b:.1f}/s")
                found.append(f"{label} {metric} regressed {change:.1f}% (> {max_regression_pct:g}%): "
                             f"{shown} in baseline")
    return found


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if k == "latencies_ms":
            continue
        for k2, v2 in (v.items() if isinstance(v, dict) else [(k, v)]):
            name = k2 if k2 not in out else f"{k}.{k2}"
            out[name] = "; ".join(map(str, v2)) if isinstance(v2, list) else ("" if v2 is None else v2)
    return out


def to_csv(rows: list[dict[str, Any]]) -> str:
    """Flat CSV of result rows: nested stats/phases become columns, raw latencies are left out."""
    flat = [_flat(r) for r in rows]
    header = list(dict.fromkeys(k for r in flat for k in r))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=header, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(flat)
    return buf.getvalue()


def format_table(rows: list[dict[str, Any]]) -> str:
    """Plain aligned text table of result rows."""
    def num(v: Any, scale: float = 1.0, fmt: str = ".3f") -> str:
        return "-" if v is None else format(v * scale, fmt)

    head = ["provider", "precision", "status", "p50 ms", "p99 ms", "throughput/s", "time-to-ready ms", "CV %"]
    body = []
    for r in rows:
        s, ph = r.get("stats") or {}, r.get("phases") or {}
        body.append([str(r.get("provider", "")), str(r.get("precision", "")), str(r.get("status", "")),
                     num(s.get("p50"), 1e3), num(s.get("p99"), 1e3), num(s.get("throughput"), fmt=".1f"),
                     num(ph.get("time_to_ready_s"), 1e3, ".1f"), num(s.get("cv_pct"), fmt=".2f")])
    widths = [max(len(c[i]) for c in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:  # text columns align left, numbers right
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return "\n".join(line(cells) for cells in [head, *body])
