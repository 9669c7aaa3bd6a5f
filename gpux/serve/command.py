"""`gpux serve` behind the click command: opens the projects, applies CLI overrides, sets up logs, runs."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.errors import UsageError

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
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)


def serve_command(cmd: ServeCommand) -> int:
    import contextlib

    from gpux.run.inuse import holding
    from gpux.serve import record

    targets = list(cmd.targets or ["."])
    command = {"targets": targets, "provider": cmd.provider, "strict": cmd.strict, "store": cmd.store,
               "overrides": {k: v for k, v in cmd.overrides.items() if v is not None}}
    recorded = record.replay(targets, command)  # an unchanged command: no config read, no pydantic
    fixed: dict[str, str] = {}
    pipelines: dict[str, Any] = {}
    if recorded is not None:
        projects: list[Any] = list(recorded)
        places = [(m.name, Path(m.root)) for m in recorded]
    else:
        projects, fixed, places, pipelines = _open(cmd)
    # a workspace (its own file, choice and lock) is always read; so is a pipeline
    read = None if recorded is not None or fixed or pipelines else record.taken(projects, cmd.store)
    _logging()
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc is imported: no fork chatter from builds
    from gpux.serve.access import writing
    from gpux.serve.models import LoadRequest
    from gpux.serve.server import ServeRequest, serve

    with contextlib.ExitStack() as held:  # `gpux use` is refused for what is being served
        held.enter_context(writing(sys.stderr, cmd.access_log))
        for name, root in places:
            held.enter_context(holding(name, root, cmd.store, "gpux serve"))
        load = LoadRequest(cmd.provider, cmd.strict, cmd.store, fixed, pipelines)

        def ready(server: Any) -> None:
            """Read from the configs: a record is kept; served from one that did not open as recorded: dropped."""
            if read is not None:
                record.keep(targets, command, server.repo.all(), read)
            elif recorded is not None:
                record.forget(targets, command, server.repo.all())

        serve(ServeRequest(projects=projects, host=cmd.host, http_port=cmd.port, grpc_port=cmd.grpc_port, grpc=cmd.grpc,
                           api_key=cmd.api_key or None, load=load, on_ready=ready))
    return 0


def _open(cmd: ServeCommand) -> tuple[list[Any], dict[str, str], list[tuple[str, Any]], dict[str, Any]]:
    """(the projects to serve, model name → provider a workspace fixed for it, whose in-use lock to hold,
    pipelines served as one model). A workspace target serves each enabled model on the one provider the
    workspace chose, and its pipeline (if any) as a model named after the workspace."""
    from gpux.config.workspace import pipeline_project
    from gpux.workspace.project import open_models, shared_choice

    projects, fixed, places, pipelines = [], {}, [], {}
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
        if ms.workspace.config.pipeline:
            projects.append(_override(pipeline_project(ms.workspace), cmd.overrides))
            pipelines[ms.place.name] = (ms, choice)
    seen: set[tuple[str, str]] = set()
    for p in projects:
        key = (p.name, str(p.config.version))
        if key in seen:
            raise UsageError(f"{p.path}: model {p.name!r} version {key[1]} is served twice",
                             hint="give each version of a model its own `version:` in gpux.yml")
        seen.add(key)
    return projects, fixed, places, pipelines


def _override(project: Any, overrides: dict[str, Any]) -> Any:
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
