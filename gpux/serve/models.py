"""The served models: opening each project's sessions, warm-up, versions, readiness and metadata."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpux.model.checked import Signatures
from gpux.model.io import Tensor
from gpux.serve.batcher import Worker
from gpux.serve.classify import labels_of
from gpux.serve.codec import DATATYPE
from gpux.serve.errors import NotServed, Unavailable
from gpux.serve.metrics import Metrics
from gpux.serve.settings import Settings
from gpux.serve.shm import Regions
from gpux.serve.stats import ModelStats
from gpux.serve.steps import as_bytes, bind

if TYPE_CHECKING:
    from gpux.config.load import Project


INLINE_PROBES = 5
INLINE_BELOW_S = 0.0002  # a warm inference shorter than this runs on the event loop: a thread hop costs more


@dataclass(kw_only=True)
class Model:
    """One version of one model: its interface, its worker once loaded, and what it runs on."""

    name: str
    version: str
    settings: Settings
    path: str  # its gpux.yml: what a load through the repository API reads again
    project: Project | None = None  # None: opened from its record (gpux/serve/record.py), `recorded` says how
    recorded: Any = None  # gpux.serve.record.Recorded
    record_failed: bool = False  # opened from its config because its record did not open as recorded
    recipe: dict[str, Any] | None = None  # how its runtime opens its session again (providers.row.Runner.recipe)
    inputs: dict[str, Tensor] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    worker: Worker | None = None
    provider: str = ""
    runs_on: str = ""
    ready: bool = False
    batchable: bool = False
    report: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, list[str]] = field(default_factory=dict)  # output -> class labels from gpux.yml
    steps: Any = None  # gpux.answers.steps.Steps where gpux.yml declares a preprocess or postprocess
    files: str | None = None  # the input that takes encoded files (BYTES), through its declared preprocess
    stats: ModelStats = field(default_factory=ModelStats)  # the statistics extension's counters
    active: int = 0  # requests in flight
    checked: Signatures = field(default_factory=Signatures)  # input signatures known to pass (serve/protocol.py)
    unloaded: bool = False  # taken out of service by the repository API (gpux/serve/lifecycle.py)
    reason: str = ""  # why it is unloaded

    @classmethod
    def of(cls, served: Any) -> Model:
        """The model of a Project, or of a Recorded one (gpux/serve/record.py)."""
        if getattr(served, "config", None) is None:
            return cls(name=served.name, version=served.version, settings=Settings.of(served.settings),
                       path=served.path, recorded=served)
        return cls(name=served.name, version=str(served.config.version), path=str(served.path), project=served,
                   settings=Settings.of(served.config.serve.model_dump()))

    def tensor_metadata(self, tensors: dict[str, Tensor]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": DATATYPE.get(t.dtype, "BYTES"),
                 "shape": [d if isinstance(d, int) else -1 for d in (t.shape or ())]} for t in tensors.values()]

    def metadata(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Inputs and outputs as clients see them: where the model takes encoded files, its file input and its
        answered outputs are BYTES [-1], their tensor form in `parameters` (still accepted, docs/serve.md)."""
        inputs, outputs = self.tensor_metadata(self.inputs), self.tensor_metadata(self.outputs)
        if self.files is None:
            return inputs, outputs
        return ([as_bytes(e, self.steps.kind) if e["name"] == self.files else e for e in inputs],
                [as_bytes(e, "json") if e["name"] in self.steps.post else e for e in outputs])


def version_key(version: str) -> tuple[Any, ...]:
    """Order versions numerically where they are numbers (1.10.0 after 1.9.0)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+-]", version))


class Repository:
    """Models by name and version; an empty version means the latest."""

    def __init__(self, projects: list[Any], metrics: Metrics) -> None:
        """`projects`: Projects, or models recorded by an earlier start (gpux/serve/record.py)."""
        self.metrics = metrics
        self.models: dict[str, dict[str, Model]] = {}
        for p in projects:
            model = Model.of(p)
            self.models.setdefault(model.name, {})[model.version] = model
        self._versions = {name: sorted(versions, key=version_key) for name, versions in self.models.items()}
        self.live = True
        self.draining = False  # SIGTERM: accepted requests finish, new ones are refused
        self.shm = Regions()  # the system shared memory extension's registered regions
        # Prometheus's counts go on across a reload: a replaced version's statistics stay counted
        self.retired: list[tuple[str, ModelStats]] = []
        metrics.watch(lambda: [*self.retired, *((m.name, m.stats) for m in self.all())])

    def all(self) -> list[Model]:
        return [m for versions in self.models.values() for m in versions.values()]

    @property
    def ready(self) -> bool:
        """Every model ready, but those unloaded on purpose."""
        return all(m.ready for m in self.all() if not m.unloaded)

    def replace(self, name: str, models: list[Model]) -> None:
        """Serve `models` as the versions of `name` from now on (a load through the repository API)."""
        self.retired += [(name, m.stats) for m in self.models.get(name, {}).values() if m.stats.queue.count]
        self.models[name] = {m.version: m for m in models}
        self._versions[name] = sorted(self.models[name], key=version_key)

    def labels(self, name: str, version: str) -> tuple[str, str]:
        """Metric labels for a request: names clients invent are not labels (no unbounded series)."""
        if name not in self.models:
            return "(unknown)", ""
        return name, version if not version or version in self.models[name] else "(unknown)"

    def refused(self, name: str, version: str, seconds: float) -> None:
        """A request to a served model answered with an error, wherever it failed (its body, its inputs, the
        model): one failure in the statistics of the version it named (the latest when none), on every protocol."""
        versions = self.models.get(name, {})
        model = versions.get(version or (self.versions(name) or [""])[-1])
        if model is not None:
            model.stats.fail.add(seconds)

    def versions(self, name: str) -> list[str]:
        """The model's versions, lowest first (sorted once: the latest is looked up on every request)."""
        return self._versions.get(name, [])

    def find(self, name: str, version: str = "") -> Model:
        versions = self.models.get(name)
        if versions is None:
            known = ", ".join(sorted(self.models)) or "none"
            raise NotServed(f"unknown model '{name}'; served models: {known}")
        if not version:
            return versions[self.versions(name)[-1]]
        if version not in versions:
            raise NotServed(f"unknown version '{version}' of model '{name}'; versions: "
                           f"{', '.join(self.versions(name))}")
        return versions[version]

    def get(self, name: str, version: str = "") -> Model:
        """The model to run a request on: 404 when unknown, 503 until it is loaded and warmed up."""
        model = self.find(name, version)
        if not model.ready:
            raise self.gone(model) if model.unloaded else self.unavailable(model)
        return model

    @staticmethod
    def gone(model: Model) -> NotServed:
        """The 404 of an unloaded model."""
        return NotServed(f"model '{model.name}' is unloaded ({model.reason or 'unloaded'}); POST "
                        f"/v2/repository/models/{model.name}/load serves it again")

    def unavailable(self, model: Model) -> Unavailable:
        """The 503 of a model not ready: still loading, or the server is shutting down."""
        if self.draining:
            return Unavailable(f"server is shutting down: model '{model.name}' takes no new requests; retry "
                               "on another instance")
        return Unavailable(f"model '{model.name}' version {model.version} is not ready yet")

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension's answer: every model (no name), every version of one (no version), or one."""
        if not name:
            chosen = [self.models[n][v] for n in sorted(self.models) for v in self.versions(n)]
        elif version:
            chosen = [self.find(name, version)]
        else:
            self.find(name)
            chosen = [self.models[name][v] for v in self.versions(name)]
        return {"model_stats": [m.stats.doc(m.name, m.version) for m in chosen]}

    def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.find(name, version)
        if model.unloaded:
            raise self.gone(model)
        inputs, outputs = model.metadata()
        return {"name": model.name, "versions": [model.version] if version else self.versions(name),
                "platform": f"gpux_{model.provider or 'pending'}", "inputs": inputs, "outputs": outputs}


@dataclass(frozen=True)
class LoadRequest:
    provider: str | None = None
    strict: bool = False
    store: str | None = None
    fixed: dict[str, str] = field(default_factory=dict)  # model name -> the provider its workspace chose (strict)
    pipelines: dict[str, Any] = field(default_factory=dict)  # served name -> (Models, Choice) of a workspace


def open_served(model: Model, request: LoadRequest, metrics: Metrics) -> None:
    """Open the model's sessions (one per instance) and warm each up; blocking, run it off the event loop."""
    settings = model.settings
    runs = _open_recorded(model) if model.project is None else None
    if runs is None and model.name in request.pipelines:
        runs = _open_pipeline(model, request)
    elif runs is None:
        from gpux.run.session import load

        project = model.project
        assert project is not None  # read from its gpux.yml (also when its record did not open)

        provider = request.fixed.get(model.name, request.provider)
        strict = request.strict or model.name in request.fixed
        given_by = "workspace" if model.name in request.fixed else "--provider"
        sessions = [load(project, provider=provider, strict=strict, store_dir=request.store,
                         provider_source=given_by)
                    for _ in range(settings.instances)]
        first = sessions[0]
        model.inputs, model.outputs = dict(first.inputs), dict(first.outputs)
        feeds = warmup_feeds(model.inputs)
        for s in sessions:
            s.run(feeds)  # the first inference may still fall back: read the provider after it
        model.provider, model.runs_on, model.report = first.provider, first.used, first.report()
        model.recipe = first.runner.recipe
        model.steps, model.files = bind(project, model.inputs, model.outputs)
        runs = [s.run for s in sessions]
    feeds = warmup_feeds(model.inputs)
    for run in runs:
        run(feeds)
    inline = inline_elements(warm_seconds(runs[0], feeds), feeds)
    model.batchable = batchable(model)
    model.labels = labels_of(model.project) if model.project is not None else model.recorded.labels
    model.stats.batchable = model.batchable
    max_batch = settings.max_batch_size if model.batchable else 0
    model.worker = Worker(runs, max_batch, settings.max_queue_delay_us, model.stats, inline)
    metrics.child(metrics.model_info, model.name, model.version, model.provider, model.runs_on,
                  str(settings.instances)).set(1)


def inline_elements(seconds: float, feeds: dict[str, np.ndarray]) -> int:
    """The most input values a request may hold to run on the event loop: none unless the warm-up feeds ran in
    under INLINE_BELOW_S, then as many as take about that long, assuming time grows with the values."""
    if seconds >= INLINE_BELOW_S:
        return 0
    size = max(sum(v.size for v in feeds.values()), 1)
    return max(size, int(size * INLINE_BELOW_S / max(seconds, 1e-9)))


def warm_seconds(run: Any, feeds: dict[str, np.ndarray]) -> float:
    """Median time of a few warm inferences."""
    took = []
    for _ in range(INLINE_PROBES):
        started = time.perf_counter()
        run(feeds)
        took.append(time.perf_counter() - started)
    return sorted(took)[len(took) // 2]


def _open_recorded(model: Model) -> list[Callable[[dict[str, Any]], dict[str, Any]]] | None:
    """The sessions of a model recorded by an earlier start, opened as its runtime opened them then; None (its
    project read from its gpux.yml instead) when they do not open."""
    import logging

    from gpux.serve.record import open_runner

    rec = model.recorded
    runners: list[Any] = []
    try:
        inputs = rec.tensors(rec.inputs)
        feeds = warmup_feeds(inputs)
        for _ in range(model.settings.instances):
            runners.append(open_runner(rec.recipe))
            runner = runners[-1]
            if runner.dropped or _settled(runner.used) != _settled(rec.runs_on):  # an AUTO device elsewhere, say
                raise RuntimeError(runner.dropped or f"it runs on {runner.used}, not {rec.runs_on}")
            runner.run(feeds)  # a first inference that fails reads the config (whose fallback may move on)
    except Exception as exc:
        from gpux.config.locate import open_project

        for r in runners:
            r.close()
        logging.getLogger("gpux.serve").warning("%s: not opened as recorded (%s); reading %s", model.name,
                                                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                                                model.path)
        model.project, model.recorded, model.record_failed = open_project(model.path), None, True
        return None
    model.inputs, model.outputs = inputs, rec.tensors(rec.outputs)
    model.provider, model.runs_on, model.report = rec.provider, rec.runs_on, rec.report
    names = runners[0].output_names

    def named(run: Callable[[dict[str, Any]], list[Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return lambda feeds: dict(zip(names, run(feeds), strict=True))

    return [named(r.fast or r.run) for r in runners]  # inputs checked by the server; the runtime checks again


def _settled(used: str) -> str:
    """Where a session runs, without the helper devices a runtime names in parentheses while it settles (OpenVINO's
    AUTO runs on "(CPU)" until the device it chose has compiled)."""
    return re.sub(r"\s*\([^)]*\),?", " ", used).strip(" ,")


def _open_pipeline(model: Model, request: LoadRequest) -> list[Callable[[dict[str, Any]], dict[str, Any]]]:
    """A workspace's pipeline served as one model: its inputs in, its last step's outputs out."""
    from gpux.workspace.pipeline import open_pipeline

    models, choice = request.pipelines[model.name]
    pipes = [open_pipeline(models, choice, request.store, lambda _m: None) for _ in range(model.settings.instances)]
    model.inputs, model.outputs = dict(pipes[0].inputs), pipes[0].outputs
    model.provider, model.runs_on = choice.provider, pipes[0].stages[0].session.used
    model.report = {"pipeline": [st.model for st in pipes[0].stages], "provider": choice.provider}
    return [p.run_last for p in pipes]


def batchable(model: Model) -> bool:
    """Requests can be merged when every input and output starts with a variable (batch) dim."""
    tensors = [*model.inputs.values(), *model.outputs.values()]
    return bool(tensors) and all(t.shape and not isinstance(t.shape[0], int) for t in tensors)


def warmup_feeds(inputs: dict[str, Tensor]) -> dict[str, np.ndarray]:
    """Zeros of each input's shape, variable dims set to 1."""
    feeds = {}
    for name, t in inputs.items():
        shape = tuple(d if isinstance(d, int) else 1 for d in (t.shape or ()))
        feeds[name] = (np.full(shape, "", dtype=object) if t.dtype == "string"
                       else np.zeros(shape, dtype="float32" if t.dtype == "bfloat16" else t.dtype))
    return feeds
