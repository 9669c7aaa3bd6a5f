"""The provider `gpux use` saved for a project (or workspace) on this machine: where it lives in the artifact
store, reading and writing it. Whether it still holds is part of the selection (plan.select); `keep` saves the
reset a selection found, for the commands that persist it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from gpux import files
from gpux.providers import registry

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


Reset = tuple[Place, str | None]  # where a saved choice no longer offered lives, and what replaces it (None: forget)


def keep(reset: Reset | None) -> None:
    """Save what replaces a saved choice that is no longer offered (a selection's `reset`); nothing otherwise.
    Only the commands that persist the choice call it (`gpux build`): selecting itself never writes."""
    if reset is not None:
        write(*reset)


__all__ = ["Place", "Reset", "keep", "read", "write"]
