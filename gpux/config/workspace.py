"""The workspace file (gpux.workspace.yml): which gpux.yml projects run together, which are enabled, the
shared runtime settings and the optional pipeline; loaded and checked into a Workspace."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpux.config.load import Project, load_config
from gpux.config.problems import NAME_RE
from gpux.errors import ConfigError, Problem


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Member(_Strict):
    path: str = Field(description="The model's project folder or gpux.yml, relative to this file.")
    enabled: bool = Field(True, description="Disabled models are neither built, run, nor counted in the offer.")


class Step(_Strict):
    model: str = Field(description="A model of `models:`.")
    inputs: dict[str, str] = Field(
        default_factory=dict, description="Model input → where it comes from: `STEP_MODEL.OUTPUT` of an earlier "
        "step, or the name of a pipeline input. Inputs left out are taken by name (a pipeline input).")
    crops: str | None = Field(
        None, description="`STEP_MODEL.OUTPUT` of an earlier step whose answers are text regions (text_boxes): "
        "this step runs once per region, on the region cut upright from the pipeline's image file, through its "
        "own image preprocess (`gpux run WORKSPACE IMAGE`).")


class WorkspaceRuntime(_Strict):
    backend: str = Field("auto", description="'auto' (the best provider every enabled model offers) or one "
                         "provider; `gpux use` and --provider win over it.")
    build_on_run: bool = Field(True, description="Build missing artifacts on first use; false pins them.")


class WorkspaceConfig(_Strict):
    schema_version: int = Field(1, description="Version of the workspace format.")
    name: str = Field(pattern=NAME_RE, description="Name of the workspace (its saved choice and locks); "
                      "`gpux serve` serves its pipeline as a model of this name.")
    version: str = Field("1", description="Version its pipeline is served as.")
    models: dict[str, Member] = Field(min_length=1, description="Model name → its project.")
    runtime: WorkspaceRuntime = Field(default_factory=WorkspaceRuntime, description="Shared runtime settings.")
    pipeline: list[Step] = Field(default_factory=list, description="Steps run in order by `gpux run`.")


@dataclass
class Workspace:
    """A loaded workspace: its config, where it lives, and each member project (all of them, enabled or not)."""

    path: Path
    config: WorkspaceConfig
    projects: dict[str, Project] = field(default_factory=dict)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def enabled(self) -> dict[str, Project]:
        return {n: p for n, p in self.projects.items() if self.config.models[n].enabled}


def pipeline_project(ws: Workspace) -> Project:
    """A stand-in project naming the pipeline where a server expects one model (name, version, serve: of the
    first step's model)."""
    from gpux.config.schema import GpuxConfig, ModelSource

    first = ws.projects[ws.config.pipeline[0].model].config
    config = GpuxConfig(name=ws.name, version=ws.config.version, model=ModelSource(source=str(ws.path.name)),
                        serve=first.serve, description="pipeline: " + " → ".join(s.model for s in ws.config.pipeline))
    return Project(path=ws.path, config=config)


def load_workspace(path: Path, require_model: bool = True) -> Workspace:
    """Read and check a workspace file, then every project it names and its pipeline (those problems at once)."""
    from gpux.config.parse import parse_yaml

    data, marks, problems = parse_yaml(path.read_text(encoding="utf-8"), str(path))
    if problems:
        raise ConfigError(problems)

    def at(loc: tuple[Any, ...], msg: str) -> Problem:
        line, col = marks.get(tuple(str(x) for x in loc), marks.get((), (1, 1)))
        return Problem(str(path), line, col, ".".join(str(x) for x in loc), msg)

    try:
        config = WorkspaceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([at(tuple(e["loc"]), _message(e)) for e in exc.errors()]) from exc
    ws = Workspace(path, config)
    errors: list[Problem] = []
    for name, member in config.models.items():
        try:
            ws.projects[name] = load_config(path.parent / member.path, require_model=require_model)
        except ConfigError as exc:
            errors += [at(("models", name, "path"), f"model {name!r}: {p}") for p in exc.problems]
    errors += [at(loc, msg) for loc, msg in pipeline_problems(config)]
    if errors:
        raise ConfigError(errors)
    return ws


MODELS: dict[str, type[BaseModel]] = {"": WorkspaceConfig, "models": Member, "runtime": WorkspaceRuntime,
                                      "pipeline": Step}


def _message(error: Any) -> str:
    """Pydantic's message, with the keys allowed and a did-you-mean for an unknown key."""
    from gpux.config.problems import did_you_mean

    loc = [str(x) for x in error["loc"]]
    if error["type"] != "extra_forbidden":
        return str(error["msg"])
    owner = MODELS.get(loc[0] if len(loc) > 1 else "", WorkspaceConfig)
    fields = list(owner.model_fields)
    return f"unknown key {loc[-1]!r}{did_you_mean(loc[-1], fields)}; expected one of {', '.join(fields)}"


def pipeline_problems(config: WorkspaceConfig) -> list[tuple[tuple[Any, ...], str]]:
    """Steps name enabled models and take outputs of earlier steps only."""
    out: list[tuple[tuple[Any, ...], str]] = []
    earlier: list[str] = []
    for i, step in enumerate(config.pipeline):
        member = config.models.get(step.model)
        if member is None:
            out.append((("pipeline", i, "model"), f"no model {step.model!r} in models: "
                        f"({', '.join(config.models)})"))
        elif not member.enabled:
            out.append((("pipeline", i, "model"), f"model {step.model!r} is disabled (models.{step.model}.enabled:"
                        " false); enable it or take the step out"))
        for name, source in step.inputs.items():
            ref, dot, _ = source.partition(".")
            if dot and ref not in earlier:
                out.append((("pipeline", i, "inputs", name), f"{source!r}: {ref!r} is not an earlier step"))
        if step.crops is not None:
            out += _crops_problems(step, i, earlier)
        earlier.append(step.model)
    return out


def _crops_problems(step: Step, i: int, earlier: list[str]) -> list[tuple[tuple[Any, ...], str]]:
    """A crops step names MODEL.OUTPUT of an earlier step, and takes nothing else: its input is the crop."""
    ref, dot, output = (step.crops or "").partition(".")
    if not dot or not output:
        return [(("pipeline", i, "crops"), f"{step.crops!r}: name the regions as MODEL.OUTPUT (e.g. detector.OUTPUT)")]
    if ref not in earlier:
        return [(("pipeline", i, "crops"), f"{step.crops!r}: {ref!r} is not an earlier step")]
    if step.inputs:
        return [(("pipeline", i, "inputs"), "a crops step's input is each crop; take inputs: out of it")]
    return []


__all__ = ["Workspace", "WorkspaceConfig", "load_workspace", "pipeline_project"]
