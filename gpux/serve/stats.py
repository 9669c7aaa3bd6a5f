"""Per-model inference statistics in Triton's layout (the statistics extension): plain counters the request path
bumps, and the document both protocols answer with."""

from __future__ import annotations

from time import time
from typing import Any

PHASES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


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


class ModelStats:
    """One model version's counters. Per request: success or fail (from the request decoded to its outputs ready),
    queue, compute_input (checking and converting inputs), compute_infer (the inference that ran it; every request
    of a merged batch counts the batch's time), compute_output (picking, classifying, answering outputs). Per
    execution: execution_count, inference_count (samples: the batch's rows) and batch_stats by batch size."""

    __slots__ = (*PHASES, "inference_count", "execution_count", "last_inference", "batches")

    def __init__(self) -> None:
        self.success, self.fail, self.queue = Duration(), Duration(), Duration()
        self.compute_input, self.compute_infer, self.compute_output = Duration(), Duration(), Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference = 0.0  # seconds since the epoch, 0 before the first
        self.batches: dict[int, Duration] = {}

    def executed(self, seconds: float, rows: int, requests: int) -> None:
        """One inference of `rows` samples for `requests` requests took `seconds`."""
        self.execution_count += 1
        self.inference_count += rows
        self.compute_infer.count += requests
        self.compute_infer.seconds += seconds * requests
        batch = self.batches.get(rows)
        if batch is None:
            batch = self.batches[rows] = Duration()
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
