"""`gpux inspect`: a model's I/O, the providers on this machine, the choice among them and the built artifacts."""

from __future__ import annotations

from typing import Any

from gpux import report
from gpux.documents import ArtifactRow
from gpux.files import store_root
from gpux.report import tables


def inspect_command(target: str, store_dir: str | None, as_json: bool) -> int:
    from gpux.files import reading_only
    from gpux.workspace.commands import inspect_workspace
    from gpux.workspace.project import open_models

    with reading_only():  # inspect writes nothing: not the saved choice, not even a memo of hashes
        ms = open_models(target, store_dir)
        if ms.workspace is not None:
            return inspect_workspace(ms, store_dir, as_json)
        doc, warnings = describe(ms.project, store_dir)
    if as_json:
        report.emit_json(doc)
        return 0
    render(doc, warnings)
    return 0


def describe(project: Any, store_dir: str | None) -> tuple[dict[str, Any], list[str]]:
    """The inspect document, and its warnings (the text report ends with them): this installation, the
    choice (a reset `gpux use`, a lock measured elsewhere) and the providers asked for that a run would skip."""
    from gpux.config import CONFIG_NAMES
    from gpux.model.io import check_model, source_files
    from gpux.plan.lock import LOCK_NAME, read_lock
    from gpux.plan.select import select
    from gpux.providers import ort_conflict_warning, probe_for, registry, runtime_of
    from gpux.runtimes import opening

    checked = check_model(project, store_dir)
    io, inputs, outputs = checked.io, checked.inputs, checked.outputs
    avail = [{**probe_for(project, p).to_dict(), "runtime": runtime_of(project, p)} for p in registry()]
    selection = select(project, None, False, store_dir=store_dir)  # reads only: inspect writes nothing
    project = selection.project or project
    locked = selection.chain[0] if selection.source == LOCK_NAME else None
    tuned = read_lock(project)[0] if locked else None
    chosen, passed = what_builds(project, selection, checked, store_dir)
    arts = artifact_rows(project, store_dir, set(tuned.artifacts) if tuned else set())
    size = sum(f.stat().st_size for f in source_files(project, io))
    warnings = [w for w in [ort_conflict_warning()] if w] + [*selection.warnings, *would_skip(selection, passed)]
    bare = project.path.name not in CONFIG_NAMES  # a plain model file: no gpux.yml exists
    doc = {"name": project.name, "version": project.config.version, "config": None if bare else str(project.path),
           "source": str(project.source), "size": size, "opset": io.opset, "ir_version": io.ir_version,
           "producer": io.producer, "inputs": [t.to_dict() for t in inputs.values()],
           "outputs": [t.to_dict() for t in outputs.values()], "selection": selection.to_dict(),
           "would_run_on": chosen, "passed_over": passed, "opens_with": opening(project, chosen) if chosen else None,
           "providers": avail, "artifacts": arts,
           "warnings": warnings,
           "lock": {"provider": locked, "options": getattr(project.config.providers, locked).model_dump(mode="json"),
                    "figures": tuned.figures if tuned else None, "partial": tuned.partial or None if tuned else None,
                    "default": tuned.default if tuned else False} if locked else None, **offer_of(project, store_dir)}
    return doc, warnings


def what_builds(project: Any, selection: Any, checked: Any, store_dir: str | None) -> tuple[str | None, list[Any]]:
    """(the provider a build and a run use here, None: none; the providers passed over before it, as attempts): the
    walk `gpux build` takes (artifacts.plan.choose), from the same record: a provider whose build the store remembers
    failing on this model is passed over as a build passes it over."""
    from gpux.artifacts.plan import Walk, choose

    choice = choose(project, selection, checked, Walk(store_dir=store_dir))
    return (choice.plan.provider if choice.plan is not None else None), choice.attempts


def would_skip(selection: Any, passed: list[Any]) -> list[str]:
    """The providers a run would pass over that are worth a warning, each as the `skipped PROVIDER (stage): reason →
    fix` line `gpux run` warns with: those asked for (not auto) absent here, and any whose build fails on the
    model."""
    return report.fallback_warnings(passed, selection.source)


def artifact_rows(project: Any, store_dir: str | None, tuned: set[str] | None = None) -> list[ArtifactRow]:
    """One row per artifact built for the project: current (what a run would use), tuned (a candidate the lock
    measured and did not choose), stale (another config, model or environment) or damaged."""
    from gpux.artifacts import store
    from gpux.cli.cache import current_folders

    root = store_root(project.root, store_dir)
    current = current_folders(project, root)
    arts: list[ArtifactRow] = []
    for a in store.artifacts(root, project.name):
        problem = store.check(a, full=False)
        state = "damaged" if problem else "current" if a.dir.name in current else \
            "tuned" if a.dir.name in (tuned or ()) else "stale"
        arts.append({"id": a.id, "state": state, "problem": problem, "size": a.size(), "path": str(a.main),
                     "built_at": a.manifest.get("built_at"), "verification": a.manifest.get("verification"),
                     "versions": a.manifest["key_parts"].get("versions"),
                     "device": a.manifest["key_parts"].get("device"), "info": a.manifest.get("info")})
    return arts


def render(doc: dict[str, Any], warnings: list[str]) -> None:
    """The inspect document as text on stdout, then the installation's warnings on stderr."""
    from gpux.model.io import shape_text

    print(f"{doc['name']} {doc['version']}  ({doc['config'] or 'no gpux.yml: defaults'})")
    fmt = f"opset {doc['opset']}  ir {doc['ir_version']}" if doc["opset"] else f"format {doc['producer']}"
    print(f"model: {doc['source']}  {tables.format_size(doc['size'])}  {fmt}")
    for kind in ("inputs", "outputs"):
        print(f"{kind}:")
        for t in doc[kind]:
            dims = t["shape"]
            shape = "?" if dims is None else shape_text(dims)
            print(f"  {t['name']}: {t['dtype']} {shape}")
    if doc["lock"]:
        vs = (doc["lock"].get("figures") or {}).get("vs_plain_ort")
        told = f" ({vs['speedup']:.2f}× plain ONNX Runtime, {vs['low']:.2f}–{vs['high']:.2f} per round)" if vs else ""
        partial = f"; from a partial search: {doc['lock']['partial']}" if doc["lock"].get("partial") else ""
        default = " (the untuned default: nothing measured beat it)" if doc["lock"].get("default") else ""
        print(f"tuned: {doc['lock']['provider']}{default} locked in gpux.lock.json for this machine{told}{partial}")
    print(f"offer: {', '.join(doc['offer']) or 'none'}; saved with `gpux use`: {doc['saved'] or 'nothing'}")
    chosen = doc["would_run_on"]
    print(f"\nproviders (order {', '.join(doc['selection']['chain'])}; would run on {chosen or 'none'}):")
    print(tables.providers_table(doc["providers"]))
    if doc.get("opens_with"):
        print(f"{chosen} opens its artifact with: {report.settings_text(doc['opens_with'])}")
    print("\nartifacts:")
    print(report.artifacts_table(doc["artifacts"]) if doc["artifacts"] else "  none built yet: run `gpux build`")
    for w in warnings:
        report.warn(w)


def offer_of(project: Any, store_dir: str | None) -> dict[str, Any]:
    """The providers this model can run here (declared, reachable, available) and its saved choice."""
    from gpux.plan.choice import Place, read
    from gpux.plan.offer import compute

    return {"offer": list(compute({project.name: project}).offer),
            "saved": read(Place(project.name, project.root, store_dir))}


__all__ = ["inspect_command", "offer_of"]
