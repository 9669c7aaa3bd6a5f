"""`gpux build`: validate gpux.yml, then build (or reuse) the chosen provider's artifacts, or print the plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux import report
from gpux.errors import ProviderUnavailable
from gpux.files import digest_files


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
    """An unchanged build is replayed without loading the config models (a workspace never is); else the target
    is opened once (`open_models`: a workspace, or one project) and everything below is handed the project."""
    from gpux.artifacts import unchanged

    request = {"provider": req.provider, "strict": req.strict, "verify": req.verify, "store": req.store,
               "shapes": req.shapes}
    if not req.force and not req.dry_run:
        replayed = unchanged.replay(req.path, request)
        if replayed is not None:
            report.emit_json(replayed) if req.as_json else report.render_build(replayed)
            return 0
    from gpux.artifacts.build import build
    from gpux.config.locate import remember
    from gpux.model.io import load_checked
    from gpux.plan.choice import Place, keep
    from gpux.plan.select import select
    from gpux.workspace.project import open_models

    ms = open_models(req.path, req.store)
    if ms.workspace is not None:
        from gpux.workspace.commands import build_workspace

        return build_workspace(ms, req.provider, req.store, req.as_json)
    project = ms.project
    for w in project.warnings:
        report.warn(w)
    io = load_checked(project, req.store)
    selection = select(project, req.provider, req.strict, store_dir=req.store)
    project = selection.project or project  # the tune lock's options applied
    project.warnings.extend(selection.warnings)
    if req.dry_run:
        show_plan(project, io, selection, req)
        return 0
    keep(selection.reset)  # a build settles the choice: a saved one no longer offered is reset on disk
    log = report.progress(req.as_json)
    name, cannot_run, attempts = choose_builder(project, selection)
    before, config_sha = unchanged.snapshot(watched_inputs(project, io)), unchanged.config_digest(project.path)
    result = build(project, name, force=req.force, verify=req.verify, store_dir=req.store, log=log,
                   shapes=req.shapes, strict=req.strict)
    remember(project)
    doc = {**result.to_dict(), "requested": selection.to_dict(),
           "cannot_run": None if cannot_run is None else cannot_run.reason,
           "attempts": [a.to_dict() for a in attempts], "warnings": project.warnings}
    doc["warnings"] = report.build_warnings(doc)  # the fallback included: --json says what the text says
    outputs = [r.artifact.dir / rel for r in result.results for rel in [*r.artifact.manifest["files"], "manifest.json"]]
    # the folders a later `gpux use` (use.json) or `gpux tune` (gpux.lock.json) writes into: a new choice is a new build
    outputs += [Place(project.name, project.root, req.store).file.parent, project.root]
    unchanged.record(project, request, doc, before, config_sha, outputs)
    report.emit_json(doc) if req.as_json else report.render_build(doc)
    return 0


def choose_builder(project: Any, selection: Any) -> tuple[str, Any, list[Any]]:
    """What the selection runs on, why it cannot run (when an explicitly asked provider builds without its
    device), and the providers passed over."""
    from gpux.artifacts.build import needs_device
    from gpux.run.fallback import Attempt

    asked = selection.source != "auto"
    first = selection.skipped[0] if selection.skipped else None
    if first is not None and asked and first.status == "no device" and not needs_device(project, first.provider):
        return first.provider, first, []  # artifacts that need no device to build (e.g. Core ML packages) are made
    if first is not None and selection.strict and asked:
        raise ProviderUnavailable(f"{first.provider} unavailable: {first.reason} — fallback is off", hint=first.fix)
    attempts = [Attempt(a.provider, "probe", False, a.reason, a.fix) for a in selection.skipped]
    if selection.runs_on is None:
        raise ProviderUnavailable("no provider can build here: " + "; ".join(a.line() for a in attempts))
    return selection.runs_on, None, attempts


def show_plan(project: Any, io: Any, selection: Any, req: BuildRequest) -> None:
    """`--dry-run`: the targets the first provider of the chain would build, their options and cache keys."""
    from gpux.artifacts.build import keyed_targets
    from gpux.model.io import check_model, source_files

    inputs = check_model(project, req.store).inputs
    digest = digest_files(source_files(project, io), project.root)
    first = selection.chain[0]
    keyed = keyed_targets(project, first, inputs, digest, req.shapes)
    doc: dict[str, Any] = {"name": project.name, "selection": selection.to_dict(), "provider": first,
                           "available": selection.available(first).to_dict(),
                           "targets": [{**t.to_dict(), "key": key, "key_parts": parts} for t, parts, key in keyed]}
    if req.as_json:
        report.emit_json(doc)
        return
    avail = doc["available"]
    print(f"plan for {project.name} on {first} ({avail['status']}: {avail['reason']})")
    print(f"  source {project.source}")
    for t, _, _ in keyed:
        opts = ", ".join(f"{k}={v}" for k, v in t.options.items() if v not in (None, {}, []))
        print(f"  → {t.id} [{t.step}, {t.precision}] from {t.consumes}: {opts}")


def watched_inputs(project: Any, io: Any) -> list[Path]:
    """Every file and folder a build reads: config, model (+ external data), labels, samples, calibration
    data (folders too: adding a file changes them)."""
    from gpux.model.io import source_files

    cfg = project.config
    named = [spec.labels for spec in {**(cfg.inputs or {}), **(cfg.outputs or {})}.values()
             if isinstance(spec.labels, str)]
    named += [cfg.verify.data] + [getattr(b, "calibration", None) for b in
                                  (getattr(cfg.providers, n) for n in type(cfg.providers).model_fields)]
    out = [project.path, *source_files(project, io)]
    for rel in filter(None, named):
        p = project.root / rel
        out += [p, *sorted(p.rglob("*"))] if p.is_dir() else [p]
    return out


__all__ = ["BuildRequest", "build_command", "parse_sizes", "watched_inputs"]
