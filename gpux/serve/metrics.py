"""Prometheus metrics of the server: requests, latency, queue time, batch sizes, the provider each model runs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTENT_TYPE = CONTENT_TYPE_LATEST


@dataclass
class Metrics:
    """One registry per server (tests run several in one process); children cached per label set."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _children: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Counter("gpux_requests", "Inference requests answered, by model, protocol and status.",
                                ["model", "version", "protocol", "status"], registry=r)
        self.latency = Histogram("gpux_request_duration_seconds", "Time from request decoded to answer ready.",
                                 ["model", "protocol"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("gpux_queue_duration_seconds", "Time a request waited for a model instance.",
                               ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.compute = Histogram("gpux_compute_duration_seconds", "Time one (batched) inference ran.",
                                 ["model"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch = Histogram("gpux_batch_size", "Rows per inference the model ran (after dynamic batching).",
                               ["model"], buckets=BATCH_BUCKETS, registry=r)
        self.model_info = Gauge("gpux_model_info", "1 per loaded model version, labelled with the provider in use.",
                                ["model", "version", "provider", "runs_on", "instances"], registry=r)
        self.ready = Gauge("gpux_model_ready", "1 when the model version is loaded and warmed up.",
                           ["model", "version"], registry=r)

    def child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def answered(self, model: str, version: str, protocol: str, status: int, seconds: float | None) -> None:
        self.child(self.requests, model, version, protocol, str(status)).inc()
        if seconds is not None:
            self.child(self.latency, model, protocol).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
