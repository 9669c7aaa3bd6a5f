"""Bringing served models up and down while the server runs (Triton's model repository extension): the index,
load (reopen a model from its gpux.yml, a workspace's pipeline from its gpux.workspace.yml, swapped in once ready)
and unload (no new requests, in-flight ones finish, then its sessions are closed)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpux.serve.errors import BadRequest, NotServed, ServeError, is_bug
from gpux.serve.metrics import Metrics
from gpux.serve.model_config import overridden
from gpux.serve.models import LoadRequest, Model, Pipeline, Repository, open_served

log = logging.getLogger("gpux.serve")


def state_of(model: Model) -> tuple[str, str]:
    """The model's state in the repository index, and why when it is not READY."""
    if model.ready:
        return "READY", ""
    if model.failed:
        return "UNAVAILABLE", f"failed to load: {model.failed}"
    if model.unloaded:
        return "UNAVAILABLE", model.reason or "unloaded"
    return "LOADING", ""


class Lifecycle:
    """Loads and unloads the models of `repo`, one change at a time per model."""

    def __init__(self, repo: Repository, metrics: Metrics, request: LoadRequest, drain_s: float = 30.0) -> None:
        self.repo, self.metrics, self.request, self.drain_s = repo, metrics, request, drain_s
        self._locks: dict[str, asyncio.Lock] = {}

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Every served model version with its state (Triton's RepositoryIndex), by name then version."""
        out = []
        for name in sorted(self.repo.models):
            for version in self.repo.versions(name):
                model = self.repo.models[name][version]
                state, reason = state_of(model)
                if ready_only and state != "READY":
                    continue
                out.append({"name": name, "version": version, "state": state, **({"reason": reason} if reason else {})})
        return out

    async def open(self, model: Model, request: LoadRequest | None = None) -> None:
        """Open and warm up the model off the event loop and start its worker (not ready yet); errors propagate."""
        request = request or self.request
        await asyncio.get_running_loop().run_in_executor(None, open_served, model, request, self.metrics)
        assert model.worker is not None
        model.worker.start()

    def serve(self, model: Model) -> None:
        """From now on the model takes requests."""
        model.ready, model.unloaded, model.reason, model.failed = True, False, "", ""
        self.metrics.child(self.metrics.ready, model.name, model.version).set(1)
        announce(model)

    async def load(self, name: str, override: str | None = None) -> None:
        """Reopen every version of `name` from its gpux.yml (a new model file, a new build, a new version number),
        a workspace's pipeline from its gpux.workspace.yml, then swap it in and retire the old one; on failure the
        old one keeps serving and the error is a 400.
        `override`: a config override (Triton's ModelConfig as JSON), applied to the fields gpux serves by, else
        refused (gpux/serve/model_config.py)."""
        self._known(name, "failed to load")
        async with self._locks.setdefault(name, asyncio.Lock()):
            old = list(self.repo.models[name].values())
            if override is not None:  # checked against what serves now, before anything is reopened
                settings = {m.version: overridden(m, override) for m in old}
            reopened, request = await asyncio.get_running_loop().run_in_executor(None, reopen, name, old,
                                                                                 self.request)
            fresh = [Model.of(p) for p in reopened]
            for model in fresh if override is not None else ():  # on the settings its gpux.yml gives now
                model.settings = replace(model.settings, **settings.get(model.version, settings[old[-1].version]))
            try:
                for model in fresh:
                    await self.open(model, request)
            # whatever fails, the old versions keep serving: the new ones are retired first; a bug goes on to the
            # transport (a 500, logged), a model or config that does not open is a 400
            except Exception as exc:
                await retire(fresh, 0)
                if isinstance(exc, ServeError) or is_bug(exc):
                    raise
                raise BadRequest(f"failed to load model '{name}': {one_line(exc)}") from exc
            for model in old:
                model.ready = False
                if model.version not in {m.version for m in fresh}:
                    self.metrics.child(self.metrics.ready, model.name, model.version).set(0)
            self.repo.replace(name, fresh)
            self.request = request  # a pipeline's workspace as read now: what its next load starts from
            for model in fresh:
                self.serve(model)
            await retire(old, self.drain_s)

    async def unload(self, name: str) -> None:
        """Stop serving `name`: new requests get 404 at once, requests in flight finish (up to drain_s)."""
        self._known(name, "failed to unload")
        async with self._locks.setdefault(name, asyncio.Lock()):
            models = list(self.repo.models[name].values())
            for model in models:
                self._mark_gone(model, "unloaded")
            await retire(models, self.drain_s)
            log.info("unloaded: %s", name)

    def _known(self, name: str, failed: str) -> None:
        """A 404 for a model not served here, in Triton's words ("failed to load 'x'", which clients check)."""
        if name not in self.repo.models:
            known = ", ".join(sorted(self.repo.models)) or "none"
            raise NotServed(f"{failed} '{name}': unknown model '{name}'; served models: {known} (a load reopens a "
                            "served model; restart gpux serve to serve another)")

    def _mark_gone(self, model: Model, reason: str) -> None:
        model.ready, model.unloaded, model.reason = False, True, reason
        self.metrics.child(self.metrics.ready, model.name, model.version).set(0)


def reopen(name: str, old: list[Model], request: LoadRequest) -> tuple[list[Any], LoadRequest]:
    """The projects of `name` read again from their files, with the request that opens them (a pipeline's: its
    workspace read again); a file that no longer reads, or names another model or the same version twice, is a
    400 naming it."""
    from gpux.config.locate import open_project
    from gpux.errors import GpuxError

    if name in request.pipelines:
        project, pipeline = reread_pipeline(name, old[-1].path, request)
        return [project], replace(request, pipelines={**request.pipelines, name: pipeline})
    projects = []
    for model in old:
        try:
            project = open_project(model.path)
        except GpuxError as exc:
            raise BadRequest(f"failed to load model '{name}': {one_line(exc)}") from exc
        if project.name != name:
            raise BadRequest(f"failed to load model '{name}': {model.path} now names model "
                             f"'{project.name}'; a load reopens the same model (restart to serve another)")
        projects.append(project)
    versions = [str(p.config.version) for p in projects]
    twice = sorted({v for v in versions if versions.count(v) > 1})
    if twice:
        raise BadRequest(f"failed to load model '{name}': version {twice[0]} is declared by two of its gpux.yml files")
    return projects, request


def reread_pipeline(name: str, path: str, request: LoadRequest) -> tuple[Any, Pipeline]:
    """The workspace file of pipeline `name` read again as a start reads it: its models, the one provider they
    run on (the command's --provider first) and the stand-in project of its pipeline; a file that no longer reads,
    names another workspace or declares no pipeline is a 400 naming it."""
    from gpux.config.workspace import pipeline_project
    from gpux.errors import GpuxError
    from gpux.workspace.project import open_models, shared_choice

    failed = f"failed to load model '{name}'"
    if not Path(path).is_file():
        raise BadRequest(f"{failed}: its workspace file {path} is gone; put it back and load again")
    try:
        ms = open_models(path, request.store)
        choice = shared_choice(ms, request.provider)
    except GpuxError as exc:
        raise BadRequest(f"{failed}: {one_line(exc)}") from exc
    if ms.workspace is None or ms.place.name != name:
        raise BadRequest(f"{failed}: {path} now names workspace '{ms.place.name}'; a load reopens the same model "
                         "(restart to serve another)")
    if not ms.workspace.config.pipeline:
        raise BadRequest(f"{failed}: {path} declares no pipeline now; declare it again, or unload '{name}'")
    for warning in choice.warnings:
        log.warning(warning)
    return pipeline_project(ms.workspace), Pipeline(ms, choice)


async def retire(models: list[Model], drain_s: float) -> None:
    """Wait (up to drain_s) for the models' requests in flight to finish, then close their workers and release
    what they opened (their sessions; a pipeline's, each step's)."""
    deadline = time.monotonic() + drain_s
    while any(m.active for m in models) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    for model in models:
        if model.worker is not None:
            await model.worker.close()
        model.opened.close()


def one_line(exc: BaseException) -> str:
    from gpux.errors import GpuxError

    text = "; ".join(exc.lines()) if isinstance(exc, GpuxError) else f"{type(exc).__name__}: {exc}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def announce(model: Model) -> None:
    """The load report in the log: providers skipped and why, warnings, what runs."""
    from gpux.report import attempt_line

    for attempt in model.opened.report.get("attempts", []):
        if not attempt["ok"]:
            log.info("%s %s: skipped %s (%s): %s", model.name, model.version, attempt["provider"],
                     attempt["stage"], attempt["reason"])
    skipped = {attempt_line(a) for a in model.opened.report.get("attempts", [])}
    for warning in model.opened.report.get("warnings", []):
        if warning in skipped:  # a fallback's skips are in the report's warnings too: said once, above
            continue
        log.warning("%s %s: warning: %s", model.name, model.version, warning)
    log.info("ready: %s %s on %s (%s)", model.name, model.version, model.provider, model.runs_on)
