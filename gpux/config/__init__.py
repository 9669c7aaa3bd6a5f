"""gpux.yml and gpux.workspace.yml: parse (YAML with marks) → migrate (earlier format) → validate → a Project.

This package's own namespace stays light (no pydantic): it only says which file is a workspace file."""

from __future__ import annotations

from pathlib import Path

WORKSPACE_NAME = "gpux.workspace.yml"


def find(target: str) -> Path | None:
    """The workspace file `target` means (the file, or a folder holding one), else None."""
    p = Path(target or ".")
    if p.is_file() and p.name.endswith(".workspace.yml"):
        return p
    if p.is_dir() and (p / WORKSPACE_NAME).is_file() and not (p / "gpux.yml").is_file():
        return p / WORKSPACE_NAME
    return None
