"""`gpux export triton` over projects and workspaces: a workspace's enabled models exported on its one provider,
and its pipeline as a Triton ensemble (`platform: ensemble`) wiring the same tensors by the same names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpux.deploy.triton import Exported, check, export, tensor_entries, write_model
from gpux.errors import UsageError
from gpux.workspace.project import Models, shared_choice


def export_workspace(ms: Models, provider: str | None, repo: Path, version: int = 1, store_dir: str | None = None,
                     log: Any = None) -> list[Exported]:
    """Every enabled model, then the ensemble of the pipeline (if the workspace has one)."""
    choice = shared_choice(ms, provider)
    done = [export(p, choice.provider, repo, version, store_dir, log) for p in ms.models.values()]
    if ms.workspace is not None and ms.workspace.config.pipeline:
        done.append(write_ensemble(ms, done, repo, version))
    return done


def write_ensemble(ms: Models, members: list[Exported], repo: Path, version: int) -> Exported:
    """config.pbtxt of the ensemble and its (empty) version folder; checked with Triton's rules."""
    from gpux.model.io import interface
    from gpux.workspace.pipeline import wire

    io = {n: interface(p) for n, p in ms.models.items()}
    plan = wire(ms, io)
    batches = {int(e.config.get("max_batch_size") or 0) for e in members}
    batch = 0 if 0 in batches else min(batches)  # an ensemble batches no more than each of its models
    steps = []
    for model, wiring in plan.steps:
        used = {src.split(".", 1)[1] for _, w in plan.steps for src in w.values() if src.startswith(f"{model}.")}
        used |= {k.split(".", 1)[1] for k in plan.outputs if k.startswith(f"{model}.")}
        steps.append({"model_name": ms.models[model].name, "model_version": -1, "input_map": wiring,
                      "output_map": {o: f"{model}.{o}" for o in io[model][1] if o in used}})
    name = ms.place.name
    if name in {e.name for e in members}:
        raise UsageError(f"workspace {name!r} has the name of one of its models; Triton needs one folder each",
                         hint="rename the workspace (name: in gpux.workspace.yml)")
    cfg = {"name": name, "platform": "ensemble", "max_batch_size": batch,
           "input": tensor_entries(plan.inputs, batch > 0), "output": tensor_entries(plan.outputs, batch > 0),
           "ensemble_scheduling": {"step": steps}}
    folder = write_model(repo, cfg, version, [])
    problems = check(cfg, folder)
    if problems:
        raise UsageError(f"{folder}: " + "; ".join(problems))
    return Exported(name=name, provider=members[0].provider, folder=folder, version=version, files=[], config=cfg)


def triton_command(targets: list[str], repo: str, provider: str | None, version: int, store: str | None,
                   as_json: bool) -> int:
    """Export each target (a project on its chosen provider, or a workspace) into one repository."""
    from gpux import report
    from gpux.deploy.image import choose_provider
    from gpux.workspace.project import open_models

    done, log = [], report.progress(as_json)
    for target in targets:
        ms = open_models(target, store)
        if ms.workspace is not None:
            done += export_workspace(ms, provider, Path(repo), version, store, log)
            continue
        project = ms.project
        done.append(export(project, choose_provider(project, provider), Path(repo), version, store, log))
    if as_json:
        report.emit_json({"repository": repo, "models": [e.to_dict() for e in done]})
        return 0
    for e in (e for e in done if e.not_carried):
        report.warn(f"{e.name}: the Triton model takes and gives tensors; {', '.join(e.not_carried)} declared in "
                    "gpux.yml are not carried into the repository: clients must pre- and post-process themselves, "
                    "or serve it with `gpux serve`, which runs them (docs/deploy.md)")
    for e in done:
        print(f"{e.name}: {e.provider} → {e.folder}/{e.version}/{', '.join(e.files)} + config.pbtxt")
    return 0


__all__ = ["export_workspace", "triton_command", "write_ensemble"]
