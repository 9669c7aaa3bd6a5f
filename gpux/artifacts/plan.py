"""A build's plan, completed in one place and handed down once: the provider it builds for, the model in hand, and
each target in build order with its kind of artifact and its cache key. What a key covers is gathered here: the
model's and the data's digests, how a verdict is reached, and (from the artifact's kind) the runtime versions and
the device identity. `artifacts.build.build` executes a plan; `gpux build --dry-run` shows one."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpux.artifacts import unchanged
from gpux.config.load import Project
from gpux.documents import AttemptDoc, PlanDoc, PlannedDoc
from gpux.errors import BuildFailed, ProviderUnavailable
from gpux.files import digest_data, digest_files, store_root
from gpux.model.io import Checked, Tensor, check_model
from gpux.plan.targets import Target, resolve_shapes
from gpux.quality.verify import judged
from gpux.report import attempt_line, probe_attempt
from gpux.runtimes import ArtifactKind, kind_of, targets
from gpux.version import __version__


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

    @property
    def inputs(self) -> dict[str, Tensor]:
        return self.checked.inputs

    def to_dict(self) -> PlanDoc:
        return {"name": self.project.name, "provider": self.provider, "source": str(self.project.source),
                "targets": [s.to_dict() for s in self.steps]}


def plan_build(project: Project, provider: str, *, store_dir: str | Path | None = None,
               shapes: dict[str, int] | None = None, checked: Checked | None = None) -> BuildPlan:
    """The plan of building `provider`'s targets for `project`: the model checked (`checked`, else once per project
    by check_model), its files digested (memoised in the store), the sizes of symbolic dims resolved once (`shapes`:
    --shape), every target keyed."""
    checked = checked or check_model(project, store_dir)
    missing = [f for f in checked.files if not f.is_file()]
    if missing:
        raise BuildFailed(f"{project.source}: external data file not found: {missing[0]}")
    sizes = resolve_shapes(project, shapes)
    root = store_root(project.root, store_dir)
    digest = digest_files(list(checked.files), project.source.parent, root / ".hashes.json")
    return BuildPlan(project=project, provider=provider, checked=checked, root=root, shapes=sizes,
                     steps=tuple(keyed_targets(project, provider, checked.inputs, digest, sizes)))


def plan_selected(project: Project, selection: Any, *, dry_run: bool = False, store_dir: str | Path | None = None,
                  shapes: dict[str, int] | None = None, checked: Checked | None = None,
                  taken: bool = False) -> BuildPlan:
    """The plan for what a selection (gpux.plan.select.Selection) builds on: its first provider for a dry run
    (what it would build), else the first available one, or an explicitly asked one that builds without its
    device (Core ML packages); raises ProviderUnavailable when none may build here. `taken`: the plan holds
    what the build reads (`reads`), taken before anything is hashed, for the record of an unchanged build."""
    asked = selection.source != "auto"
    first = selection.skipped[0] if selection.skipped else None
    attempts = [probe_attempt(a) for a in selection.skipped]
    provider, cannot_run = selection.runs_on, None
    if dry_run:
        provider, attempts = selection.chain[0], []
    elif first is not None and asked and first.status == "no device" and \
            not any(kind_of(t.kind).needs_device for t in targets(project, first.provider)):
        provider, cannot_run, attempts = first.provider, first.reason, []
    elif first is not None and selection.strict and asked:
        raise ProviderUnavailable(f"{first.provider} unavailable: {first.reason} — fallback is off", hint=first.fix)
    elif provider is None:
        raise ProviderUnavailable("no provider can build here: " + "; ".join(attempt_line(a) for a in attempts))
    checked = checked or check_model(project, store_dir)
    before = unchanged.before(reads(project, checked), project.path) if taken else None
    plan = plan_build(project, provider, store_dir=store_dir, shapes=shapes, checked=checked)
    return replace(plan, cannot_run=cannot_run, attempts=attempts, taken=before)


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


__all__ = ["BuildPlan", "Planned", "digest_of", "keyed_targets", "plan_build", "plan_selected", "reads"]
