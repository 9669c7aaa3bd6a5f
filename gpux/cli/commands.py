"""The work behind each CLI command, returning exit codes; the click layer only parses options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpux import report
from gpux.errors import ExitCode, ProviderUnavailable
from gpux.files import digest_files, store_root


def _log(as_json: bool) -> Any:
    return report.progress(as_json)


def build_command(path: str, provider: str | None, strict: bool, force: bool, verify: bool, dry_run: bool,
                  store_dir: str | None, as_json: bool, shapes: dict[str, int] | None = None) -> int:
    from gpux.artifacts import replay as noop
    from gpux.config import find

    if find(path):  # checked without importing the config models: a no-op build must stay light
        from gpux.multi.commands import build_workspace, workspace_of

        ws = workspace_of(path, store_dir)
        assert ws is not None
        return build_workspace(ws, provider, store_dir, as_json)
    request = {"provider": provider, "strict": strict, "verify": verify, "store": store_dir, "shapes": shapes}
    if not force and not dry_run:
        replayed = noop.replay(path, request)
        if replayed is not None:
            report.emit_json(replayed) if as_json else report.render_build(replayed)
            return 0
    from gpux.artifacts.build import build, keyed_targets, needs_device
    from gpux.config.locate import open_project, remember
    from gpux.model.io import effective_io, load_checked, source_files
    from gpux.providers import probe_for
    from gpux.run.session import Attempt

    project = open_project(path)
    for w in project.warnings:
        report.warn(w)
    io = load_checked(project, store_dir)
    from gpux.plan.choice import choose

    project, selection, why = choose(project, provider, strict, store_dir)
    project.warnings.extend(why)
    if dry_run:

        inputs, _ = effective_io(project, io)
        digest = digest_files(source_files(project, io), project.root)
        first = selection.chain[0]
        keyed = keyed_targets(project, first, inputs, digest, shapes)
        plan_targets = [t for t, _, _ in keyed]
        doc: dict[str, Any] = {"name": project.name, "selection": selection.to_dict(), "provider": first,
               "available": probe_for(project, first).to_dict(),
               "targets": [{**t.to_dict(), "key": key, "key_parts": parts} for t, parts, key in keyed]}
        if as_json:
            report.emit_json(doc)
        else:
            avail = doc["available"]
            print(f"plan for {project.name} on {first} ({avail['status']}: {avail['reason']})")
            print(f"  source {project.source}")
            for t in plan_targets:
                opts = ", ".join(f"{k}={v}" for k, v in t.options.items() if v not in (None, {}, []))
                print(f"  → {t.id} [{t.step}, {t.precision}] from {t.consumes}: {opts}")
        return 0
    attempts: list[Attempt] = []
    log = _log(as_json)
    cannot_run = None
    for i, name in enumerate(selection.chain):
        avail = probe_for(project, name)
        if avail.ok:
            break
        if i == 0 and selection.source != "auto" and avail.status == "no device" and \
                not needs_device(project, name):
            cannot_run = avail  # artifacts that need no device to build (e.g. Core ML packages) are made anyway
            break
        attempts.append(Attempt(name, "probe", False, avail.reason, avail.fix))
        if selection.strict and selection.source != "auto":
            raise ProviderUnavailable(f"{name} unavailable: {avail.reason} — fallback is off", hint=avail.fix)
    else:
        raise ProviderUnavailable("no provider can build here: " + "; ".join(a.line() for a in attempts))
    before, config_sha = noop.snapshot(watched_inputs(project, io)), noop.config_digest(project.path)
    result = build(project, name, force=force, verify=verify, store_dir=store_dir, log=log, io=io, shapes=shapes,
                   strict=strict)
    remember(project)
    doc = {**result.to_dict(), "requested": selection.to_dict(),
           "cannot_run": None if cannot_run is None else cannot_run.reason,
           "attempts": [a.to_dict() for a in attempts], "warnings": project.warnings}
    outputs = [r.artifact.dir / rel for r in result.results for rel in [*r.artifact.manifest["files"], "manifest.json"]]
    noop.record(project, request, doc, before, config_sha, outputs)
    if as_json:
        report.emit_json(doc)
    else:
        report.render_build(doc)
    return 0


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


def run_command(target: str, *, input_json: str | None, input_file: str | None, output: str | None,
                provider: str | None, strict: bool, store: str | None, as_json: bool, benchmark: bool,
                placement: bool = False, **bench: Any) -> int:
    from gpux.config.locate import open_project
    from gpux.multi.commands import run_workspace, workspace_of
    from gpux.run.inuse import holding

    ws = workspace_of(target, store)
    if ws is not None:
        return run_workspace(ws, dict(input_json=input_json, input_file=input_file, output=output, provider=provider,
                                      store=store, as_json=as_json, benchmark=benchmark, placement=placement,
                                      strict=strict, **bench))
    project = open_project(target)
    if benchmark:
        from gpux.bench.command import benchmark_command

        with holding(project.name, project.root, store, "gpux run --benchmark"):
            return benchmark_command(target, provider=provider, strict=strict, store=store, as_json=as_json,
                                     input_file=input_file, **bench)
    return _run_once(project, input_json=input_json, input_file=input_file, output=output, provider=provider,
                     strict=strict, store=store, as_json=as_json, placement=placement)


def _run_once(project: Any, *, input_json: str | None, input_file: str | None, output: str | None,
              provider: str | None, strict: bool, store: str | None, as_json: bool, placement: bool) -> int:
    from gpux.errors import InputError
    from gpux.model.inputs import load_file, parse_json
    from gpux.model.io import effective_io, load_checked
    from gpux.run.session import load

    if input_json is None and input_file is None:
        raise InputError("no inputs given", hint="pass --input '{\"name\": [...]}' or --file inputs.npz "
                         "(or --benchmark for seeded random inputs)")
    if input_json is not None and input_file is not None:
        raise InputError("--input and --file both given; pass one")
    if output and not output.endswith(".npz"):
        raise InputError(f"--output {output}: outputs are written as .npz; name the file *.npz")
    inputs, _ = effective_io(project, load_checked(project, store))
    # inputs are read and checked before anything is built or loaded
    feeds = parse_json(input_json, inputs) if input_json is not None else load_file(input_file or "", inputs)
    from gpux.run.inuse import holding

    with holding(project.name, project.root, store, "gpux run"), \
            load(project, provider, strict=strict, store_dir=store, log=_log(as_json), placement=placement,
                 samples=[feeds]) as session:
        values = session.run_feeds(feeds)
        outputs = dict(zip(session.output_names, values, strict=True))
        info = session.report()
        if output:
            import numpy as np

            try:
                np.savez(output, **outputs)
            except OSError as exc:
                raise InputError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
        doc = report.output_doc(session.project, outputs, written=output if as_json else None)
        if as_json:
            report.emit_json({"name": session.project.name, **info, "outputs": doc})
            return 0
        for w in session.warnings:
            report.warn(w)
        for line in report.provider_lines(info):
            (report.warn if line.startswith("skipped ") else report.info)(line)
        print(report.format_outputs(doc))
        if output:
            report.info(f"wrote {output}")
    return 0


def inspect_command(target: str, store_dir: str | None, as_json: bool) -> int:
    from gpux.artifacts import store
    from gpux.config.load import CONFIG_NAMES
    from gpux.config.locate import open_project
    from gpux.config.schema import PROVIDERS
    from gpux.model.io import effective_io, load_checked, source_files
    from gpux.multi.commands import inspect_workspace, workspace_of
    from gpux.providers import ort_conflict_warning, probe_for, runtime_of

    if (ws := workspace_of(target, store_dir)) is not None:
        return inspect_workspace(ws, store_dir, as_json)
    project = open_project(target)
    io = load_checked(project, store_dir)
    inputs, outputs = effective_io(project, io)
    avail = [{**probe_for(project, p).to_dict(), "runtime": runtime_of(project, p)} for p in PROVIDERS]
    from gpux.plan.choice import choose

    project, selection, whys = choose(project, None, False, store_dir)
    locked = selection.chain[0] if selection.source == "gpux.lock.json" else None
    chosen = next((p for p in selection.chain if probe_for(project, p).ok), None)
    root = store_root(project.root, store_dir)
    current = current_folders(project, io, root)
    arts = []
    for a in store.artifacts(root, project.name):
        problem = store.check(a, full=False)
        state = "damaged" if problem else ("current" if a.dir.name in current else "stale")
        arts.append({"id": a.id, "state": state, "problem": problem, "size": a.size(), "path": str(a.main),
                     "built_at": a.manifest.get("built_at"), "verification": a.manifest.get("verification"),
                     "versions": a.manifest["key_parts"].get("versions"),
                     "device": a.manifest["key_parts"].get("device"), "info": a.manifest.get("info")})
    size = sum(f.stat().st_size for f in source_files(project, io))
    warnings = [w for w in [ort_conflict_warning()] if w]
    bare = project.path.name not in CONFIG_NAMES  # a plain model file: no gpux.yml exists
    doc = {"name": project.name, "version": project.config.version, "config": None if bare else str(project.path),
           "source": str(project.source), "size": size, "opset": io.opset, "ir_version": io.ir_version,
           "producer": io.producer, "inputs": [t.to_dict() for t in inputs.values()],
           "outputs": [t.to_dict() for t in outputs.values()], "selection": selection.to_dict(),
           "would_run_on": chosen, "providers": avail, "artifacts": arts,
           "warnings": warnings + whys,
           "lock": {"provider": locked, "options": getattr(project.config.providers, locked).model_dump(mode="json")}
           if locked else None, **offer_of(project, store_dir)}
    if as_json:
        report.emit_json(doc)
        return 0
    print(f"{project.name} {project.config.version}  ({'no gpux.yml: defaults' if bare else project.path})")
    fmt = f"opset {io.opset}  ir {io.ir_version}" if io.opset else f"format {io.producer}"
    print(f"model: {project.source}  {report.format_size(size)}  {fmt}")
    for kind, ts in (("inputs", inputs), ("outputs", outputs)):
        print(f"{kind}:")
        for t in ts.values():
            shape = "?" if t.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in t.shape) + "]"
            print(f"  {t.name}: {t.dtype} {shape}")
    if locked:
        print(f"tuned: {locked} locked in gpux.lock.json for this machine")
    print(f"offer: {', '.join(doc['offer']) or 'none'}; saved with `gpux use`: {doc['saved'] or 'nothing'}")
    print(f"\nproviders (order {', '.join(selection.chain)}; would run on {chosen or 'none'}):")
    print(report.providers_table(avail))
    print("\nartifacts:")
    print(report.artifacts_table(arts) if arts else "  none built yet: run `gpux build`")
    for w in warnings:
        report.warn(w)
    return 0


def offer_of(project: Any, store_dir: str | None) -> dict[str, Any]:
    """The providers this model can run here (declared, reachable, available) and its saved choice."""
    from gpux.plan.choice import Place, read
    from gpux.plan.offer import compute

    return {"offer": list(compute({project.name: project}).offer),
            "saved": read(Place(project.name, project.root, store_dir))}


def current_folders(project: Any, io: Any, root: Path) -> set[str]:
    """Artifact folder names the current config, model and environment would build, for every provider."""
    from gpux.artifacts.build import keyed_targets
    from gpux.config.schema import PROVIDERS
    from gpux.model.io import effective_io, source_files

    inputs, _ = effective_io(project, io)
    digest = digest_files(source_files(project, io), project.root, root / ".hashes.json")
    return {f"{t.id}-{key[:12]}" for p in PROVIDERS for t, _, key in keyed_targets(project, p, inputs, digest)}


def cache_command(action: str, path: str, store_dir: str | None, as_json: bool) -> int:
    from gpux.artifacts import store
    from gpux.config.locate import open_project
    from gpux.model.io import load_checked

    project = open_project(path)
    root = store_root(project.root, store_dir)
    arts = store.artifacts(root, project.name)
    current = current_folders(project, load_checked(project, store_dir), root) if action == "prune" else set()
    rows: list[dict[str, Any]] = []
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
        for p in store.stale_workdirs(root):
            store.discard_tmp(p)
            removed.append(str(p))
        for folder in (root / project.name).glob("*") if (root / project.name).is_dir() else []:
            keep = folder.name == "cache" and action != "prune-all"  # runtime caches: rebuildable, kept
            keep = keep or folder.name == ".in-use"  # live holders' locks (gpux/inuse.py)
            if folder.is_dir() and not keep and store.read_manifest(folder) is None:
                store.discard(folder)
                removed.append(str(folder))
    if as_json:
        report.emit_json({"store": str(root), "artifacts": rows, "removed": removed})
        return code
    for r in rows:
        state = "ok" if r["ok"] else f"DAMAGED: {r['problem']}"
        print(f"{r['id']:<28} {report.format_size(r['size']):>9}  {state}  {r['path']}")
    for gone in removed:
        print(f"removed {gone}")
    if not rows:
        print(f"no artifacts in {root}")
    return code


__all__ = ["build_command", "cache_command", "inspect_command", "run_command"]
