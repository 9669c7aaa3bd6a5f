"""Per-model inference statistics: plain counters the request path bumps on the event loop's thread, read by the
statistics extension (Triton's layout, the document both protocols answer with) and by the Prometheus collector
(gpux/serve/metrics.py) when scraped. One place, so a request is counted once."""

from __future__ import annotations

from bisect import bisect_left
from time import time
from typing import Any

PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)


class Duration:
    """How many times a phase ran and its total time, in nanoseconds (Triton's StatisticDuration)."""

    __slots__ = ("count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0  # summed as seconds (a float add), said in ns

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.seconds += seconds

    def doc(self) -> dict[str, int]:
        return {"count": self.count, "ns": round(self.seconds * 1e9)}


class Spread(Duration):
    """A Duration whose observations are also counted per latency bucket (`le` the bound; the last: +Inf)."""

    __slots__ = ("buckets",)

    def __init__(self) -> None:
        super().__init__()
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)

    def add(self, seconds: float, count: int = 1) -> None:
        self.count += count
        self.seconds += seconds
        self.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += count


class ModelStats:
    """One model version's counters. Per request: success or fail (from the request decoded to its outputs ready),
    queue, compute_input (checking and converting inputs), compute_infer (the inference that ran it; every request
    of a merged batch counts the batch's time), compute_output (picking, classifying, answering outputs). Per
    execution (`runs`): execution_count, inference_count and batch_stats by batch size, where the batch is the rows
    of a model that takes a batch dim, else the requests (one each, as Triton counts)."""

    __slots__ = (*PHASES, "inference_count", "runs", "last_inference", "batches", "batchable")

    def __init__(self, batchable: bool = False) -> None:
        self.success, self.fail, self.queue = Duration(), Duration(), Spread()
        self.compute_input, self.compute_infer, self.compute_output = Duration(), Duration(), Duration()
        self.runs = Spread()  # per inference
        self.inference_count = 0
        self.last_inference = 0.0  # seconds since the epoch, 0 before the first
        self.batches: dict[int, Duration] = {}
        self.batchable = batchable

    @property
    def execution_count(self) -> int:
        return self.runs.count

    def executed(self, seconds: float, rows: int, requests: int) -> None:
        """One inference of `rows` samples for `requests` requests took `seconds`."""
        self.runs.add(seconds)
        size = rows if self.batchable else requests
        self.inference_count += size
        self.compute_infer.count += requests
        self.compute_infer.seconds += seconds * requests
        batch = self.batches.get(size)
        if batch is None:
            batch = self.batches[size] = Duration()
        batch.count += 1
        batch.seconds += seconds

    def succeeded(self, seconds: float) -> None:
        self.success.count += 1
        self.success.seconds += seconds
        self.last_inference = time()

    def doc(self, name: str, version: str) -> dict[str, Any]:
        """This model's entry of `model_stats`, as Triton writes it (ns and counts as integers)."""
        stats = {phase: getattr(self, phase).doc() for phase in PHASES}
        stats["cache_hit"] = stats["cache_miss"] = {"count": 0, "ns": 0}  # no response cache
        zero = {"count": 0, "ns": 0}
        return {"name": name, "version": version, "last_inference": int(self.last_inference * 1000),
                "inference_count": self.inference_count, "execution_count": self.execution_count,
                "inference_stats": stats,
                "batch_stats": [{"batch_size": size, "compute_input": zero, "compute_infer": d.doc(),
                                 "compute_output": zero} for size, d in sorted(self.batches.items())],
                "memory_usage": []}
