"""The served models: opening each project's sessions, warm-up, versions, readiness and metadata."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from gpux.arrays import Feeds
from gpux.model.checked import Signatures
from gpux.model.io import Tensor
from gpux.serve.batcher import Worker
from gpux.serve.classify import labels_of
from gpux.serve.codec import DATATYPE
from gpux.serve.errors import NotServed, Unavailable
from gpux.serve.memory import Budget
from gpux.serve.metrics import Metrics
from gpux.serve.opened import NOT_OPENED, Opened, RunNamed, closing, declared_data, open_recorded, warmup_feeds
from gpux.serve.record import Recorded
from gpux.serve.settings import Settings
from gpux.serve.shm import Regions
from gpux.serve.stats import ModelStats
from gpux.serve.steps import as_bytes, bind, filled

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.serve.steps import Answering
    from gpux.workspace.pipeline import Pipeline as OpenPipeline
    from gpux.workspace.project import Choice, Models


INLINE_PROBES = 5
INLINE_BELOW_S = 0.0002  # a warm inference shorter than this runs on the event loop: a thread hop costs more


@dataclass(kw_only=True)
class Model:
    """One version of one model being served: what it opens from, what opened (`opened`, set once), and its
    serving state: the worker, the counters, readiness."""

    name: str
    version: str
    settings: Settings
    path: str  # its gpux.yml: what a load through the repository API reads again
    source: Project | Recorded  # read from its gpux.yml, or the record of an earlier start (gpux/serve/record.py)
    opened: Opened = NOT_OPENED
    worker: Worker | None = None
    ready: bool = False
    stats: ModelStats = field(default_factory=ModelStats)  # the statistics extension's counters
    active: int = 0  # requests in flight
    checked: Signatures = field(default_factory=Signatures)  # input signatures known to pass (serve/protocol.py)
    unloaded: bool = False  # taken out of service by the repository API (gpux/serve/lifecycle.py)
    reason: str = ""  # why it is unloaded
    failed: str = ""  # why it did not open or warm up at start-up (not ready; the other models serve)

    @classmethod
    def of(cls, served: Project | Recorded) -> Model:
        """The model of a Project, or of a Recorded one (gpux/serve/record.py)."""
        if isinstance(served, Recorded):
            return cls(name=served.name, version=served.version, settings=served.settings, path=served.path,
                       source=served)
        return cls(name=served.name, version=str(served.config.version), path=str(served.path), source=served,
                   settings=Settings.of(served.config.serve.model_dump()))

    @property
    def record_failed(self) -> bool:
        """Given a record, opened from its config instead (the record did not open as recorded)."""
        return isinstance(self.source, Recorded) and self.opened is not NOT_OPENED and not self.opened.from_record

    @property
    def inputs(self) -> dict[str, Tensor]:
        return self.opened.inputs

    @property
    def outputs(self) -> dict[str, Tensor]:
        return self.opened.outputs

    @property
    def provider(self) -> str:
        return self.opened.provider

    @property
    def runs_on(self) -> str:
        return self.opened.runs_on

    @property
    def labels(self) -> dict[str, list[str]]:
        return self.opened.labels

    @property
    def steps(self) -> Answering | None:
        return self.opened.steps

    @property
    def files(self) -> str | None:
        return self.opened.files

    @property
    def batchable(self) -> bool:
        return self.opened.batchable

    @property
    def layouts(self) -> dict[str, str]:
        """Input -> the layout (nchw, nhwc) its declared image preprocess gives it (none from a record)."""
        inputs = {} if isinstance(self.source, Recorded) else self.source.config.inputs or {}
        return {n: s.preprocess.image.layout for n, s in inputs.items() if s.preprocess and s.preprocess.image}

    def tensor_metadata(self, tensors: dict[str, Tensor]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": DATATYPE.get(t.dtype, "BYTES"),
                 "shape": [d if isinstance(d, int) else -1 for d in (t.shape or ())]} for t in tensors.values()]

    def metadata(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Inputs and outputs as clients see them: where the model takes encoded files (or texts), its file input
        alone (the inputs its preprocess fills named in its `fills`) and its answered outputs are BYTES [-1], their
        tensor form in `parameters` (still accepted, docs/serve.md)."""
        inputs, outputs = self.tensor_metadata(self.inputs), self.tensor_metadata(self.outputs)
        steps, files = self.steps, self.files
        if files is None or steps is None or steps.kind is None:  # a file input has its preprocess's kind
            return inputs, outputs
        return ([as_bytes(e, steps.kind, filled(steps, files)) for e in inputs if e["name"] == files],
                [as_bytes(e, "json") if e["name"] in steps.post and not _tensor_answers(steps, e["name"]) else e
                 for e in outputs])


def _tensor_answers(steps: Any, name: str) -> bool:
    """Whether an output's kind answers a batch as one tensor of its own shape (an embedding's FP32 vectors)."""
    kind = steps.kinds.get(name)
    return kind is not None and kind.encode is not None


def version_key(version: str) -> tuple[Any, ...]:
    """Order versions numerically where they are numbers (1.10.0 after 1.9.0)."""
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+-]", version))


class Repository:
    """Models by name and version; an empty version means the latest."""

    def __init__(self, projects: list[Project | Recorded], metrics: Metrics) -> None:
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
        self.decoding = Budget()  # bytes its requests' images hold decoded (serve.max_decoded_bytes)
        # Prometheus's counts go on across a reload: a replaced version's statistics stay counted
        self.retired: list[tuple[str, ModelStats]] = []
        metrics.watch(lambda: [*self.retired, *((m.name, m.stats) for m in self.all())])

    def all(self) -> list[Model]:
        return [m for versions in self.models.values() for m in versions.values()]

    @property
    def ready(self) -> bool:
        """Every model ready, but those unloaded on purpose and those that failed to load (reported, not ready)."""
        return all(m.ready for m in self.all() if not m.unloaded and not m.failed)

    def replace(self, name: str, models: list[Model]) -> None:
        """Serve `models` as the versions of `name` from now on (a load through the repository API)."""
        self.retired += [(name, m.stats) for m in self.models.get(name, {}).values() if m.stats.queue.count]
        self.models[name] = {m.version: m for m in models}
        self._versions[name] = sorted(self.models[name], key=version_key)

    def metric_labels(self, name: str, version: str) -> tuple[str, str]:
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
            raise NotServed(f"Request for unknown model: '{name}' is not found; served models: {known}")
        if not version:
            return versions[self.versions(name)[-1]]
        if version not in versions:
            raise NotServed(f"Request for unknown model: '{name}' version {version} is not found; versions: "
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
        """The 503 of a model not ready: still loading, failed to load, or the server is shutting down."""
        if model.failed:
            return Unavailable(f"model '{model.name}' version {model.version} failed to load: {model.failed}; fix "
                               f"it and POST /v2/repository/models/{model.name}/load")
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

    def served(self, name: str, version: str = "") -> Model:
        """A model whose interface is known: 404 unknown or unloaded, 503 when it failed to load."""
        model = self.find(name, version)
        if model.unloaded:
            raise self.gone(model)
        if model.failed:
            raise self.unavailable(model)
        return model

    def config(self, name: str, version: str = "") -> dict[str, Any]:
        """The model configuration extension: Triton's ModelConfig of the version (gpux/serve/model_config.py)."""
        from gpux.serve.model_config import config_of

        return config_of(self.served(name, version))

    def metadata(self, name: str, version: str = "") -> dict[str, Any]:
        model = self.served(name, version)
        inputs, outputs = model.metadata()
        return {"name": model.name, "versions": [model.version] if version else self.versions(name),
                "platform": f"gpux_{model.provider or 'pending'}", "inputs": inputs, "outputs": outputs}


class Pipeline(NamedTuple):
    """A workspace whose pipeline is served as one model, on the provider it chose."""

    models: Models
    choice: Choice


@dataclass(frozen=True)
class LoadRequest:
    provider: str | None = None
    strict: bool = False
    store: str | None = None
    fixed: dict[str, str] = field(default_factory=dict)  # model name -> the provider its workspace chose (strict)
    pipelines: dict[str, Pipeline] = field(default_factory=dict)  # served name -> the workspace it is the pipeline of


def open_served(model: Model, request: LoadRequest, metrics: Metrics) -> None:
    """Open the model's sessions (one per instance) and warm each up; blocking, run it off the event loop."""
    settings = model.settings
    opened = _open(model, request)
    try:
        feeds = opened.warmup if opened.warmup is not None else warmup_feeds(opened.inputs)
        for run in opened.runs:
            run(feeds)
        inline = 0 if opened.one_by_one else inline_elements(warm_seconds(opened.runs[0], feeds), feeds)
    except BaseException:  # whatever stops the warm-up, an interrupt too: its sessions are closed, then it goes on
        opened.close()
        raise
    model.opened = opened
    model.stats.batchable = opened.batchable
    max_batch = settings.max_batch_size if opened.batchable else 0
    model.worker = Worker(list(opened.runs), max_batch, settings.max_queue_delay_us, model.stats, inline)
    metrics.child(metrics.model_info, model.name, model.version, opened.provider, opened.runs_on,
                  str(settings.instances)).set(1)


def _open(model: Model, request: LoadRequest) -> Opened:
    """The model opened: its workspace's pipeline, from its record (its config read when that does not open as
    recorded), or from its gpux.yml."""
    if model.name in request.pipelines:
        return _open_pipeline(model, request.pipelines[model.name], request.store)
    source = model.source
    if not isinstance(source, Recorded):
        return _open_project(model, source, request)
    opened = open_recorded(source, model.settings.instances)
    if opened is not None:
        return opened
    from gpux.config.locate import open_project  # the config models: only when the record did not open

    return _open_project(model, open_project(model.path), request)


def _open_project(model: Model, project: Project, request: LoadRequest) -> Opened:
    """Sessions of `project` through `gpux.run.session.load`, with the record a later start may open it from."""
    from gpux.run.session import load
    from gpux.serve.record import Recorded, recordable

    provider = request.fixed.get(model.name, request.provider)
    strict = request.strict or model.name in request.fixed
    given_by = "workspace" if model.name in request.fixed else "--provider"
    sessions = [load(project, provider=provider, strict=strict, store_dir=request.store, provider_source=given_by)
                for _ in range(model.settings.instances)]
    first = sessions[0]
    inputs, outputs = dict(first.inputs), dict(first.outputs)
    feeds = warmup_feeds(inputs, declared_data(project, inputs))
    for s in sessions:
        s.run(feeds)  # the first inference may still fall back: read the provider after it
    steps, files = bind(project, inputs, outputs)
    labels, report = labels_of(project), first.report()
    recipe = recordable(project, first.runner, steps is not None)
    record = None if recipe is None else Recorded(
        name=model.name, version=model.version, path=model.path, root=str(project.root), settings=model.settings,
        inputs=inputs, outputs=outputs, labels=labels, provider=first.provider, runs_on=first.used, report=report,
        recipe=recipe)
    return Opened(inputs=inputs, outputs=outputs, provider=first.provider, runs_on=first.used, report=report,
                  labels=labels, steps=steps, files=files, runs=tuple(s.run for s in sessions), record=record,
                  warmup=feeds, close=closing(s.close for s in sessions))


def inline_elements(seconds: float, feeds: Feeds) -> int:
    """The most input values a request may hold to run on the event loop: none unless the warm-up feeds ran in
    under INLINE_BELOW_S, then as many as take about that long, assuming time grows with the values."""
    if seconds >= INLINE_BELOW_S:
        return 0
    size = max(sum(v.size for v in feeds.values()), 1)
    return max(size, int(size * INLINE_BELOW_S / max(seconds, 1e-9)))


def warm_seconds(run: RunNamed, feeds: Feeds) -> float:
    """Median time of a few warm inferences."""
    took = []
    for _ in range(INLINE_PROBES):
        started = time.perf_counter()
        run(feeds)
        took.append(time.perf_counter() - started)
    return sorted(took)[len(took) // 2]


def _open_pipeline(model: Model, served: Pipeline, store: str | None) -> Opened:
    """A workspace's pipeline served as one model: its inputs in, its last step's outputs out; a pipeline of
    `crops:` steps takes images and answers as `gpux run WORKSPACE IMAGE` does (gpux.serve.pages)."""
    from gpux.workspace.pipeline import open_pipeline

    ws = served.models.workspace
    if ws is not None and any(step.crops for step in ws.config.pipeline):
        from gpux.serve.pages import open_pages

        return open_pages(served.models, served.choice, store, model.settings.instances)
    pipes: list[OpenPipeline] = []
    try:
        for _ in range(model.settings.instances):
            pipes.append(open_pipeline(served.models, served.choice, store, lambda _m: None))
    except BaseException:  # whatever stops it, an interrupt too: the instances opened are closed, then it goes on
        for p in pipes:
            p.close()
        raise
    first = pipes[0]
    provider = served.choice.provider
    return Opened(inputs=dict(first.inputs), outputs=first.outputs, provider=provider,
                  runs_on=first.stages[0].session.used, labels={}, runs=tuple(p.run_last for p in pipes),
                  report={"pipeline": [st.model for st in first.stages], "provider": provider},
                  close=closing(p.close for p in pipes))


