"""gpux.yml and gpux.workspace.yml: parse (YAML with marks) → migrate (earlier format) → validate → a Project.

This package's own namespace stays light (no pydantic): it only names the config files and finds a workspace."""

from __future__ import annotations

from pathlib import Path

CONFIG_NAMES = ("gpux.yml", "gpux.yaml")
WORKSPACE_NAME = "gpux.workspace.yml"


def find_workspace(target: str) -> Path | None:
    """The workspace file `target` means (the file, or a folder holding one), else None."""
    p = Path(target or ".")
    if p.is_file() and p.name.endswith(".workspace.yml"):
        return p
    if p.is_dir() and (p / WORKSPACE_NAME).is_file() and not any((p / n).is_file() for n in CONFIG_NAMES):
        return p / WORKSPACE_NAME
    return None
