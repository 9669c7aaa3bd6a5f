"""Candidates measured side by side: every survivor and a plain ONNX Runtime session on the source model
(default options, what a user would otherwise run) take turns in rounds, each a short slice in rotated order
with a pause between them (ONNX Runtime's worker threads spin a while after a run and would slow the next one).
A candidate's speedup is the plain session's median over its own; the per-round ratios bound it (the noise).
One candidate is faster than another only when its median round is at least MARGIN faster and it was faster in
every round but at most one (every round when fewer than 4 ran): a single round disturbed by the machine's load
neither makes nor breaks a lead, and a few percent is not worth trading precision for."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux.arrays import Feeds
from gpux.bench import protocol as bench
from gpux.bench.records import Speedup

ROUNDS = 5
MIN_ROUNDS = 3  # run even past the budget: one round has no spread, and a lead over the default needs one
PAUSE_S = 0.05  # between two slices: long enough for ONNX Runtime's spinning threads to go idle
FIRST_WARMUP_S = 0.2  # a slice's warm-up in the first round (caches, allocator); later rounds re-warm briefly
WARMUP_S = 0.02
MARGIN = 0.05  # the least median-round lead that counts as faster
BASELINE = "onnxruntime.InferenceSession(source, providers=['CPUExecutionProvider']), default options"


@dataclass(kw_only=True)
class Entry:
    """One thing measured in the rounds: its call (or one per worker) and what each round gave."""

    call: bench.Infer | list[bench.Infer]
    latencies_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    warmup_s: float = 0.0
    scores: list[float] = field(default_factory=list)  # per round: median latency (s) or throughput (per s)
    keep: Any = None  # what must stay alive while it is measured (the plain session)
    concurrency: int | None = None  # its own callers and rows per call (None: the protocol's)
    batch: int | None = None

    def measurement(self) -> bench.Measurement:
        return bench.Measurement(self.latencies_s, self.wall_s, 0, self.warmup_s)


def plain_session(source: Path, feeds: Feeds, concurrency: int) -> tuple[list[bench.Infer], Any]:
    """The baseline: a default InferenceSession on the source model, timed through the same native run call as
    the candidates (so the comparison is of engines, not of Python wrappers). (calls, session)."""
    import functools

    import onnxruntime as ort

    sess = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    sess.run(names, feeds)  # the inputs fit, with ONNX Runtime's own checks
    return [functools.partial(sess._sess.run, names, feeds, None)] * concurrency, sess


@dataclass(frozen=True)
class Pace:
    """How measuring is split: `rounds` rounds, `pause_s` between two slices, spent by `sleep`."""

    rounds: int = ROUNDS
    pause_s: float = PAUSE_S
    sleep: Callable[[float], None] = time.sleep


def measure_rounds(entries: Sequence[Entry], protocol: bench.Protocol, seconds: float, objective: str,
                   deadline: float, pace: Pace = Pace()) -> int:
    """Measure every entry for `seconds` in all, split over the pace's rounds, in rotated order, pausing
    between slices; once `deadline` (time.monotonic) passes, stop after the round in progress, but not before
    MIN_ROUNDS (or the pace's rounds, if fewer) have run. The rounds run."""
    done, rounds = 0, pace.rounds
    for r in range(rounds):
        if done >= min(MIN_ROUNDS, rounds) and time.monotonic() > deadline:
            break
        warm = min(FIRST_WARMUP_S if r == 0 else WARMUP_S, seconds)
        shared = bench.Protocol(warmup=3 if r == 0 else 1, warmup_seconds=warm, runs=max(1, protocol.runs // rounds),
                                seconds=seconds / rounds, concurrency=protocol.concurrency, batch=protocol.batch)
        for k in range(len(entries)):
            e = entries[(k + r) % len(entries)]
            p = dataclasses.replace(shared, concurrency=e.concurrency or shared.concurrency,
                                    batch=e.batch or shared.batch)
            pace.sleep(pace.pause_s)
            m = bench.measure(e.call, p)
            e.latencies_s += m.latencies_s
            e.wall_s += m.wall_s
            e.warmup_s += m.warmup_s
            e.scores.append(statistics.median(m.latencies_s) if objective == "latency"
                            else len(m.latencies_s) * p.batch / m.wall_s)
        done += 1
    return done


def ratios(base: Sequence[float], other: Sequence[float], objective: str) -> list[float]:
    """Per round, how many times faster `other` was than `base` (>1: faster)."""
    return [b / o if objective == "latency" else o / b for b, o in zip(base, other, strict=False) if b > 0 and o > 0]


def speedup(base: float, base_scores: Sequence[float], value: float, scores: Sequence[float],
            objective: str) -> Speedup:
    """Speedup over the baseline (its median latency over the candidate's, or the candidate's throughput over
    its), its noise (the least and greatest ratio of a round) and the median ratio of a round (`paired`: each
    round's load divided out, what candidates are ranked by)."""
    x = base / value if objective == "latency" else value / base
    per_round = ratios(base_scores, scores, objective) or [x]
    return {"speedup": round(x, 4), "low": round(min(per_round), 4), "high": round(max(per_round), 4),
            "paired": round(statistics.median(per_round), 4), "rounds": len(per_round)}


def clearly_faster(a: Sequence[float], b: Sequence[float], objective: str) -> bool:
    """`a` beat `b` (round scores): by MARGIN or more in the median round, and in every round but at most one
    (every round when fewer than 4 ran); with no rounds, never."""
    r = ratios(b, a, objective)
    lost = sum(x <= 1.0 for x in r)
    return bool(r) and statistics.median(r) >= 1 + MARGIN and lost <= (1 if len(r) >= 4 else 0)


def spread(scores: Sequence[float], objective: str) -> list[float]:
    """The least and greatest round score, in ms for latency."""
    scale = 1e3 if objective == "latency" else 1.0
    return [round(min(scores) * scale, 6), round(max(scores) * scale, 6)] if scores else []
