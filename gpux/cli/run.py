"""`gpux run`: one inference on given inputs, or `--benchmark`; a workspace runs its pipeline."""

from __future__ import annotations

from gpux.run.command import RunRequest


def run_command(req: RunRequest) -> int:
    """The run (`workspace.targets.run_target`): it renders as it goes (answers print as they come)."""
    from gpux.workspace.targets import run_target

    return run_target(req)


__all__ = ["RunRequest", "run_command"]
