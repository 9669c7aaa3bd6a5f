"""Several gpux.yml projects run as one: a workspace file, the providers they all offer, one saved choice,
and pipelines that wire one model's outputs into the next one's inputs."""

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
