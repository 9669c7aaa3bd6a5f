"""Pipelines: steps that feed one model's outputs (named `MODEL.OUTPUT`) into the next model's inputs, run on
one provider, timed per step and end to end; `gpux run` on a workspace's pipeline (`run_workspace`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpux import report
from gpux.arrays import Feeds, Named
from gpux.errors import ConfigError, Problem, UsageError
from gpux.model.tensor import Tensor
from gpux.report import tables
from gpux.run.session import Session
from gpux.workspace.project import Choice, Models, shared_choice


@dataclass
class Stage:
    """One step: the model's open session and where each of its inputs comes from."""

    model: str
    session: Session
    wiring: dict[str, str]  # model input -> pipeline input name, or MODEL.OUTPUT of an earlier step


@dataclass
class Pipeline:
    """The opened steps, in order; `inputs` are what a caller feeds, `outputs` what the last step returns."""

    stages: list[Stage]
    inputs: dict[str, Tensor] = field(default_factory=dict)

    @property
    def outputs(self) -> dict[str, Tensor]:
        """The last step's outputs, named MODEL.OUTPUT."""
        last = self.stages[-1]
        return {f"{last.model}.{n}": Tensor(f"{last.model}.{n}", t.dtype, t.shape)
                for n, t in last.session.outputs.items()}

    def run_last(self, feeds: Feeds) -> Named:
        """Run every step; only the last step's outputs (what a server answers)."""
        last = self.stages[-1]
        values = self.run(feeds)
        return {k: values[k] for k in (f"{last.model}.{n}" for n in last.session.output_names)}

    def run(self, feeds: Feeds, timings: list[float] | None = None) -> Named:
        """Every step's outputs as MODEL.OUTPUT → array; `timings` gets each step's seconds, in order."""
        values: Named = dict(feeds)  # the pipeline's inputs, then each step's outputs as MODEL.OUTPUT
        for st in self.stages:
            started = time.perf_counter()
            out = st.session.run({name: values[src] for name, src in st.wiring.items()})
            if timings is not None:
                timings.append(time.perf_counter() - started)
            values.update({f"{st.model}.{n}": v for n, v in out.items()})
        return {k: v for k, v in values.items() if "." in k}

    def close(self) -> None:
        for st in self.stages:  # a model used by two steps is closed twice: closing is idempotent
            st.session.close()


@dataclass
class Wiring:
    """Where each step's inputs come from, the pipeline's own inputs, and its outputs (the last step's)."""

    steps: list[tuple[str, dict[str, str]]]  # (model, model input -> pipeline input or MODEL.OUTPUT)
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]


def wire(ms: Models, io: dict[str, tuple[dict[str, Tensor], dict[str, Tensor]]]) -> Wiring:
    """Check and resolve the pipeline's wiring against each model's (inputs, outputs); inputs a step leaves
    out come from the pipeline input of the same name."""
    ws = ms.workspace
    assert ws is not None and ws.config.pipeline
    refuse_crops(ms)
    produced: dict[str, Tensor] = {}
    out = Wiring([], {}, {})
    for i, step in enumerate(ws.config.pipeline):
        inputs, outputs = io[step.model]

        def problem(loc: str, msg: str, i: int = i) -> ConfigError:
            return ConfigError([Problem(str(ws.path), 0, 0, f"pipeline.{i}.inputs{loc}", msg)])


        unknown = sorted(set(step.inputs) - set(inputs))
        if unknown:
            raise problem(f".{unknown[0]}", f"{unknown[0]!r} is not an input of {step.model!r} "
                          f"(inputs: {', '.join(inputs)})")
        wiring = {}
        for name, tensor in inputs.items():
            src = step.inputs.get(name, name)
            if "." in src and src not in produced:
                raise problem(f".{name}", f"{src!r} is not an output of an earlier step "
                              f"(outputs so far: {', '.join(produced) or 'none'})")
            if "." not in src:
                out.inputs.setdefault(src, Tensor(src, tensor.dtype, tensor.shape))
            wiring[name] = src
        out.steps.append((step.model, wiring))
        out.outputs = {f"{step.model}.{n}": Tensor(f"{step.model}.{n}", t.dtype, t.shape) for n, t in outputs.items()}
        produced.update(out.outputs)
    return out


def refuse_crops(ms: Models) -> None:
    """Tensors in (-i/-f, --benchmark, export) take pipelines of tensor steps only: a crops step is refused."""
    assert ms.workspace is not None
    for i, step in enumerate(ms.workspace.config.pipeline):
        if step.crops is not None:
            raise ConfigError([Problem(str(ms.workspace.path), 0, 0, f"pipeline.{i}.crops", "a crops step runs on "
                                       "image files (`gpux run WORKSPACE IMAGE...`, or images sent to `gpux serve`); "
                                       "tensors (-i/-f, --benchmark, export) take pipelines of tensor steps only")])


def open_pipeline(ms: Models, choice: Choice, store_dir: str | Path | None,
                  log: Callable[[str], None] | None) -> Pipeline:
    """Open every step's model on the chosen provider (strict: one runtime for all) and check the wiring."""
    refuse_crops(ms)  # before any model is opened
    sessions = open_sessions(ms, choice, store_dir, log)
    try:
        plan = wire(ms, {n: (s.inputs, s.outputs) for n, s in sessions.items()})
    except BaseException:  # whatever stops it, an interrupt too: the sessions are closed, then it goes on
        close_all(sessions)
        raise
    return Pipeline([Stage(m, sessions[m], w) for m, w in plan.steps], plan.inputs)


def open_sessions(ms: Models, choice: Choice, store_dir: str | Path | None,
                  log: Callable[[str], None] | None) -> dict[str, Session]:
    """Each step's model opened once on the chosen provider (strict: one runtime for all)."""
    from gpux.run.session import load

    assert ms.workspace is not None
    sessions: dict[str, Session] = {}
    try:
        for step in ms.workspace.config.pipeline:
            if step.model not in sessions:
                sessions[step.model] = load(ms.models[step.model], choice.provider, strict=True,
                                            store_dir=store_dir, log=log, provider_source="workspace")
    except BaseException:  # whatever stops it, an interrupt too: the sessions opened so far are closed, then it goes on
        close_all(sessions)
        raise
    return sessions


def close_all(sessions: dict[str, Session]) -> None:
    for s in sessions.values():
        s.close()


def benchmark(pipe: Pipeline, feeds: Feeds, runs: int, warmup: int) -> dict[str, Any]:
    """Latency of each step and of the whole pipeline over `runs` runs after `warmup` ones (bounded by count)."""
    import numpy as np

    for _ in range(warmup):
        pipe.run(feeds)
    per_run: list[list[float]] = []
    totals: list[float] = []
    for _ in range(runs):
        steps: list[float] = []
        started = time.perf_counter()
        pipe.run(feeds, steps)
        totals.append(time.perf_counter() - started)
        per_run.append(steps)

    def stats(xs: Any) -> dict[str, float]:
        ms = np.asarray(xs) * 1000.0
        return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                "mean_ms": float(ms.mean())}

    cols = np.asarray(per_run).T
    rows = [{"step": st.model, "provider": st.session.provider, **stats(col)}
            for st, col in zip(pipe.stages, cols, strict=True)]
    return {"runs": runs, "warmup": warmup, "steps": rows,
            "end_to_end": {**stats(totals), "per_s": float(len(totals) / sum(totals))}}


# `gpux run` options a pipeline run does not take (the pipeline is strict: one provider for every step)
UNSUPPORTED = ("placement", "duration", "shapes", "concurrency", "as_csv", "baseline", "report")


class RunAsked(Protocol):
    """What `gpux run` was asked for that a pipeline reads (gpux.run.command.RunRequest has it all); the options a
    pipeline does not support are read by name (UNSUPPORTED)."""

    @property
    def provider(self) -> str | None: ...
    @property
    def store(self) -> str | None: ...
    @property
    def as_json(self) -> bool: ...
    @property
    def benchmark(self) -> bool: ...
    @property
    def batch(self) -> int | None: ...
    @property
    def runs(self) -> int | None: ...
    @property
    def warmup(self) -> int | None: ...
    @property
    def input_json(self) -> str | None: ...
    @property
    def input_file(self) -> str | None: ...
    @property
    def output(self) -> str | None: ...


def run_workspace(ms: Models, req: RunAsked) -> int:
    """Run the pipeline once on given inputs, or benchmark it per step and end to end."""
    from gpux.run.inuse import holding

    if ms.workspace is None or not ms.workspace.config.pipeline:
        raise UsageError(f"{ms.place.name}: the workspace has no pipeline: to run; run one model by its folder")
    timed = ("input_json", "input_file", "output") if req.benchmark else ("runs", "warmup", "batch")  # not read
    refuse_unsupported(req, timed, "running a workspace's pipeline" + ("" if req.benchmark else " once"))
    if req.output and not req.output.endswith(".npz"):
        raise UsageError(f"--output {req.output}: outputs are written as .npz; name the file *.npz")
    if not req.benchmark and (req.input_json is None) == (req.input_file is None):  # before any model is opened
        raise UsageError("pass one of --input or --file (or --benchmark)")
    choice = shared_choice(ms, req.provider)
    store_dir, as_json = req.store, req.as_json
    what = "gpux run --benchmark" if req.benchmark else "gpux run"
    with holding(ms.place.name, ms.place.root, store_dir, what):
        pipe = open_pipeline(ms, choice, store_dir, report.progress(as_json))
        try:
            doc = _run_pipeline(pipe, req)
        finally:
            pipe.close()
    doc = {"workspace": ms.place.name, "provider": choice.provider, "source": choice.source,
           "warnings": list(choice.warnings), **doc}
    _render_run(doc, as_json)
    return 0


def _run_pipeline(pipe: Pipeline, req: RunAsked) -> dict[str, Any]:
    """The inputs (seeded ones of --batch for --benchmark, else --input or --file), then the pipeline benchmarked per
    step and end to end, or run once (its last step's outputs, written to --output too)."""
    from gpux.model.inputs import load_file, parse_json, synthetic

    feeds = synthetic(pipe.inputs, {"batch": req.batch or 1}) if req.benchmark else \
        parse_json(req.input_json, pipe.inputs) if req.input_json is not None else \
        load_file(req.input_file or "", pipe.inputs)
    if req.benchmark:
        return benchmark(pipe, feeds, req.runs or 100, req.warmup or 10)
    outputs = pipe.run_last(feeds)
    if req.output:
        import numpy as np

        np.savez(req.output, **outputs)  # type: ignore[arg-type]  # (numpy: as if a name were allow_pickle)
    return {"outputs": {k: v.tolist() for k, v in outputs.items()}}


def refuse_unsupported(req: object, more: tuple[str, ...] = (), what: str = "running a workspace's pipeline") -> None:
    """The `gpux run` options a pipeline run does not take (UNSUPPORTED, and `more`), refused in one line."""
    names = {"as_csv": "csv", "input_json": "input", "input_file": "file"}
    given = [f"--{names.get(k, k).replace('_', '-')}" for k in (*UNSUPPORTED, *more) if getattr(req, k, None)]
    if given:
        raise UsageError(f"{', '.join(given)}: not supported when {what}",
                         hint="run one model by its folder for those; a pipeline is always strict")


def _render_run(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        report.emit_json(doc)
        return
    for w in doc["warnings"]:
        report.warn(w)
    report.info(f"{doc['workspace']}: every step on {doc['provider']} ({doc['source']})")
    if "steps" not in doc:
        for k, v in doc["outputs"].items():
            print(f"{k}: {v}")
        return
    rows = [[r["step"], r["provider"], f"{r['p50_ms']:.4f}", f"{r['p99_ms']:.4f}", f"{r['mean_ms']:.4f}"]
            for r in doc["steps"]]
    e = doc["end_to_end"]
    rows.append(["end to end", doc["provider"], f"{e['p50_ms']:.4f}", f"{e['p99_ms']:.4f}", f"{e['mean_ms']:.4f}"])
    print(tables.format_table(["step", "provider", "p50 ms", "p99 ms", "mean ms"], rows))
    print(f"{doc['runs']} runs after {doc['warmup']} warm-up; {e['per_s']:.1f} pipelines/s")


__all__ = ["Pipeline", "Stage", "Wiring", "benchmark", "close_all", "open_pipeline", "open_sessions",
           "refuse_unsupported", "run_workspace", "wire"]
