"""Executes a build plan (artifacts.plan): each target found in the cache or built, locked and atomic, and verified."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpux.arrays import Feeds, Outputs
from gpux.artifacts import store
from gpux.artifacts.plan import FP32, BuildPlan, Planned, as_fp32, digest_of, plan_build
from gpux.config.load import Project
from gpux.documents import BuildDoc, BuiltDoc
from gpux.errors import BuildFailed, TooSlow, VerificationFailed, model_step
from gpux.files import locked
from gpux.plan.targets import Target
from gpux.runtimes import KIND_HINTS, ArtifactKind, Built, Context, Job, Log, NothingConverted


@dataclass(kw_only=True)
class TargetResult:
    target: Target
    key: str
    artifact: store.Artifact
    cached: bool
    seconds: float
    reason: str = ""

    def to_dict(self) -> BuiltDoc:
        m = self.artifact.manifest
        return {"target": self.target.to_dict(), "key": self.key, "cached": self.cached,
                "reason": self.reason, "seconds": round(self.seconds, 4), "path": str(self.artifact.main),
                "size": self.artifact.size(), "verification": m.get("verification"),
                "vs_plain": (m.get("info") or {}).get("vs_plain")}


@dataclass
class BuildResult:
    project: Project
    provider: str
    results: list[TargetResult] = field(default_factory=list)
    instead: tuple[str, ...] = ()  # a lossy target that converted nothing: the fp32 artifact built instead, said

    @property
    def final(self) -> TargetResult:
        return self.results[-1]

    def to_dict(self) -> BuildDoc:
        return {"name": self.project.name, "provider": self.provider,
                "targets": [r.to_dict() for r in self.results]}


def build(  # noqa: PLR0913  # the public API: keyword-only options, each an independent defaulted switch
        project: Project, provider: str, *, force: bool = False, verify: bool = True,
        store_dir: str | Path | None = None, log: Log | None = None, shapes: dict[str, int] | None = None,
        full_check: bool = False, for_run: bool = False, strict: bool = False) -> BuildResult:
    """Plan `provider`'s build (artifacts.plan.plan_build: `shapes` are --shape) and execute it."""
    plan = plan_build(project, provider, store_dir=store_dir, shapes=shapes, retry=force)
    return execute(plan, force=force, verify=verify, log=log, full_check=full_check, for_run=for_run, strict=strict)


def execute(plan: BuildPlan, *, force: bool = False, verify: bool = True, log: Log | None = None,
            full_check: bool = False, for_run: bool = False, strict: bool = False) -> BuildResult:
    """Find in the cache, or build, every target of `plan` in order. `full_check` re-hashes cached artifacts (what
    `run` does before loading) instead of trusting their recorded stamp. `strict` refuses an artifact
    that is not verified (lossy on generated data only, or built with --no-verify), and the fp32 artifact made for a
    lossy target that converted nothing (NothingConverted: built instead otherwise, and said in `instead`)."""
    log = log or (lambda _msg: None)

    def made(planned: BuildPlan) -> BuildResult:
        if planned.instead and strict:
            raise BuildFailed(f"{planned.instead[0]}; --strict refuses the fp32 artifact it makes instead",
                              hint="set precision: fp32 for this model, or drop --strict", conversion=False)
        result = _execute(planned, force=force, verify=verify, log=log, full_check=full_check, for_run=for_run,
                          strict=strict)
        result.instead = tuple(planned.instead_lines())  # said by the caller: build's report, run's log
        return result

    try:
        return made(plan)
    except NothingConverted as exc:  # remembered for its key: the next build plans the fp32 artifact at once
        return made(as_fp32(plan, exc.message))


@dataclass(frozen=True)
class Asked:
    """What the command asked of a build's execution: rebuild and retry remembered failures (--force), verify
    (not --no-verify), refuse what is not verified (--strict)."""

    force: bool = False
    verify: bool = True
    strict: bool = False


def _execute(plan: BuildPlan, *, force: bool, verify: bool, log: Log, full_check: bool, for_run: bool,
             strict: bool) -> BuildResult:
    project, root = plan.project, plan.root
    job = Job(project=project, inputs=plan.inputs, shapes=plan.shapes, log=log,
              source=_usable_source(project, plan.checked, root, log))
    asked = Asked(force=force, verify=verify, strict=strict)
    result = BuildResult(project, plan.provider)
    for step in plan.steps:
        target, folder = step.target, root / project.name / step.folder
        src = job.source if not result.results else result.final.artifact.main
        started = time.perf_counter()
        check = verify and not for_run
        art, reason = (None, "--force") if force else _cached(folder, step.key, full_check, check)
        cached = art is not None
        if art is None:
            with locked(root / ".locks" / f"{project.name}-{folder.name}.lock"):
                art, reason2 = (None, reason) if force else _cached(folder, step.key, full_check, check)
                if art is None and for_run and not project.config.runtime.build_on_run:
                    raise NeedsBuild(project, step, root, plan.provider)
                if art is None:
                    slow = for_run and not step.kind.on_run
                    stale = stale_why(project, step, root) if slow else None
                    from gpux.report import SLOW_BUILD

                    art = _build_remembering(job, asked, step, src, folder,
                                             (stale or reason2 or reason) + (f"; {SLOW_BUILD}" if slow else ""))
                else:
                    cached = True
        r = TargetResult(target=target, key=step.key, artifact=art, cached=cached,
                         seconds=time.perf_counter() - started, reason="" if cached else reason)
        log(f"{target.id}: {'cached' if cached else 'built'} → {art.dir}")
        result.results.append(r)
    _refuse_unverified(project, result, strict, log)
    _keep_model_facts(project, plan.checked, root)
    return result


def _keep_model_facts(project: Project, checked: Any, root: Path) -> None:
    """What the model check read (the model's I/O, what ONNX Runtime reads) kept in the store, now that it exists:
    a first build checked the model before there was a store to keep them in, and a server or session opening the
    artifact later should read neither the model nor ONNX Runtime's limits again (nor import onnx to do it)."""
    from gpux.model.compat import ort_limits
    from gpux.model.io import keep_io

    if checked.io.ir_version is None or not root.is_dir():
        return  # a PyTorch source: its I/O is the declared one
    keep_io(project.source, root / ".model-io.json", checked.read or checked.io, checked.stamp)
    ort_limits(root / ".ort-limits.json")  # what this process probed, kept under this install's versions


def _refuse_unverified(project: Project, result: BuildResult, strict: bool, log: Log) -> None:
    """An artifact that is not verified is refused under --strict, and said otherwise (a fresh one's
    verification already said it)."""
    from gpux.quality.verify import UNVERIFIED_FIX

    for r in result.results:
        v = r.artifact.manifest.get("verification") or {}
        if v.get("status") == "unverified":
            why, fix = f"unverified: {v.get('unverified')}", UNVERIFIED_FIX
        elif v.get("skipped") == "--no-verify":
            why = "not verified: built with --no-verify"
            fix = f"gpux build {project.root if project.path.is_file() else project.source} verifies it"
        else:
            continue
        if strict:
            raise VerificationFailed(f"{r.target.id} for {project.name!r} is {why}; --strict refuses it", hint=fix)
        if r.cached:
            log(f"warning: {r.target.id}: {why} ({fix})")


class NeedsBuild(BuildFailed):
    """`run` found no artifact it may build itself; says why an existing one does not fit and what to run."""

    def __init__(self, project: Project, planned: Planned, root: Path, provider: str | None = None) -> None:
        why = stale_why(project, planned, root) or "none built yet"
        path = project.root if project.path.is_file() else project.source
        super().__init__(f"{planned.target.id} for {project.name!r}: {why}",
                         hint=f"gpux build {path} --provider {provider or planned.target.provider}")


def stale_why(project: Project, planned: Planned, root: Path) -> str | None:
    """Why the newest artifact of `planned`'s target id does not fit (None when none was built)."""
    others = [a for a in store.artifacts(root, project.name) if a.id == planned.target.id]
    if not others:
        return None
    newest = max(others, key=lambda a: str(a.manifest.get("built_at")))
    diffs = differences(newest.manifest.get("key_parts") or {}, planned.parts)
    return "the one built does not fit this machine: " + ("; ".join(diffs) or "its options differ")


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What about the machine changed between two key_parts: device identity and runtime versions."""
    out = []
    for section in ("device", "versions"):
        was, now = recorded.get(section) or {}, current.get(section) or {}
        for k in sorted(set(was) | set(now)):
            if was.get(k) != now.get(k):
                out.append(f"{k} {was.get(k) or 'none'} (built) vs {now.get(k) or 'none'} (here)")
    return out


def _cached(folder: Path, key: str, full: bool = False, verify: bool = False) -> tuple[store.Artifact | None, str]:
    art = store.read_manifest(folder)
    if art is None:
        return None, "not built yet" if not folder.exists() else "no valid manifest"
    if art.manifest.get("key") != key or digest_of(art.manifest.get("key_parts")) != key:
        return None, "manifest does not match this environment"
    if verify and (art.manifest.get("verification") or {}).get("skipped") == "--no-verify":
        return None, "built with --no-verify; verifying now"
    problem = store.check(art, full=full)
    if problem:
        return None, f"artifact damaged: {problem}"
    return art, ""


def _build_remembering(job: Job, asked: Asked, step: Planned, src: Path, folder: Path, why: str) -> store.Artifact:
    """Build into `folder` (<store>/<model>/<target>-<key>), remembering a failure for this exact key so later
    runs skip it at once (--force retries)."""
    name, root, key = job.project.name, folder.parent.parent, step.key
    checked = key + ":verified"  # a verification failure holds only for builds that verify
    known = None if asked.force else store.recall_failure(root, name, folder.name, key) or \
        (store.recall_failure(root, name, folder.name, checked) if asked.verify else None)
    if known is not None:
        error = VerificationFailed if known.key == checked else BuildFailed
        again = error(f"{known.message} (remembered from an earlier build of this model with these runtime "
                      f"versions and data; --force retries)", hint=known.hint)
        if isinstance(again, VerificationFailed):
            again.verification, again.info = known.verification, known.info
        raise again
    job.log(f"building {step.target.id} ({why})")
    try:
        return _build_one(job, asked, step, src, folder)
    except NothingConverted as exc:  # the lossy target made nothing lossy: the fp32 artifact is built instead
        store.remember_failure(root, name, folder.name, store.Failure(key=key + FP32, message=exc.message,
                                                                      hint=exc.hint))
        raise
    except TooSlow:  # this machine's speed at this moment: never remembered
        raise
    except VerificationFailed as exc:  # its key covers the data's digest and the thresholds
        store.remember_failure(root, name, folder.name, store.Failure(
            key=checked, message=exc.message, hint=exc.hint, verification=exc.verification, info=exc.info))
        raise
    except BuildFailed as exc:
        if exc.conversion:  # the runtime's conversion itself, not verification on some data
            store.remember_failure(root, name, folder.name, store.Failure(key=key, message=exc.message, hint=exc.hint))
        raise


def _usable_source(project: Project, checked: Any, root: Path, log: Log) -> Path:
    """The source, or a copy in the store with its IR version lowered to what ONNX Runtime reads and its ZipMap
    outputs exchanged for tensors (`checked`: gpux.model.io.Checked, the project's model as it was checked)."""
    from gpux.model.compat import usable_source

    if checked.compat.note:
        log(f"note: {checked.compat.note}")
    return usable_source(project.source, checked.compat.lower_ir_to, checked.io.exchanged, root / ".lowered")


def _build_one(job: Job, asked: Asked, planned: Planned, src: Path, folder: Path) -> store.Artifact:
    from gpux.quality import calibrate
    from gpux.quality.verify import accuracy_goal

    root = folder.parent.parent
    project, inputs, shapes, log = job.project, job.inputs, job.shapes, job.log
    target, step = planned.target, planned.kind
    workdir = store.new_workdir(root, folder.name).resolve()
    try:
        ctx = Context(project=project, target=target, src=src.resolve(), workdir=workdir, inputs=inputs, shapes=shapes,
                      log=log, calibration=lambda: calibrate.feeds(project, target, inputs, shapes, log),
                      strict=asked.strict, goal=lambda: accuracy_goal(job, target))
        started = time.perf_counter()
        info, opened = _run_step(ctx, step)
        main = str(info.pop("main"))
        manifest: store.Manifest = {
            "schema": store.MANIFEST_SCHEMA, "name": project.name, "version": project.config.version,
            "target": target.to_dict(), "key": planned.key, "key_parts": planned.parts, "main": main, "info": info,
            "source": str(project.source), "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "build_seconds": round(time.perf_counter() - started, 3), "verification": None,
            "files": {},  # listed as it is published
        }
        if asked.verify and project.config.verify.enabled:
            from gpux.quality.judge import judge

            try:
                manifest["verification"], info["vs_plain"] = judge(job, step, target, workdir / main, opened)
            except VerificationFailed as exc:
                exc.info = info
                raise
        else:
            manifest["verification"] = {"status": "skipped",
                                        "skipped": "--no-verify" if not asked.verify else "verify.enabled: false"}
        return store.publish(workdir, folder, manifest)
    finally:
        if workdir.exists():
            store.discard_tmp(workdir)


def _run_step(ctx: Context, kind: ArtifactKind) -> tuple[dict[str, object], Callable[[Feeds], Outputs] | None]:
    """The kind's build step run in its scratch folder; its info, and what it opened of the artifact (`Built`). What
    fails on the model is a BuildFailed that is its conversion's failure (remembered); a gpux bug and the machine's
    errors propagate as they are."""
    target = ctx.target
    hint = KIND_HINTS.get(target.kind, KIND_HINTS[""])
    try:
        with store.scratch(ctx.workdir), model_step(target.id, hint=hint, reason=_short, conversion=True):
            done = kind.build_step()(ctx)
            return (dict(done.info), done.opened) if isinstance(done, Built) else (dict(done), None)
    except BuildFailed as exc:
        if exc.conversion is None:  # the step's own failure on the model, unless it said otherwise
            exc.conversion = True
        raise


def _short(exc: BaseException) -> str:
    from gpux.quality.verify import short

    return short(exc)

