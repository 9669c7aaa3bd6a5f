"""The provider `gpux use` saved for a project (or workspace) on this machine: where it lives in the artifact
store, reading it back still valid (reset to the best offered provider, with the reason, when it is not), and
the one selection every command makes: --provider > $GPUX_PROVIDER > the saved choice > runtime.backend >
gpux.lock.json > auto."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpux import files
from gpux.config.load import Project
from gpux.providers import registry

if TYPE_CHECKING:
    from gpux.plan.select import Selection

CHOICE_FILE = "use.json"


@dataclass(frozen=True)
class Place:
    """Whose choice: a project's or a workspace's name, and the folder whose store keeps it."""

    name: str
    root: Path
    store_dir: str | Path | None = None

    @property
    def file(self) -> Path:
        return files.store_root(self.root, self.store_dir) / self.name / CHOICE_FILE


def read(place: Place) -> str | None:
    """The saved provider, or None (none saved, or a file that does not name a provider)."""
    try:
        value = json.loads(place.file.read_text(encoding="utf-8")).get("provider")
    except (OSError, ValueError, AttributeError):
        return None
    return value if value in registry() else None


def write(place: Place, provider: str | None) -> None:
    """Save `provider` (None or 'auto': forget the choice)."""
    if provider in (None, "auto"):
        place.file.unlink(missing_ok=True)
        return
    doc = {"provider": provider, "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    files.atomic_write_text(place.file, json.dumps(doc) + "\n")


def settle(place: Place, models: dict[str, Project]) -> tuple[str | None, str | None]:
    """(the saved choice if it is still offered, else the best offered provider it was reset to; a warning
    saying why when it was reset). Nothing saved: (None, None)."""
    if not place.file.is_file():
        return None, None
    saved = read(place)
    from gpux.plan.offer import compute

    offer = compute(models)
    if saved in offer.offer:
        return saved, None
    why = "; ".join(offer.blockers(saved)) if saved else f"{place.file} does not name a provider"
    write(place, offer.best)
    reset = f"reset to {offer.best}" if offer.best else "forgotten: no provider runs every enabled model here"
    return offer.best, f"the provider saved with `gpux use` ({saved or 'unreadable'}) is no longer offered " \
                       f"({why}); {reset}"


def choose(project: Project, provider: str | None, strict: bool = False,
           store_dir: str | Path | None = None, given_by: str = "--provider") -> tuple[Project, Selection, list[str]]:
    """(project with tuned options where the lock applies, its Selection, warnings): the one place a single
    project's provider is chosen; `given_by` says where `provider` came from (see select)."""
    from gpux.plan.lock import apply_lock
    from gpux.plan.select import ENV_PROVIDER, select

    warnings: list[str] = []
    saved = None
    if not provider and not os.environ.get(ENV_PROVIDER):
        saved, why = settle(Place(project.name, project.root, store_dir), {project.name: project})
        warnings += [why] if why else []
    locked = None
    if saved is None:
        project, locked, why = apply_lock(project, provider)
        warnings += [why] if why else []
    return project, select(project, provider, strict, locked, saved, given_by), warnings


__all__ = ["Place", "choose", "read", "settle", "write"]
