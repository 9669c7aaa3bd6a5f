"""`gpux build`: validate gpux.yml, then build (or reuse) the chosen provider's artifacts, or print the plan."""

from __future__ import annotations

from dataclasses import dataclass

from gpux import report


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """What `gpux build` was asked for (the click options, by name)."""

    path: str = "."
    provider: str | None = None
    strict: bool = False
    force: bool = False
    verify: bool = True
    dry_run: bool = False
    store: str | None = None
    as_json: bool = False
    shapes: dict[str, int] | None = None  # symbolic dim sizes, parsed from --shape


def parse_sizes(shapes: tuple[str, ...]) -> dict[str, int] | None:
    """The --shape values as sizes by dim name; None when there are none (nothing more is imported then)."""
    if not shapes:
        return None
    from gpux.model.inputs import parse_shapes

    return parse_shapes(shapes)


def build_command(req: BuildRequest) -> int:
    """Open the project, select its provider, plan the build, build, report. An unchanged build is replayed from
    its record first, without loading the config models (a workspace never is; each of its models is built)."""
    from gpux.artifacts import unchanged

    request = {"provider": req.provider, "strict": req.strict, "verify": req.verify, "store": req.store,
               "shapes": req.shapes}
    if not req.force and not req.dry_run:
        replayed = unchanged.replay(req.path, request)
        if replayed is not None:
            report.emit_json(replayed) if req.as_json else report.render_build(replayed)
            return 0
    from gpux.artifacts.build import execute
    from gpux.artifacts.plan import plan_selected, reads
    from gpux.config.locate import remember
    from gpux.model.io import check_model
    from gpux.plan.choice import Place, keep
    from gpux.plan.select import select
    from gpux.workspace.project import open_models

    ms = open_models(req.path, req.store)
    if ms.workspace is not None:
        from gpux.workspace.commands import build_workspace

        return build_workspace(ms, req.provider, req.store, req.as_json, force=req.force, verify=req.verify,
                               strict=req.strict, shapes=req.shapes, dry_run=req.dry_run)
    project = ms.project
    for w in project.warnings:
        report.warn(w)
    checked = check_model(project, req.store)
    selection = select(project, req.provider, req.strict, store_dir=req.store)
    project = selection.project or project  # the tune lock's options applied
    project.warnings.extend(selection.warnings)
    if not req.dry_run:
        keep(selection.reset)  # a build settles the choice: a saved one no longer offered is reset on disk
    # what the build reads, taken before anything is hashed: a file changed meanwhile is not replayed later
    taken = None if req.dry_run else unchanged.before(reads(project, checked), project.path)
    plan = plan_selected(project, selection, dry_run=req.dry_run, store_dir=req.store, shapes=req.shapes,
                         checked=checked)
    if req.dry_run:
        doc = {**plan.to_dict(), "selection": selection.to_dict(),
               "available": selection.available(plan.provider).to_dict()}
        report.emit_json(doc) if req.as_json else report.render_plan(doc)
        return 0
    assert taken is not None
    result = execute(plan, force=req.force, verify=req.verify, log=report.progress(req.as_json), strict=req.strict)
    remember(project)
    doc = {**result.to_dict(), "requested": selection.to_dict(), "cannot_run": plan.cannot_run,
           "attempts": plan.attempts, "warnings": project.warnings}
    doc["warnings"] = report.build_warnings(doc)  # the fallback included: --json says what the text says
    outputs = [r.artifact.dir / rel for r in result.results for rel in [*r.artifact.manifest["files"], "manifest.json"]]
    # the folders a later `gpux use` (use.json) or `gpux tune` (gpux.lock.json) writes into: a new choice is a new build
    outputs += [Place(project.name, project.root, req.store).file.parent, project.root]
    unchanged.record(project, request, doc, taken, outputs)
    report.emit_json(doc) if req.as_json else report.render_build(doc)
    return 0


__all__ = ["BuildRequest", "build_command", "parse_sizes"]
