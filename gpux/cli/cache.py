"""`gpux cache`: list, re-hash and prune the artifact store, and which artifact folders are current."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from gpux import report
from gpux.errors import ExitCode
from gpux.files import store_root
from gpux.report import tables


class StoredArtifact(TypedDict):
    """One artifact as `gpux cache ls/verify/prune` lists it: where, how large, whether it checks out."""

    id: str
    path: str
    size: int
    ok: bool
    problem: str | None
    built_at: str | None


def current_folders(project: Any, root: Path) -> set[str]:
    """Artifact folder names the current config, model and environment would build, for every provider: the keys
    `gpux build` plans (artifacts.plan.plan_build)."""
    from gpux.artifacts.plan import plan_build
    from gpux.model.io import check_model
    from gpux.providers import registry

    checked = check_model(project, root)
    return {s.folder for p in registry() for s in plan_build(project, p, store_dir=root, checked=checked).steps}


def cache_command(action: str, path: str, store_dir: str | None, as_json: bool) -> int:
    from gpux.artifacts import store
    from gpux.config.locate import open_project

    project = open_project(path)
    root = store_root(project.root, store_dir)
    arts = store.artifacts(root, project.name)
    current = current_folders(project, root) if action == "prune" else set()
    rows: list[StoredArtifact] = []
    removed: list[str] = []
    code = 0
    for a in arts:
        problem = store.check(a, full=action == "verify")
        rows.append({"id": a.id, "path": str(a.dir), "size": a.size(), "ok": problem is None,
                     "problem": problem, "built_at": a.manifest.get("built_at")})
        if problem and action == "verify":
            code = int(ExitCode.FAILED)
        superseded = action == "prune" and a.dir.name not in current
        if action == "prune-all" or (action == "prune" and problem) or superseded:
            store.discard(a.dir)
            removed.append(str(a.dir))
    if action.startswith("prune"):
        removed += prune_leftovers(root, project.name, everything=action == "prune-all")
    if as_json:
        report.emit_json({"store": str(root), "artifacts": rows, "removed": removed})
        return code
    for r in rows:
        state = "ok" if r["ok"] else f"DAMAGED: {r['problem']}"
        print(f"{r['id']:<28} {tables.format_size(r['size']):>9}  {state}  {r['path']}")
    for gone in removed:
        print(f"removed {gone}")
    if not rows:
        print(f"no artifacts in {root}")
    return code


def prune_leftovers(root: Path, name: str, *, everything: bool) -> list[str]:
    """Remove half-built work folders and the project's folders that hold no artifact; the paths removed."""
    from gpux.artifacts import store

    removed = []
    for p in store.stale_workdirs(root):
        store.discard_tmp(p)
        removed.append(str(p))
    for folder in (root / name).glob("*") if (root / name).is_dir() else []:
        keep = folder.name == "cache" and not everything  # runtime caches: rebuildable, kept
        keep = keep or folder.name == ".in-use"  # live holders' locks (gpux/run/inuse.py)
        if folder.is_dir() and not keep and store.read_manifest(folder) is None:
            store.discard(folder)
            removed.append(str(folder))
    return removed


__all__ = ["cache_command", "current_folders"]
