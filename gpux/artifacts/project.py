"""`gpux build` on one project: what it was asked for (`BuildRequest`), its build on down the selection's order,
recorded for an unchanged build to be answered from."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gpux import report
from gpux.documents import AttemptDoc, BuildDoc, PlanDoc
from gpux.errors import BuildFailed, GpuxError

if TYPE_CHECKING:
    from gpux.artifacts.build import BuildResult
    from gpux.artifacts.plan import BuildPlan, Walk
    from gpux.artifacts.unchanged import Asked
    from gpux.config.load import Project
    from gpux.model.io import Checked
    from gpux.plan.select import Selection


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


def build_project(project: Project, req: BuildRequest, request: Asked) -> tuple[object, Callable[[], None]]:
    """One project's full build (or plan, for --dry-run): its model checked, its provider selected, planned, built on
    down the selection's order and recorded; its report document (what --json prints) and what shows it as text."""
    from gpux.artifacts import unchanged
    from gpux.artifacts.plan import Walk, plan_selected
    from gpux.config.locate import remember
    from gpux.model.io import check_model
    from gpux.plan.choice import Place, keep
    from gpux.plan.select import select
    from gpux.plan.targets import refuse_unknown_dims

    checked = check_model(project, req.store)
    for w in [*project.warnings, *map(str, checked.notes)]:
        report.warn(w)
    selection = select(project, req.provider, req.strict, store_dir=req.store)
    project = selection.project or project  # the tune lock's options applied
    refuse_unknown_dims(req.shapes, {project.name: checked.inputs})  # before anything is planned
    warnings = [*project.warnings, *map(str, checked.notes), *selection.warnings]
    walk = Walk(store_dir=req.store, shapes=req.shapes, dry_run=req.dry_run, retry=req.force)
    if req.dry_run:
        plan = plan_selected(project, selection, walk, checked=checked)
        planned: PlanDoc = {**plan.to_dict(), "selection": selection.to_dict(),
                            "available": selection.available(plan.provider).to_dict()}
        return planned, functools.partial(report.render_plan, planned)
    keep(selection.reset)  # a build settles the choice: a saved one no longer offered is reset on disk
    plan, result = build_down(project, selection, checked, walk, req)
    remember(project)
    doc: BuildDoc = {**result.to_dict(), "requested": selection.to_dict(), "cannot_run": plan.cannot_run,
                     "attempts": plan.attempts, "warnings": [*warnings, *result.instead]}
    doc["warnings"] = report.build_warnings(doc)  # the fallback included: --json says what the text says
    outputs = [r.artifact.dir / rel for r in result.results for rel in [*r.artifact.manifest["files"], "manifest.json"]]
    # the folders a later `gpux use` (use.json) or `gpux tune` (gpux.lock.json) writes into: a new choice is a new build
    outputs += [Place(project.name, project.root, req.store).file.parent, project.root]
    assert plan.taken is not None
    unchanged.record(project, request, doc, plan.taken, outputs)
    return doc, functools.partial(report.render_build, doc)



def build_down(project: Project, selection: Selection, checked: Checked, walk: Walk,
               req: BuildRequest) -> tuple[BuildPlan, BuildResult]:
    """Build on the selection's first provider that builds this model, going on down its order as `run` does: a
    provider whose build fails on the model (its conversion, compile, operators its runtime cannot take: remembered
    by the store, so the next build passes it over at once) is passed over, unless fallback is off (then its own
    error stops the build). What the build reads is taken into the first plan, before anything is hashed."""
    from gpux.artifacts.build import execute
    from gpux.artifacts.plan import failed_attempt, falls_back, plan_selected

    failed: dict[str, AttemptDoc] = {}
    last: BuildFailed | None = None
    taken = None
    while True:
        try:
            plan = plan_selected(project, selection, replace(walk, failed=dict(failed)), checked=checked,
                                 taken=taken is None)
        except GpuxError as exc:  # nothing left to build on: the failures passed over are its cause
            if last is not None:
                raise exc from last
            raise
        taken = taken or plan.taken
        plan = replace(plan, taken=taken)
        try:
            return plan, execute(plan, force=req.force, verify=req.verify, log=report.progress(req.as_json),
                                 strict=req.strict)
        except BuildFailed as exc:
            if selection.strict or not falls_back(exc):
                raise
            failed[plan.provider], last = failed_attempt(plan.provider, exc), exc


__all__ = ["BuildRequest", "build_down", "build_project"]
