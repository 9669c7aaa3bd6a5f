"""Pipelines: steps that feed one model's outputs (named `MODEL.OUTPUT`) into the next model's inputs, run on
one provider, timed per step and end to end."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux.errors import ConfigError, Problem
from gpux.modelio import Tensor
from gpux.multi.project import Choice, Models
from gpux.session import Session


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

    def run_last(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """Run every step; only the last step's outputs (what a server answers)."""
        wanted = self.outputs
        return {k: v for k, v in self.run(feeds).items() if k in wanted}

    def run(self, feeds: dict[str, Any], timings: list[float] | None = None) -> dict[str, Any]:
        """Every step's outputs as MODEL.OUTPUT → array; `timings` gets each step's seconds, in order."""
        values = dict(feeds)
        for st in self.stages:
            started = time.perf_counter()
            out = st.session.run({name: values[src] for name, src in st.wiring.items()})
            if timings is not None:
                timings.append(time.perf_counter() - started)
            values.update({f"{st.model}.{n}": v for n, v in out.items()})
        return {k: v for k, v in values.items() if "." in k}

    def close(self) -> None:
        for st in self.stages:
            st.session.close()


def open_pipeline(ms: Models, choice: Choice, store_dir: str | Path | None, log: Any) -> Pipeline:
    """Open every step's model on the chosen provider (strict: one runtime for all) and check the wiring."""
    from gpux.session import load

    ws = ms.workspace
    assert ws is not None and ws.config.pipeline
    pipe = Pipeline([])
    produced: dict[str, Tensor] = {}
    try:
        for i, step in enumerate(ws.config.pipeline):
            project = ms.models[step.model]
            session = load(project, choice.provider, strict=True, store_dir=store_dir, log=log)
            pipe.stages.append(Stage(step.model, session, _wire(ws.path, i, step.inputs, session, produced, pipe)))
            produced.update({f"{step.model}.{n}": t for n, t in session.outputs.items()})
    except BaseException:
        pipe.close()
        raise
    return pipe


def _wire(path: Path, i: int, given: dict[str, str], session: Session, produced: dict[str, Tensor],
          pipe: Pipeline) -> dict[str, str]:
    """Model input → source for step `i`; inputs left out come from the pipeline input of the same name."""
    def problem(loc: str, msg: str) -> ConfigError:
        return ConfigError([Problem(str(path), 0, 0, f"pipeline.{i}.inputs{loc}", msg)])

    unknown = sorted(set(given) - set(session.inputs))
    if unknown:
        raise problem(f".{unknown[0]}", f"{unknown[0]!r} is not an input of {session.project.name!r} "
                      f"(inputs: {', '.join(session.inputs)})")
    wiring = {}
    for name, tensor in session.inputs.items():
        src = given.get(name, name)
        if "." in src and src not in produced:
            raise problem(f".{name}", f"{src!r} is not an output of an earlier step "
                          f"(outputs so far: {', '.join(produced) or 'none'})")
        if "." not in src:
            pipe.inputs.setdefault(src, Tensor(src, tensor.dtype, tensor.shape))
        wiring[name] = src
    return wiring


def benchmark(pipe: Pipeline, feeds: dict[str, Any], runs: int, warmup: int) -> dict[str, Any]:
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


__all__ = ["Pipeline", "Stage", "benchmark", "open_pipeline"]
