"""The targets a provider needs, in build order (as its registry row plans them), and the sizes of symbolic dims."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpux.config.load import Project

if TYPE_CHECKING:
    from gpux.providers.options import ProfileRange

# ONNX artifact precision -> build step that makes it from the source model
ONNX_STEPS = {"fp32": "optimize", "fp16": "float16", "int8": "quantize"}


@dataclass(frozen=True)
class Target:
    """One artifact to build: what makes it, from what, with which resolved options."""

    id: str  # human-readable, also the artifact folder's prefix, e.g. onnx-fp16-basic, openvino-ir-int8-quantize
    step: str  # a kind of artifact (gpux.runtimes.STEPS, or one a registry row adds)
    # provider: the one that asked, or the runtime whose artifact several providers share (onnxruntime, torch)
    provider: str
    precision: str
    options: dict[str, Any]
    consumes: str = "source"  # "source" or another target's id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "step": self.step, "provider": self.provider, "precision": self.precision,
                "consumes": self.consumes, "options": self.options}


def resolve_shapes(project: Project, shapes: dict[str, int] | None = None) -> dict[str, int]:
    """Values for symbolic dims: CLI --shape, then benchmark.shapes/batch, then `shapes:` (opt), then 1."""
    out = {d: v if isinstance(v, int) else v.opt for d, v in project.config.shapes.items()}
    out.update(project.config.benchmark.shapes)
    if project.config.benchmark.batch:
        out.setdefault("batch", project.config.benchmark.batch)
    out.update(shapes or {})
    return out


def targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    """The targets that provider `provider` needs, in build order (`inputs`: the model's Tensors, which
    fix TensorRT's shape profiles). A PyTorch source is first exported to ONNX, which the rest consume."""
    from pkgutil import resolve_name

    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.providers import registry, runtime_of

    row = registry().get(provider)
    plan = resolve_name(row.targets) if row else onnx_targets  # what its row plans (ONNX Runtime's artifact)
    fmt = source_format(project)
    if fmt not in TORCH_FORMATS:
        return list(plan(project, provider, inputs))
    if row is not None and row.torch is not None and runtime_of(project, provider) == "torch":
        return [torch_target(project, provider, fmt)]
    if provider == "coreml":  # coremltools converts PyTorch directly into an ML Program package
        o = project.config.providers.coreml
        profiles = {d: r.model_dump() for d, r in project.config.providers.tensorrt.profiles.items()}
        return [Target(f"coreml-package-{o.compute_precision}", "coreml-package", provider, o.compute_precision,
                       {**o.model_dump(mode="json"), "source_format": fmt, "profiles": profiles})]
    export = Target("onnx-export", "torch-export", "torch", "fp32",
                    {"opset": EXPORT_OPSET, "source_format": fmt})
    out = [export]
    for t in plan(project, provider, inputs):
        out.append(replace(t, consumes=export.id) if t.consumes == "source" else t)
    return out


EXPORT_OPSET = 17  # pinned: the ONNX opset PyTorch sources are exported at


def torch_target(project: Project, provider: str, fmt: str) -> Target:
    """PyTorch runs the source on `provider`'s device: `compile: auto` resolved, the device index recorded."""
    from gpux.providers import registry

    block = getattr(project.config.providers, provider)
    t = block.torch
    torch = registry()[provider].torch
    compiles = torch is not None and torch.compiles  # compile: auto means torch.compile there, eager elsewhere
    mode = t.compile if t.compile != "auto" else ("default" if compiles else "off")
    opts = {**t.model_dump(mode="json"), "compile": mode, "device": provider,
            "device_id": int(getattr(block, "device_id", 0) or 0), "source_format": fmt}
    label = "eager" if mode == "off" else mode
    return Target(f"torch-{provider}-{t.precision}-{label}", "torch-module", provider, t.precision, opts)


def onnx_targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    """ONNX Runtime execution providers (cuda, rocm, directml, coreml) load the portable ONNX artifact."""
    return [_onnx_target(project, provider, {"optimization": "basic", "precision": "fp32"})]


def cpu_targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    return [_onnx_target(project, provider, project.config.providers.cpu.model_dump(mode="json"))]


def openvino_targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    o = project.config.providers.openvino
    if o.runtime == "onnxruntime":
        return onnx_targets(project, provider, inputs)
    label = f"int8-{o.int8_mode}" if o.precision == "int8" else o.precision  # the int8 variants apart
    return [Target(f"openvino-ir-{label}", "openvino-ir", provider, o.precision, o.model_dump(mode="json"))]


def tensorrt_targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    t = project.config.providers.tensorrt
    # int8 engines are built from the calibrated QDQ model (explicit quantization)
    base_opts: dict[str, Any] = {"optimization": "basic", "precision": "fp32"}
    if t.precision == "int8":
        base_opts = {"optimization": "basic", "precision": "int8", "quantization": "static",
                     "calibration": t.calibration, "calibration_samples": t.calibration_samples}
    base = _onnx_target(project, provider, base_opts)
    opts = t.model_dump(mode="json")
    opts["profile_shapes"] = trt_profiles(project, t, inputs or {})
    return [base, Target(f"tensorrt-engine-{t.precision}", "tensorrt-engine", provider, t.precision, opts,
                         consumes=base.id)]


def trt_profiles(project: Project, t: Any, inputs: dict[str, Any]) -> dict[str, str]:
    """min/opt/max shapes for TensorRT: `tensorrt.profiles`, else `shapes:` ranges, else each symbolic dim
    fixed at its resolved size."""
    from gpux.providers.options import ProfileRange

    sizes = resolve_shapes(project)
    profiles = {d: v for d, v in project.config.shapes.items() if isinstance(v, ProfileRange)}
    profiles.update(t.profiles or {})
    shapes = {n: list(getattr(x, "shape", None) or ()) for n, x in inputs.items()}
    for dims in shapes.values():
        for i, d in enumerate(dims):
            if d is None:
                dims[i] = d = "?"
            if isinstance(d, str) and d not in profiles:
                v = sizes.get(d, 1)
                profiles[d] = ProfileRange(min=v, opt=v, max=v)
    return trt_profile_shapes(profiles, shapes)


def trt_profile_shapes(profiles: Mapping[str, ProfileRange],
                       inputs: Mapping[str, Sequence[int | str]]) -> dict[str, str]:
    """trt_profile_{min,opt,max}_shapes ("name:1x3x224x224,...") for the inputs with symbolic dims.

    `inputs` maps input name -> dims (ints, or symbolic names looked up in `profiles`). Returns {} when
    every input is static; raises ValueError when a symbolic dim has no profile.
    """
    bounds: dict[str, list[str]] = {"min": [], "opt": [], "max": []}
    for name, dims in inputs.items():
        missing = sorted({d for d in dims if isinstance(d, str) and d not in profiles})
        if missing:
            raise ValueError(f"input {name!r}: dynamic dimension(s) {', '.join(missing)} need "
                             "min/opt/max in tensorrt.profiles")
        if all(isinstance(d, int) for d in dims):
            continue
        for bound, shapes in bounds.items():
            sizes = (d if isinstance(d, int) else getattr(profiles[d], bound) for d in dims)
            shapes.append(f"{name}:{'x'.join(map(str, sizes))}")
    return {f"trt_profile_{b}_shapes": ",".join(s) for b, s in bounds.items() if s}


def _onnx_target(project: Project, provider: str, options: dict[str, Any]) -> Target:
    precision = options.get("precision", "fp32")
    opts = {k: v for k, v in options.items() if v is not None}
    label = precision
    if precision == "int8":
        label = f"int8-{opts.get('quantization', 'dynamic')}"
    else:
        for k in ("quantization", "calibration", "calibration_samples", "per_channel"):
            opts.pop(k, None)
    level = opts.get("optimization", "basic")
    # one ONNX artifact serves every ONNX Runtime provider that asks for the same options
    return Target(f"onnx-{label}-{level}", ONNX_STEPS[precision], "onnxruntime", precision, opts)


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


def fitted_options(project: Project, provider: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` plus, at their defaults, the declared fields of `providers.<provider>` its option model rejects
    beside them (calibration beside precision fp32: the int8-only fields), found by validating each declared
    field with `options`, not from a list; what `gpux tune` builds each candidate with and the lock is run with."""
    from pydantic import ValidationError

    block = getattr(project.config.providers, provider, None)
    if block is None:
        return dict(options)
    cls = type(block)
    flat = {k: v for k, v in options.items() if not isinstance(v, dict)}
    reset = {}
    for name, f in cls.model_fields.items():
        value, default = getattr(block, name), f.get_default(call_default_factory=True)
        if name in options or value == default:
            continue
        try:
            cls.model_validate({**flat, name: value})
        except ValidationError:
            reset[name] = default
    return {**options, **reset}


def _merged(current: Any, value: Any) -> Any:
    if isinstance(value, dict) and hasattr(current, "model_copy"):
        return current.model_copy(update=value)
    return value
