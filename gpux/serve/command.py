"""`gpux serve` behind the click command: opens the projects, applies CLI overrides, sets up logs, runs."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from gpux.errors import UsageError

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.serve.models import Pipeline
    from gpux.serve.record import Recorded

SERVE_OVERRIDES = ("max_batch_size", "max_queue_delay_us", "instances", "request_timeout_s")


@dataclass(kw_only=True)
class ServeCommand:
    targets: list[str]
    host: str | None = None
    port: int | None = None
    grpc_port: int | None = None
    grpc: bool = True
    provider: str | None = None
    strict: bool = False
    store: str | None = None
    api_key: str | None = None
    access_log: bool = True
    overrides: dict[str, float | None] = dataclasses.field(default_factory=dict)  # serve: settings (SERVE_OVERRIDES)


class Opening(NamedTuple):
    """What a start read from its targets' configs."""

    projects: list[Project]  # to serve
    fixed: dict[str, str]  # model name -> the provider its workspace chose for it
    places: list[tuple[str, Path]]  # (name, root) whose in-use lock to hold
    pipelines: dict[str, Pipeline]  # workspaces' pipelines, each served as one model


def serve_command(cmd: ServeCommand) -> int:
    import contextlib

    from gpux.run.inuse import holding
    from gpux.serve import record

    targets = list(cmd.targets or ["."])
    command = record.Command(targets=targets, provider=cmd.provider, strict=cmd.strict, store=cmd.store,
                             overrides={k: v for k, v in cmd.overrides.items() if v is not None})
    _logging()
    recorded = record.replay(targets, command)  # an unchanged command: no config read, no pydantic
    opening = _open(cmd) if recorded is None else Opening([], {}, [(m.name, Path(m.root)) for m in recorded], {})
    fixed, places, pipelines = opening.fixed, opening.places, opening.pipelines
    # a workspace (its own file, choice and lock) is always read; so is a pipeline
    read = None if recorded is not None or fixed or pipelines else record.taken(opening.projects, cmd.store)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc is imported: no fork chatter from builds
    from gpux.serve.access import writing
    from gpux.serve.models import LoadRequest
    from gpux.serve.server import ServeRequest, serve

    with contextlib.ExitStack() as held:  # `gpux use` is refused for what is being served
        access = held.enter_context(writing(sys.stderr, cmd.access_log))
        for name, root in places:
            held.enter_context(holding(name, root, cmd.store, "gpux serve"))
        load = LoadRequest(cmd.provider, cmd.strict, cmd.store, fixed, pipelines)

        def ready(server: Any) -> None:
            """Read from the configs: a record is kept; served from one that did not open as recorded: dropped."""
            if read is not None:
                record.keep(targets, command, [m.opened.record for m in server.repo.all()], read)
            elif recorded is not None:
                record.forget(targets, command, server.repo.all())

        served: list[Project | Recorded] = [*opening.projects, *(recorded or [])]
        serve(ServeRequest(projects=served, host=cmd.host, http_port=cmd.port, grpc_port=cmd.grpc_port, grpc=cmd.grpc,
                           api_key=cmd.api_key or None, load=load, on_ready=ready, access=access))
    return 0


def _open(cmd: ServeCommand) -> Opening:
    """The projects to serve, read from their configs. A workspace target serves each enabled model on the one
    provider the workspace chose, and its pipeline (if any) as a model named after the workspace."""
    from gpux.config.workspace import pipeline_project
    from gpux.serve.models import Pipeline
    from gpux.workspace.project import open_models, shared_choice

    opening = Opening([], {}, [], {})
    projects, fixed, places, pipelines = opening
    for t in cmd.targets or ["."]:
        ms = open_models(t, cmd.store)
        places.append((ms.place.name, ms.place.root))
        if ms.workspace is None:
            projects.append(_override(ms.project, cmd.overrides))
            continue
        choice = shared_choice(ms, cmd.provider)
        for w in choice.warnings:
            logging.getLogger("gpux.serve").warning(w)
        projects += [_override(p, cmd.overrides) for p in ms.models.values()]
        fixed.update({p.name: choice.provider for p in ms.models.values()})
        if ms.workspace.config.pipeline:  # of tensors, or of image crops (gpux.serve.pages)
            projects.append(_override(pipeline_project(ms.workspace), cmd.overrides))
            pipelines[ms.place.name] = Pipeline(ms, choice)
    seen: set[tuple[str, str]] = set()
    for p in projects:
        key = (p.name, str(p.config.version))
        if key in seen:
            raise UsageError(f"{p.path}: model {p.name!r} version {key[1]} is served twice",
                             hint="give each version of a model its own `version:` in gpux.yml")
        seen.add(key)
    return opening


def _override(project: Project, overrides: dict[str, float | None]) -> Project:
    given = {k: v for k, v in overrides.items() if v is not None and k in SERVE_OVERRIDES}
    if not given:
        return project
    serve = project.config.serve.model_copy(update=given)
    return dataclasses.replace(project, config=project.config.model_copy(update={"serve": serve}))


def _logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("gpux.serve", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
