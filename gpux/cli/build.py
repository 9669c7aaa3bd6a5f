"""`gpux build`: validate gpux.yml, then build (or reuse) the chosen provider's artifacts, or print the plan."""

from __future__ import annotations

from gpux import report
from gpux.artifacts.project import BuildRequest


def parse_sizes(shapes: tuple[str, ...]) -> dict[str, int] | None:
    """The --shape values as sizes by dim name; None when there are none (nothing more is imported then)."""
    if not shapes:
        return None
    from gpux.model.inputs import parse_shapes

    return parse_shapes(shapes)


def build_command(req: BuildRequest) -> int:
    """The build (`workspace.targets.build_target`), then its report, in one place."""
    from gpux.workspace.targets import build_target

    doc, show = build_target(req)
    report.emit_json(doc) if req.as_json else show()
    return 0


__all__ = ["BuildRequest", "build_command", "parse_sizes"]
