"""`gpux serve` behind the click command: opens the projects, applies CLI overrides, sets up logs, runs."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from gpux.errors import UsageError

SERVE_OVERRIDES = ("max_batch_size", "max_queue_delay_us", "instances", "request_timeout_s")


@dataclass
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
    from gpux.resolve import open_project

    projects = [_override(open_project(t), cmd.overrides) for t in cmd.targets or ["."]]
    seen: set[tuple[str, str]] = set()
    for p in projects:
        key = (p.name, str(p.config.version))
        if key in seen:
            raise UsageError(f"{p.path}: model {p.name!r} version {key[1]} is served twice",
                             hint="give each version of a model its own `version:` in gpux.yml")
        seen.add(key)
    _logging(cmd.access_log)
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # before grpc is imported: no fork chatter from builds
    from gpux.serve.models import LoadRequest
    from gpux.serve.server import ServeRequest, serve

    serve(ServeRequest(projects, host=cmd.host, http_port=cmd.port, grpc_port=cmd.grpc_port, grpc=cmd.grpc,
                       api_key=cmd.api_key or None, load=LoadRequest(cmd.provider, cmd.strict, cmd.store)))
    return 0


def _override(project: Any, overrides: dict[str, Any]) -> Any:
    given = {k: v for k, v in overrides.items() if v is not None and k in SERVE_OVERRIDES}
    if not given:
        return project
    serve = project.config.serve.model_copy(update=given)
    return dataclasses.replace(project, config=project.config.model_copy(update={"serve": serve}))


def _logging(access: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for name in ("gpux.serve", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    logging.getLogger("gpux.serve.access").setLevel(logging.INFO if access else logging.WARNING)
