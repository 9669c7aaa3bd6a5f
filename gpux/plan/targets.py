"""What a build plans: a `Target` (one artifact to build), the sizes of symbolic dims, and a project with one
provider block changed (`with_options`, `fitted_options`). Each runtime plans its own targets (runtimes.targets)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpux.config.load import Project
from gpux.documents import TargetDoc
from gpux.providers.options import OptionFields

if TYPE_CHECKING:
    from gpux.model.tensor import Tensor


@dataclass(frozen=True, kw_only=True)
class Target:
    """One artifact to build: what makes it, from what, with which resolved options."""

    id: str  # human-readable, also the artifact folder's prefix, e.g. onnx-fp16-basic, openvino-ir-int8-quantize
    kind: str  # its kind of artifact (gpux.runtimes.ARTIFACT_KINDS, or one a registry row adds)
    # provider: the one that asked, or the runtime whose artifact several providers share (onnxruntime, torch)
    provider: str
    precision: str
    options: dict[str, Any]
    consumes: str = "source"  # "source" or another target's id

    def to_dict(self) -> TargetDoc:
        # "step" too: what gpux 0.1.0 before "kind" reads, so both share a store
        return {"id": self.id, "kind": self.kind, "step": self.kind, "provider": self.provider,
                "precision": self.precision, "consumes": self.consumes, "options": self.options}


def resolve_shapes(project: Project, shapes: dict[str, int] | None = None) -> dict[str, int]:
    """Values for symbolic dims: CLI --shape, then benchmark.shapes/batch, then `shapes:` (opt), then 1."""
    out = {d: v if isinstance(v, int) else v.opt for d, v in project.config.shapes.items()}
    out.update(project.config.benchmark.shapes)
    if project.config.benchmark.batch:
        out.setdefault("batch", project.config.benchmark.batch)
    out.update(shapes or {})
    return out


def refuse_unknown_dims(shapes: Mapping[str, int] | None, models: Mapping[str, Mapping[str, Tensor]]) -> None:
    """--shape names a symbolic dim of some model's inputs (`models`: each model's inputs by its name; an unnamed dim
    is INPUT:AXIS), else a UsageError naming the dims there are: a misspelt name would key a new artifact, sized as
    if nothing were given."""
    from gpux.errors import UsageError

    known = dict.fromkeys(d if isinstance(d, str) and d else f"{n}:{i}" for inputs in models.values()
                          for n, t in inputs.items() for i, d in enumerate(t.shape or ()) if not isinstance(d, int))
    unknown = sorted(set(shapes or ()) - set(known))
    if unknown:
        raise UsageError(f"--shape {unknown[0]}=...: {' or '.join(models) or 'the model'} has no symbolic input dim "
                         f"{unknown[0]!r} (its dims: {', '.join(known) or 'none'})")


def with_options(project: Project, provider: str, **update: Any) -> Project:
    """The same project with fields of `providers.<provider>` replaced (fields it lacks are left alone); a
    mapping given for a nested block (`torch:`) replaces that block's fields it names."""
    block = getattr(project.config.providers, provider, None)  # None: a plugin's row, which has no block
    update = {k: _merged(getattr(block, k), v) for k, v in update.items() if hasattr(block, k)}
    update = {k: v for k, v in update.items() if getattr(block, k) != v}
    if block is None or not update:
        return project
    providers = project.config.providers.model_copy(update={provider: block.model_copy(update=update)})
    return dataclasses.replace(project, config=project.config.model_copy(update={"providers": providers}))


def fitted_options(project: Project, provider: str, options: OptionFields) -> OptionFields:
    """`options` plus, at their defaults, the declared fields of `providers.<provider>` its option model rejects
    beside them (calibration beside precision fp32: the int8-only fields), found by validating the declared fields
    with `options`, not from a list: each one kept that validates beside `options` and the declared ones kept so
    far, until none more is (so `{}` keeps the whole declared block, its int8 calibration beside its declared int8
    precision); what `gpux tune` builds each candidate with and the lock is run with."""
    from pydantic import ValidationError

    block = getattr(project.config.providers, provider, None)
    if block is None:
        return dict(options)
    cls = type(block)
    flat = {k: v for k, v in options.items() if not isinstance(v, dict)}
    declared = {name: getattr(block, name) for name, f in cls.model_fields.items()
                if name not in options and getattr(block, name) != f.get_default(call_default_factory=True)}
    kept: OptionFields = {}
    grew = True
    while grew:  # a declared field may need another declared one beside it (calibration needs precision: int8)
        grew = False
        for name, value in declared.items():
            if name in kept:
                continue
            try:
                cls.model_validate({**flat, **kept, name: value})
            except ValidationError:
                continue
            kept[name], grew = value, True
    reset = {name: cls.model_fields[name].get_default(call_default_factory=True) for name in declared
             if name not in kept}
    return {**options, **reset}


def _merged(current: Any, value: Any) -> Any:
    if isinstance(value, dict) and hasattr(current, "model_copy"):
        return current.model_copy(update=value)
    return value
