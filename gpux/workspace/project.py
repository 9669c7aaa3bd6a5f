"""What `gpux use`, `inspect` and friends act on: a workspace or a single project (a workspace of one),
its enabled models, where its saved choice lives, and the provider it runs: the one choice for all models."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from gpux.config.load import Project
from gpux.config.workspace import Workspace
from gpux.plan.choice import Place
from gpux.plan.offer import Offer, compute
from gpux.plan.select import Selection


class ModelChoice(TypedDict):
    """A workspace's one choice turned into one model's own settings (`workspace.project.derived`)."""

    provider: str
    precision: str
    artifact: str
    steps: list[str]  # the targets built in turn, the artifact last
    options: dict[str, object]  # its provider block, as gpux.yml would write it


@dataclass
class Models:
    """The models one runtime choice drives, and whose choice it is."""

    place: Place
    models: dict[str, Project]  # the enabled ones
    disabled: list[str] = field(default_factory=list)
    workspace: Workspace | None = None

    def offer(self) -> Offer:
        return compute(self.models)

    @property
    def project(self) -> Project:
        """The one project of a target that is not a workspace."""
        [project] = self.models.values()
        return project


def open_models(target: str, store_dir: str | Path | None = None) -> Models:
    """A workspace file (or a folder with one and no gpux.yml), else a project of one model (`workspace` None):
    the target is told apart and opened once, here, for every command that takes either."""
    from gpux.config import find_workspace
    from gpux.config.locate import open_project
    from gpux.config.workspace import load_workspace

    path = find_workspace(target)
    if path is None:
        project = open_project(target)
        return Models(Place(project.name, project.root, store_dir), {project.name: project})
    ws = load_workspace(path)
    off = [n for n in ws.projects if n not in ws.enabled]
    models = ws.enabled if ws.config.runtime.build_on_run else {n: pinned(p) for n, p in ws.enabled.items()}
    return Models(Place(ws.name, ws.root, store_dir), models, off, ws)


def pinned(project: Project) -> Project:
    """The project with runtime.build_on_run: false (its workspace pins the artifacts of every model)."""
    from dataclasses import replace

    runtime = project.config.runtime.model_copy(update={"build_on_run": False})
    return replace(project, config=project.config.model_copy(update={"runtime": runtime}))


@dataclass(frozen=True)
class Choice:
    """The provider every model of a workspace runs on, where that came from, and what was said on the way."""

    selection: Selection

    @property
    def provider(self) -> str:
        return self.selection.chain[0]

    @property
    def source(self) -> str:
        return self.selection.source

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.selection.warnings


def shared_choice(ms: Models, provider: str | None) -> Choice:
    """The workspace's one provider, as plan.select.select_shared decides it (nothing is written: `gpux build`
    keeps a reset saved choice with plan.choice.keep)."""
    from gpux.plan.select import select_shared

    backend = ms.workspace.config.runtime.backend if ms.workspace else "auto"
    return Choice(select_shared(ms.models, ms.place, provider, backend))


def derived(project: Project, provider: str) -> ModelChoice:
    """The one choice turned into this model's own settings: its provider block, precision and artifact."""
    from gpux.runtimes import targets

    chain = targets(project, provider)
    final = chain[-1]
    block = getattr(project.config.providers, provider)
    return {"provider": provider, "precision": final.precision, "artifact": final.id,
            "steps": [t.id for t in chain], "options": block.model_dump(mode="json")}


__all__ = ["Choice", "Models", "derived", "open_models", "shared_choice"]
