"""What `gpux use`, `inspect` and friends act on: a workspace or a single project (a workspace of one),
its enabled models, where its saved choice lives, and the provider it runs: the one choice for all models."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpux.config.load import Project
from gpux.config.workspace import Workspace
from gpux.plan.choice import Place, settle
from gpux.plan.offer import Offer, compute


@dataclass
class Models:
    """The models one runtime choice drives, and whose choice it is."""

    place: Place
    models: dict[str, Project]  # the enabled ones
    disabled: list[str] = field(default_factory=list)
    workspace: Workspace | None = None

    def offer(self) -> Offer:
        return compute(self.models)


def open_models(target: str, store_dir: str | Path | None = None) -> Models:
    """A workspace file (or a folder with one), else a gpux.yml project of one model."""
    from gpux.config.locate import open_project
    from gpux.config.workspace import find, load

    path = find(target)
    if path is not None:
        ws = load(path)
        off = [n for n in ws.projects if n not in ws.enabled]
        models = ws.enabled if ws.config.runtime.build_on_run else {n: pinned(p) for n, p in ws.enabled.items()}
        return Models(Place(ws.name, ws.root, store_dir), models, off, ws)
    project = open_project(target)
    return Models(Place(project.name, project.root, store_dir), {project.name: project})


def pinned(project: Project) -> Project:
    """The project with runtime.build_on_run: false (its workspace pins the artifacts of every model)."""
    from dataclasses import replace

    runtime = project.config.runtime.model_copy(update={"build_on_run": False})
    return replace(project, config=project.config.model_copy(update={"runtime": runtime}))


@dataclass(frozen=True)
class Choice:
    """The provider every model of a workspace runs on, where that came from, and what was said on the way."""

    provider: str
    source: str
    warnings: tuple[str, ...] = ()


def choose(ms: Models, provider: str | None) -> Choice:
    """--provider > $GPUX_PROVIDER > the saved choice > the workspace's runtime.backend > the best offered;
    a request outside the offer is refused naming the models that block it."""
    from gpux.errors import ProviderUnavailable, UsageError
    from gpux.plan.select import ENV_PROVIDER, parse_request

    offer = ms.offer()
    wanted: str | None = None
    source = "auto"
    said: tuple[str, ...] = ()
    for value, where in ((provider, "--provider"), (os.environ.get(ENV_PROVIDER), ENV_PROVIDER)):
        if value:
            names = parse_request(value, where)
            if len(names) > 1:
                raise UsageError(f"{where}: {value}: a workspace runs one provider for all its models")
            wanted, source = (None if names == ("auto",) else names[0]), where
            break
    else:
        saved, why = settle(ms.place, ms.models)
        said = (why,) if why else ()
        backend = ms.workspace.config.runtime.backend if ms.workspace else "auto"
        wanted, source = (saved, "gpux use") if saved else \
            ((backend, "runtime.backend") if backend != "auto" else (None, "auto"))
    if wanted is not None:
        offer.refuse(wanted, source)
        return Choice(wanted, source, said)
    if offer.best is None:  # cpu is the last resort: say what keeps even it out
        raise ProviderUnavailable("no provider runs every enabled model here "
                                  f"(cpu: {'; '.join(offer.blockers('cpu'))})",
                                  hint="see `gpux inspect` for the model × provider matrix")
    return Choice(offer.best, source, said)


def derived(project: Project, provider: str) -> dict[str, Any]:
    """The one choice turned into this model's own settings: its provider block, precision and artifact."""
    from gpux.plan.targets import targets

    chain = targets(project, provider)
    final = chain[-1]
    block = getattr(project.config.providers, provider)
    return {"provider": provider, "precision": final.precision, "artifact": final.id,
            "steps": [t.id for t in chain], "options": block.model_dump(mode="json")}


__all__ = ["Choice", "Models", "choose", "derived", "open_models"]
