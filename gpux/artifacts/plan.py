"""A build's plan, completed in one place and handed down once: the provider it builds for, the model in hand, and
each target in build order with its kind of artifact and its cache key. What a key covers is gathered here: the
model's and the data's digests, how a verdict is reached, and (from the artifact's kind) the runtime versions and
the device identity. `artifacts.build.build` executes a plan; `gpux build --dry-run` shows one."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux.artifacts import store, unchanged
from gpux.config.load import Project
from gpux.documents import AttemptDoc, PlanDoc, PlannedDoc
from gpux.errors import BuildFailed, GpuxError, ProviderUnavailable, VerificationFailed
from gpux.files import digest_data, digest_files, store_root
from gpux.model.io import Checked, check_model
from gpux.model.tensor import Tensor
from gpux.plan.targets import Target, resolve_shapes
from gpux.providers import Availability
from gpux.quality.verify import judged
from gpux.report import attempt_line, probe_attempt
from gpux.runtimes import ArtifactKind, kind_of, targets
from gpux.version import __version__

if TYPE_CHECKING:
    from gpux.plan.select import Selection


@dataclass(frozen=True, kw_only=True)
class Planned:
    """One target of a plan: its kind of artifact, what its cache key covers (`parts`) and the key."""

    target: Target
    kind: ArtifactKind
    parts: dict[str, Any]
    key: str

    @property
    def folder(self) -> str:
        """Its artifact's folder in the store, under the model's name."""
        return f"{self.target.id}-{self.key[:12]}"

    def to_dict(self) -> PlannedDoc:
        return {**self.target.to_dict(), "key": self.key, "key_parts": self.parts}


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    """Everything a build of `provider`'s targets needs, decided before anything is built."""

    project: Project
    provider: str
    checked: Checked  # the model, checked once (gpux.model.io.check_model): its interface and files
    root: Path  # the artifact store
    shapes: dict[str, int]  # the sizes of symbolic dims
    steps: tuple[Planned, ...]
    cannot_run: str | None = None  # why the provider it builds for cannot run here (built without its device)
    attempts: list[AttemptDoc] = field(default_factory=list)  # the providers of the selection passed over
    taken: unchanged.Before | None = None  # what the build reads, before anything was hashed (for its record)
    passed: list[AttemptDoc] = field(default_factory=list)  # the providers passed over before it, a dry run's too
    instead: tuple[str, ...] = ()  # why a lossy target that converted nothing is planned as the fp32 artifact it makes

    def instead_lines(self) -> list[str]:
        """What `instead` says: each reason and the fp32 artifact built for it."""
        made = ", ".join(s.target.id for s in self.steps)
        return [f"{why}; built as fp32 instead ({made})" for why in self.instead]

    @property
    def inputs(self) -> dict[str, Tensor]:
        return self.checked.inputs

    def to_dict(self) -> PlanDoc:
        return {"name": self.project.name, "provider": self.provider, "source": str(self.project.source),
                "targets": [s.to_dict() for s in self.steps], "skipped": self.passed, "instead": self.instead_lines()}


def plan_build(project: Project, provider: str, *, store_dir: str | Path | None = None,
               shapes: dict[str, int] | None = None, checked: Checked | None = None, retry: bool = False) -> BuildPlan:
    """The plan of building `provider`'s targets for `project`: the model checked (`checked`, else once per project
    by check_model), its files digested (memoised in the store), the sizes of symbolic dims resolved once (`shapes`:
    --shape), every target keyed. A lossy target the store remembers converting nothing of this model is planned as
    the fp32 artifact it makes (`as_fp32`) unless `retry` (--force)."""
    checked = checked or check_model(project, store_dir)
    missing = [f for f in checked.files if not f.is_file()]
    if missing:
        raise BuildFailed(f"{project.source}: external data file not found: {missing[0]}")
    sizes = resolve_shapes(project, shapes)
    root = store_root(project.root, store_dir)
    digest = digest_files(list(checked.files), project.source.parent, root / ".hashes.json")
    plan = BuildPlan(project=project, provider=provider, checked=checked, root=root, shapes=sizes,
                     steps=tuple(keyed_targets(project, provider, checked.inputs, digest, sizes)))
    said = None if retry else next(filter(None, (store.recall_failure(root, project.name, s.folder, s.key + FP32)
                                                 for s in plan.steps)), None)
    return as_fp32(plan, said.message) if said is not None else plan


FP32 = ":fp32"  # the key suffix of the store's record that a lossy build of this key converted nothing


def as_fp32(plan: BuildPlan, why: str) -> BuildPlan:
    """The plan of the fp32 artifact a lossy build that converted nothing (`why`: NothingConverted's message) makes
    instead: the provider's block at precision fp32 (the fields fp32 rejects at their defaults), keyed as such."""
    from gpux.plan.targets import fitted_options, with_options

    project = with_options(plan.project, plan.provider, **fitted_options(plan.project, plan.provider,
                                                                          {"precision": "fp32"}))
    digest = plan.steps[0].parts["input"] if plan.steps and plan.steps[0].target.consumes == "source" else \
        digest_files(list(plan.checked.files), project.source.parent, plan.root / ".hashes.json")
    steps = keyed_targets(project, plan.provider, plan.checked.inputs, digest, plan.shapes)
    return replace(plan, project=project, steps=tuple(steps), instead=(why,))


def recorded(plan: BuildPlan) -> store.Failure | None:
    """The failure the store remembers for one of the plan's targets: its conversion failed on this model with
    these options and runtime versions (an accuracy gate that failed is not this: it stops the build)."""
    for s in plan.steps:
        failure = store.recall_failure(plan.root, plan.project.name, s.folder, s.key)
        if failure is not None:
            return failure
    return None


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What a selection builds on here: its plan (None: nothing may build), the providers passed over before it (each
    an attempt: its probe, or its build as the store remembers it failing, or as it failed in this command: `failed`),
    why the provider it builds for cannot run here (built without its device), and whether fallback is off and the
    walk stopped at the first provider passed over."""

    plan: BuildPlan | None
    attempts: list[AttemptDoc]
    cannot_run: str | None = None
    stopped: bool = False


@dataclass(frozen=True, kw_only=True)
class Walk:
    """How a selection's chain is walked to its plan: the store, the sizes --shape gives, a dry run, whether the
    failures the store remembers are retried (--force), and the providers whose build failed in this command."""

    store_dir: str | Path | None = None
    shapes: dict[str, int] | None = None
    dry_run: bool = False
    retry: bool = False
    failed: Mapping[str, AttemptDoc] = field(default_factory=dict)


def choose(project: Project, selection: Selection, checked: Checked, walk: Walk) -> Choice:
    """Walk the selection's chain as `run` does: a provider absent here is passed over at its probe; one whose build
    fails on this model (`walk.failed`, or remembered by the store unless retried) at its build; the first left is
    planned. An explicitly asked first provider absent here is planned for a dry run (what it would build), and for a
    build where it builds without its device. With fallback off the first provider passed over ends the walk (under
    auto, absent ones do not)."""
    asked, dry_run = selection.source != "auto", walk.dry_run
    store_dir, shapes, retry = walk.store_dir, walk.shapes, walk.retry
    probed = {a.provider: a for a in selection.skipped}
    attempts: list[AttemptDoc] = []
    for i, provider in enumerate(selection.chain):
        avail = probed.get(provider) or (Availability(provider, "ok") if provider == selection.runs_on else
                                         selection.available(provider))
        cannot_run = None if avail.ok else avail.reason
        if not avail.ok and not (i == 0 and asked and (dry_run or builds_without_device(project, avail))):
            attempts.append(probe_attempt(avail))
            if selection.strict and asked:
                return Choice(plan=None, attempts=attempts, stopped=True)
            continue
        plan = plan_build(project, provider, store_dir=store_dir, shapes=shapes, checked=checked, retry=retry)
        known = walk.failed.get(provider) or (None if retry else _attempt(provider, recorded(plan)))
        if known is not None:
            attempts.append(known)
            if selection.strict:
                return Choice(plan=None, attempts=attempts, stopped=True)
            continue
        return Choice(plan=plan, attempts=attempts, cannot_run=None if dry_run else cannot_run)
    if dry_run and selection.chain:  # nothing here: what the first provider would build elsewhere
        return Choice(plan=plan_build(project, selection.chain[0], store_dir=store_dir, shapes=shapes,
                                      checked=checked), attempts=attempts)
    return Choice(plan=None, attempts=attempts)


def builds_without_device(project: Project, avail: Availability) -> bool:
    """Whether a provider whose device is not here still builds its artifacts (a Core ML package)."""
    return avail.status == "no device" and \
        not any(kind_of(t.kind).needs_device for t in targets(project, avail.provider))


def _attempt(provider: str, failure: store.Failure | None) -> AttemptDoc | None:
    if failure is None:
        return None
    return {"provider": provider, "stage": "build", "ok": False, "fix": failure.hint,
            "reason": f"{failure.message} (remembered from an earlier build of this model with these runtime "
                      f"versions and data; --force retries)"}


def failed_attempt(provider: str, exc: BuildFailed) -> AttemptDoc:
    """A provider's build that failed on the model in this command, as its attempt."""
    return {"provider": provider, "stage": "build", "ok": False, "fix": exc.hint,
            "reason": " ".join(x.strip() for x in exc.message.splitlines())}


def falls_back(exc: BaseException) -> bool:
    """Whether a build's failure passes the build on to the next provider, as `run` does: the runtime's own failure
    on this model (its conversion, compile, operators it cannot take; remembered by the store). An accuracy gate
    that failed, a setting, --strict's refusal, the model itself, the inputs, a gpux bug or the machine stop it."""
    return isinstance(exc, BuildFailed) and not isinstance(exc, VerificationFailed) and exc.conversion is True


def plan_selected(project: Project, selection: Selection, walk: Walk | None = None, *, checked: Checked | None = None,
                  taken: bool = False) -> BuildPlan:
    """The plan for what a selection builds on (`choose`); raises when nothing may build
    here: ProviderUnavailable (fallback off, or every provider passed over), or the one provider's own build failure
    (BuildFailed) when it was the only one there was to build on. `taken`: the plan holds what the build reads
    (`reads`), taken before anything is hashed, for the record of an unchanged build."""
    walk = walk or Walk()
    checked = checked or check_model(project, walk.store_dir)
    before = unchanged.before(reads(project, checked), project.path) if taken else None
    choice = choose(project, selection, checked, walk)
    if choice.plan is None:
        raise nothing_builds(project, choice)
    return replace(choice.plan, cannot_run=choice.cannot_run, attempts=[] if walk.dry_run else choice.attempts,
                   taken=before, passed=choice.attempts)


def nothing_builds(project: Project, choice: Choice) -> GpuxError:
    """Why nothing builds: fallback off at an absent provider; the one provider there was to build on (or the first,
    with fallback off) failing on the model: its own error; every provider passed over."""
    built = [a for a in choice.attempts if a["stage"] == "build"]
    last = choice.attempts[-1] if choice.attempts else None
    if last is not None and choice.stopped and last["stage"] == "probe":
        return ProviderUnavailable(f"{last['provider']} unavailable: {last['reason']} — fallback is off",
                                   hint=last["fix"])
    if len(built) == 1:
        return BuildFailed(built[0]["reason"], hint=built[0]["fix"])
    tried = "; ".join(attempt_line(a) for a in choice.attempts)
    if built:
        return ProviderUnavailable(f"{project.name!r} cannot be built on any provider here (a model or runtime limit, "
                                   f"not a missing provider): {tried}")
    return ProviderUnavailable(f"no provider can build here: {tried}")


def keyed_targets(project: Project, provider: str, inputs: dict[str, Tensor], source_digest: str,
                  sizes: dict[str, int]) -> list[Planned]:
    """The provider's targets with their kinds, key parts and cache keys; a target's key covers its input's
    (`sizes`: the symbolic dims as plan.targets.resolve_shapes resolves them). Declared sample data (calibration,
    verify.data) is keyed by its digest: new data, a new verdict."""
    chain = [(t, kind_of(t.kind)) for t in targets(project, provider, inputs)]
    cfg = project.config
    named = [*((t.id, "calibration", t.options.get("calibration")) for t, _ in chain), ("", "verify", cfg.verify.data)]
    data = {(who, what): digest_data(project.root / path, project.root, what, project.path) if path else None
            for who, what, path in named}
    shared = {"gpux": __version__, "inputs": {n: t.to_dict() for n, t in inputs.items()},
              "verify": cfg.verify.model_dump(mode="json"), "verify_data": data["", "verify"],
              "judged": judged(project, sizes)}
    if project.origin is not None:  # a hub id or a checkpoint: the commit it resolved to (gpux.sources)
        shared["origin"] = project.origin
    ranges = {d: r.model_dump() for d, r in cfg.shapes.items() if not isinstance(r, int)}
    keys: dict[str, str] = {"source": source_digest}
    out = []
    for target, kind in chain:
        parts = {**shared, "step": target.kind, "precision": target.precision, "options": target.options,
                 "input": keys[target.consumes], "calibration": data[target.id, "calibration"],
                 "shapes": {"sizes": sizes, "ranges": ranges} if kind.shapes else None, **kind.environment(target)}
        keys[target.id] = digest_of(parts)
        out.append(Planned(target=target, kind=kind, parts=parts, key=keys[target.id]))
    return out


def digest_of(parts: dict[str, Any] | None) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def reads(project: Project, checked: Checked) -> list[Path]:
    """Every file and folder a build reads: config, model (+ external data) and every other file gpux.yml names
    (`config.files`: labels, charsets, tokenizers, python steps, samples, calibration data; folders with their
    files: adding one changes them)."""
    resolved = project.resolved  # a hub id: the cache's refs it was resolved by; a checkpoint folder: its files
    named = project.root / project.config.model.source
    out = [project.path, *(resolved.watch if resolved else [named]), *checked.files]  # the source as named: a link
    if resolved is not None and named.is_dir():
        out += sorted(named.rglob("*"))
    for entry in project.named_files()[1:]:
        p = entry.found(project.root) or entry.candidates(project.root)[0]
        out += [p, *sorted(p.rglob("*"))] if p.is_dir() else [p]
    return out


__all__ = [
    "FP32",
    "BuildPlan",
    "Choice",
    "Planned",
    "Walk",
    "as_fp32",
    "choose",
    "digest_of",
    "failed_attempt",
    "falls_back",
    "keyed_targets",
    "nothing_builds",
    "plan_build",
    "plan_selected",
    "reads",
    "recorded",
]
