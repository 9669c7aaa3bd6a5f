"""`gpux package`: a provider's build context (Dockerfile, project, artifacts, gpux wheel), built by Docker.

`gpux package` builds the provider's artifacts on this machine, writes a build context and builds it on the
engine `DOCKER_HOST` names. The image installs gpux and the provider's runtime with pip, pinned to the
versions the packaged artifacts' cache keys name, then runs `gpux build` once at image build time: a cache
hit when the keys match there, a rebuild inside the image when they cannot. Its entry point is
`gpux run /model`, so `docker run IMAGE --input '{...}' --json` and `docker run IMAGE --benchmark` work;
with `--serve` it is `gpux serve /model` (ports exposed, a readiness healthcheck).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux import report
from gpux.artifacts import store
from gpux.config.load import Project
from gpux.deploy.docker import (
    Progress,
    build_image,
    connect,
    ensure_base_image,
    run_image,
)
from gpux.deploy.image import ImagePlan, choose_provider, image_row, plan_image
from gpux.deploy.wheel import write_wheel
from gpux.errors import UsageError
from gpux.files import make_dir, store_root

WRITTEN = ("Dockerfile", "gpux-ca.crt", "wheels", "model", "store")  # what a context folder holds


# -- the build context -----------------------------------------------------------------------------------------
def project_files(project: Project, io: Any) -> tuple[str, list[tuple[Path, str]]]:
    """(model.source as packaged, [(file here, path under model/)]): the source, its external data and every other
    file gpux.yml names (`config.files`). Files other than the source must lie inside the project folder."""
    from gpux.model.io import source_files

    root, src = project.root.resolve(), project.source
    try:
        source_rel = src.relative_to(root).as_posix()
    except ValueError:
        source_rel = src.name
    out = [(src, source_rel)]
    for f in source_files(project, io)[1:]:
        out.append((f, (Path(source_rel).parent / f.relative_to(src.parent)).as_posix()))
    for entry in project.named_files()[1:]:  # labels, charsets, tokenizers, python steps, samples, calibration data
        found = entry.found(root)
        if found is None and entry.field.module:
            continue  # an installed module, not the project's
        path = (found or entry.candidates(root)[0]).resolve()
        if not path.is_relative_to(root):
            raise UsageError(f"{project.path}: {entry.path} lies outside the project folder; an image cannot hold "
                             "it", hint=f"move it into {root}")
        files = sorted(x for x in path.rglob("*") if x.is_file() and "__pycache__" not in x.parts) \
            if path.is_dir() else [path]
        out += [(x, x.relative_to(root).as_posix()) for x in files]
    return source_rel, list(dict.fromkeys(out))


def packaged_config(project: Project, source_rel: str) -> str:
    """gpux.yml for the image: the file as written, with model.source rewritten only where it moved."""
    import yaml

    if not project.path.is_file():  # a bare .onnx file: gpux.yml is implied
        return yaml.safe_dump({"name": project.name, "model": {"source": source_rel}}, sort_keys=False)
    text = project.path.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    written = str((data.get("model") or {}).get("source", ""))
    if project.resolved is None and (project.root / written).resolve() == (project.root / source_rel).resolve():
        return text
    data["model"]["source"] = source_rel
    if project.resolved is not None:  # a hub id or a checkpoint: the image holds the ONNX file it resolved to
        data["model"].pop("task", None)
        data["model"]["origin"] = project.resolved.origin  # keyed as here: its artifacts are reused
    return yaml.safe_dump(data, sort_keys=False)


def write_context(plan: ImagePlan, project: Project, io: Any, out: Path, link: bool = False) -> Path:
    """Write Dockerfile, model/, store/, wheels/ and the CA bundle into `out` (created or emptied of them)."""
    if out.is_dir() and any(p.name not in WRITTEN for p in out.iterdir()):
        raise UsageError(f"{out} holds files gpux did not write; the whole folder is the image's build context",
                         hint="pass an empty or new folder")
    make_dir(out, hint="pass an empty or new folder")
    for name in WRITTEN:
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    copy = _link_or_copy if link else shutil.copy2
    source_rel, files = project_files(project, io)
    for src, rel in files:
        (out / "model" / rel).parent.mkdir(parents=True, exist_ok=True)
        copy(src, out / "model" / rel)
    (out / "model" / "gpux.yml").write_text(packaged_config(project, source_rel), encoding="utf-8")
    if plan.reuse:
        for art in plan.artifacts:
            shutil.copytree(art, out / "store" / project.name / art.name, copy_function=copy)
    write_wheel(out / "wheels")
    if plan.ca_bundle:
        shutil.copyfile(plan.ca_bundle, out / "gpux-ca.crt")
    (out / "Dockerfile").write_text(plan.dockerfile(), encoding="utf-8")
    return out


def _link_or_copy(src: Any, dst: Any) -> Any:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
    return dst


# -- the command -----------------------------------------------------------------------------------------------
def host_key_parts(project: Project, provider: str | None) -> list[dict[str, Any]]:
    """Key parts of the targets this machine would build for `provider` (versions, device), without building."""
    from gpux.artifacts.plan import keyed_targets
    from gpux.model.io import interface
    from gpux.plan.targets import resolve_shapes

    if provider is None:
        return []
    inputs, _ = interface(project)
    return [s.parts for s in keyed_targets(project, provider, inputs, "", resolve_shapes(project))]


@dataclass(frozen=True, kw_only=True)
class PackageRequest:
    """What `gpux package` was asked for (the click options, by name)."""

    path: str = "."
    provider: str | None = None
    tag: str | None = None
    out_dir: str | None = None
    base_image: str | None = None
    run_args: str | None = None
    ca_bundle: str | None = None
    serve: bool = False
    store: str | None = None
    as_json: bool = False


def package_command(req: PackageRequest) -> int:
    from gpux.artifacts.build import build
    from gpux.config.locate import open_project
    from gpux.model.io import load_checked

    if req.serve and req.run_args is not None:
        raise UsageError("--run runs the image once with `gpux run` arguments; a --serve image keeps serving",
                         hint="start it with the `docker run` line printed after the build")
    project = open_project(req.path)
    for w in project.warnings:
        report.warn(w)
    name = choose_provider(project, req.provider)
    client = None if req.out_dir else connect()  # before building anything: fail fast without an engine
    io = load_checked(project)
    row = image_row(project, name)
    plan = plan_image(project, name, host_key_parts(project, row.host_build), base_image=req.base_image,
                      tag=req.tag, ca_bundle=req.ca_bundle, serve=req.serve)
    if plan.reuse and row.host_build:
        built = build(project, row.host_build, store_dir=req.store, log=report.progress(req.as_json))
        plan.artifacts = [r.artifact.dir for r in built.results]
    for note in plan.notes:
        report.info(f"note: {note}")
    if req.out_dir:
        return _write_only(req, plan, project, io)
    return _build_and_run(req, plan, project, io, client)


def _write_only(req: PackageRequest, plan: ImagePlan, project: Project, io: Any) -> int:
    """--dockerfile-only: the build context in a folder, and the commands that build and run it."""
    doc: dict[str, Any] = plan.to_dict()
    ctx = write_context(plan, project, io, Path(str(req.out_dir)))
    doc["context"] = str(ctx)
    doc["build"] = shlex.join(["docker", "build", "--network", "host", "-t", plan.tag, str(ctx)])
    if req.as_json:
        report.emit_json(doc)
    else:
        print(f"wrote {ctx}/Dockerfile and its build context")
        print(f"build it: {doc['build']}")
        print(f"run it:   {plan.run_line()}")
    return 0


def _build_and_run(req: PackageRequest, plan: ImagePlan, project: Project, io: Any, client: Any) -> int:
    """Build the image on the engine (and run it once with --run)."""
    doc: dict[str, Any] = plan.to_dict()
    ensure_base_image(client, plan.base_image, report.info)
    started = time.perf_counter()
    tmp = store.new_workdir(store_root(project.root, req.store), f"package-{plan.provider}")  # hardlinks
    try:
        ctx = write_context(plan, project, io, tmp / "context", link=True)
        doc["image_id"] = build_image(client, ctx, plan.tag, Progress())
    finally:
        store.discard_tmp(tmp)
    doc["seconds"] = round(time.perf_counter() - started, 2)
    code = 0
    if req.run_args is not None:
        result = run_image(client, plan.tag, shlex.split(req.run_args), plan.row.gpus, plan.row.devices)
        doc["run_result"] = {"args": shlex.split(req.run_args), "exit_code": result.exit_code,
                             "stdout": result.stdout, "stderr": result.stderr}
        code = result.exit_code
    if req.as_json:
        report.emit_json(doc)
        return code
    print(f"built {plan.tag} ({doc['image_id'][:19]}) from {plan.base_image} in {doc['seconds']:.1f}s")
    print(f"run it: {plan.run_line()}")
    if req.run_args is not None:
        sys.stderr.write(doc["run_result"]["stderr"])
        sys.stdout.write(doc["run_result"]["stdout"])
    return code


__all__ = ["PackageRequest", "host_key_parts", "package_command", "write_context"]
