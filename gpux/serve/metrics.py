"""Prometheus metrics of the server: requests, latency, queue time, batch sizes, the provider each model runs on.

Requests and their latency are plain counts under one lock each (a bisect and two adds); queue time, inference time
and batch sizes are read from each model's statistics (gpux/serve/stats.py), which the request path bumps once for
both. Both become Prometheus's text in a collector at scrape time: prometheus_client's own children take several
locks and calls per observation, which showed on the request path. Gauges, set once per load, stay
prometheus_client's."""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric

from gpux.serve.stats import LATENCY_BUCKETS, ModelStats

if TYPE_CHECKING:
    from prometheus_client.metrics import MetricWrapperBase

M = TypeVar("M", bound="MetricWrapperBase")  # a prometheus_client metric: its child of one label set is one too

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class Count:
    """One label set of a counter."""

    __slots__ = ("lock", "value")

    def __init__(self) -> None:
        self.lock, self.value = threading.Lock(), 0.0

    def inc(self, amount: float = 1.0) -> None:
        with self.lock:
            self.value += amount


class Buckets:
    """One label set of a histogram: observations per bucket (`le`: at most the bound) and their sum."""

    __slots__ = ("bounds", "counts", "lock", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds, self.counts = bounds, [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.lock, self.total = threading.Lock(), 0.0

    def observe(self, value: float) -> None:
        i = bisect_left(self.bounds, value)
        with self.lock:
            self.counts[i] += 1
            self.total += value

    def merge(self, counts: Sequence[int], total: float) -> None:
        self.counts = [a + b for a, b in zip(self.counts, counts, strict=True)]
        self.total += total


class Family:
    """A counter or histogram by label values, collected into Prometheus metric families at scrape time."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float] | None = None) -> None:
        self.name, self.doc, self.labels, self.buckets = name, doc, tuple(labels), buckets
        self.children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def child(self, *values: str) -> Any:
        found = self.children.get(values)
        if found is None:
            with self._lock:
                found = self.children.setdefault(values, Count() if self.buckets is None else Buckets(self.buckets))
        return found

    def collect(self) -> list[Metric]:
        if self.buckets is None:
            counter = CounterMetricFamily(self.name, self.doc, labels=self.labels)
            for values, c in list(self.children.items()):
                counter.add_metric(list(values), c.value)
            return [counter]
        hist = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        for values, b in list(self.children.items()):
            with b.lock:
                counts, total = list(b.counts), b.total
            hist.add_metric(list(values), _cumulative(b.bounds, counts), total)
        return [hist]


def _cumulative(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    running, out = 0, list[tuple[str, float]]()
    for bound, n in zip([*map(_bound, bounds), "+Inf"], counts, strict=True):
        running += n
        out.append((bound, running))
    return out


Source = Callable[[], Iterable[tuple[str, ModelStats]]]  # (model name, its statistics), versions apart


STATS_FAMILIES = (  # name, help, bounds: read from the models' statistics
    ("gpux_queue_duration_seconds", "Time a request waited for a model instance.", LATENCY_BUCKETS),
    ("gpux_compute_duration_seconds", "Time one (batched) inference ran.", LATENCY_BUCKETS),
    ("gpux_batch_size", "Rows per inference the model ran (after dynamic batching; one per request for a model "
     "without a batch dim).", BATCH_BUCKETS),
)


def from_stats(models: Iterable[tuple[str, ModelStats]]) -> list[Metric]:
    """Queue time (per request), inference time and batch size (per inference) by model, its versions summed."""
    summed: dict[str, tuple[Buckets, ...]] = {}
    for name, stats in models:
        queue, compute, batch = summed.setdefault(name, tuple(Buckets(b) for _, _, b in STATS_FAMILIES))
        queue.merge(stats.queue.buckets, stats.queue.seconds)
        compute.merge(stats.runs.buckets, stats.runs.seconds)
        for size, d in list(stats.batches.items()):
            batch.counts[bisect_left(BATCH_BUCKETS, size)] += d.count
            batch.total += size * d.count
    families = [HistogramMetricFamily(name, doc, labels=["model"]) for name, doc, _ in STATS_FAMILIES]
    for name, hists in summed.items():
        for family, h in zip(families, hists, strict=True):
            family.add_metric([name], _cumulative(h.bounds, h.counts), h.total)
    return list(families)


def _bound(b: float) -> str:
    return repr(float(b))  # as prometheus_client writes `le` (1 -> "1.0")


class Collector:
    """The families of one server, and its models' statistics, for its registry."""

    def __init__(self, families: Sequence[Family]) -> None:
        self.families = families
        self.sources: list[Source] = []

    def collect(self) -> Iterator[Metric]:
        for f in self.families:
            yield from f.collect()
        yield from from_stats(pair for source in self.sources for pair in source())


@dataclass
class Metrics:
    """One registry per server (tests run several in one process); gauge children cached per label set."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _children: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        r = self.registry
        self.requests = Family("gpux_requests", "Inference requests answered, by model, protocol and status.",
                               ["model", "version", "protocol", "status"])
        self.latency = Family("gpux_request_duration_seconds", "Time from request decoded to answer ready.",
                              ["model", "protocol"], LATENCY_BUCKETS)
        self.collector = Collector([self.requests, self.latency])
        r.register(self.collector)
        self.model_info = Gauge("gpux_model_info", "1 per loaded model version, labelled with the provider in use.",
                                ["model", "version", "provider", "runs_on", "instances"], registry=r)
        self.ready = Gauge("gpux_model_ready", "1 when the model version is loaded and warmed up.",
                           ["model", "version"], registry=r)

    def child(self, metric: M, *labels: str) -> M:
        """The gauge's child of one label set, cached (a Family keeps its own: `Family.child`)."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def watch(self, source: Source) -> None:
        """Report the statistics of the models `source` lists (read at each scrape)."""
        self.collector.sources.append(source)

    def answered(self, model: str, version: str, protocol: str, status: int, seconds: float | None) -> None:
        self.requests.child(model, version, protocol, str(status)).inc()
        if seconds is not None:
            self.latency.child(model, protocol).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
