"""Config + CLI/env overrides + host facts → which providers to try, in order, and the targets each needs."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpux.config.load import Project
from gpux.config.problems import did_you_mean
from gpux.config.schema import PROVIDERS
from gpux.errors import UsageError

if TYPE_CHECKING:
    from gpux.providers.options import ProfileRange

ENV_PROVIDER = "GPUX_PROVIDER"

# what an explicitly requested provider falls back to, before cpu
FALLBACK = {
    "tensorrt": ("cuda",),
    "cuda": (),
    "rocm": (),
    "coreml": (),
    "mps": (),
    "directml": (),
    "openvino": (),
    "cpu": (),
}

# ONNX artifact precision -> build step that makes it from the source model
ONNX_STEPS = {"fp32": "optimize", "fp16": "float16", "int8": "quantize"}


@dataclass(frozen=True)
class Target:
    """One artifact to build: what makes it, from what, with which resolved options."""

    id: str  # human-readable, also the artifact folder's prefix, e.g. onnx-fp16-basic, openvino-ir-int8-quantize
    step: str  # optimize | float16 | quantize | openvino-ir | tensorrt-engine | coreml-package
    provider: str
    precision: str
    options: dict[str, Any]
    consumes: str = "source"  # "source" or another target's id

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "step": self.step, "provider": self.provider, "precision": self.precision,
                "consumes": self.consumes, "options": self.options}


@dataclass(frozen=True)
class Selection:
    """The ordered providers to try and where that order came from."""

    chain: tuple[str, ...]
    source: str  # --provider | GPUX_PROVIDER | gpux use | runtime.backend | gpux.lock.json | auto
    strict: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"chain": list(self.chain), "source": self.source, "strict": self.strict,
                "notes": list(self.notes)}


def parse_request(value: str, source: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(","))
    if not all(names):
        raise UsageError(f"{source}: {value!r} has an empty provider name; expected e.g. cuda,cpu")
    if "auto" in names and len(names) > 1:
        raise UsageError(f"{source}: 'auto' stands alone; list providers instead, e.g. cuda,openvino,cpu")
    for n in names:
        if n not in (*PROVIDERS, "auto"):
            raise UsageError(f"{source}: unknown provider {n!r}{did_you_mean(n, (*PROVIDERS, 'auto'))}; "
                             f"expected one of auto, {', '.join(PROVIDERS)}")
    return names or ("auto",)


def select(project: Project, provider: str | None = None, strict: bool = False,
           locked: str | None = None, saved: str | None = None) -> Selection:
    """Precedence: --provider > GPUX_PROVIDER > the provider `gpux use` saved (`saved`, see choice.py) >
    runtime.backend > the provider `gpux tune` locked for this machine (`locked`) > auto. A command's
    --provider is never remembered: the next command selects afresh."""
    cfg = project.config
    strict = strict or not cfg.runtime.fallback
    supported = cfg.runtime.supported
    notes: list[str] = []
    if provider:
        request, source = parse_request(provider, "--provider"), "--provider"
    elif os.environ.get(ENV_PROVIDER):
        request, source = parse_request(os.environ[ENV_PROVIDER], ENV_PROVIDER), ENV_PROVIDER
    elif saved:
        request, source = (saved,), "gpux use"
    elif cfg.runtime.backend != ("auto",):
        request, source = cfg.runtime.backend, "runtime.backend"
    elif locked:
        request, source = (locked,), "gpux.lock.json"
    else:
        request, source = ("auto",), "auto"
    if supported and request != ("auto",):
        bad = [p for p in request if p not in supported]
        if bad:
            raise UsageError(f"{source}: {', '.join(bad)} is not supported by model {project.name!r} "
                             f"(runtime.supported: {', '.join(supported)})",
                             hint=f"use one of {', '.join(supported)}")
    if request == ("auto",):
        chain = tuple(p for p in PROVIDERS if not supported or p in supported)
    elif len(request) == 1:
        chain = (request[0], *FALLBACK[request[0]])
        if not strict and "cpu" not in chain:
            chain = (*chain, "cpu")
    else:
        chain = request if strict or "cpu" in request else (*request, "cpu")
    if supported:
        chain = tuple(p for p in chain if p in supported) or chain[:1]
    if strict and request == ("auto",):
        notes.append("strict with backend auto: the best available provider is used; none → exit 4")
    return Selection(chain, source, strict, tuple(notes))


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
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.providers import runtime_of

    fmt = source_format(project)
    if fmt not in TORCH_FORMATS:
        return _targets(project, provider, inputs)
    if provider in TORCH_DEVICES and runtime_of(project, provider) == "torch":
        return [torch_target(project, provider, fmt)]
    if provider == "coreml":  # coremltools converts PyTorch directly into an ML Program package
        o = project.config.providers.coreml
        profiles = {d: r.model_dump() for d, r in project.config.providers.tensorrt.profiles.items()}
        return [Target(f"coreml-package-{o.compute_precision}", "coreml-package", provider, o.compute_precision,
                       {**o.model_dump(mode="json"), "source_format": fmt, "profiles": profiles})]
    export = Target("onnx-export", "torch-export", "torch", "fp32",
                    {"opset": EXPORT_OPSET, "source_format": fmt})
    out = [export]
    for t in _targets(project, provider, inputs):
        out.append(replace(t, consumes=export.id) if t.consumes == "source" else t)
    return out


EXPORT_OPSET = 17  # pinned: the ONNX opset PyTorch sources are exported at
TORCH_DEVICES = ("cpu", "cuda", "rocm", "mps")  # providers PyTorch itself can run on (runtime: torch)
GPU_COMPILE = ("cuda", "rocm")  # compile: auto means torch.compile here, eager elsewhere


def torch_target(project: Project, provider: str, fmt: str) -> Target:
    """PyTorch runs the source on `provider`'s device: `compile: auto` resolved, the device index recorded."""
    block = getattr(project.config.providers, provider)
    t = block.torch
    mode = t.compile if t.compile != "auto" else ("default" if provider in GPU_COMPILE else "off")
    opts = {**t.model_dump(mode="json"), "compile": mode, "device": provider,
            "device_id": int(getattr(block, "device_id", 0) or 0), "source_format": fmt}
    label = "eager" if mode == "off" else mode
    return Target(f"torch-{provider}-{t.precision}-{label}", "torch-module", provider, t.precision, opts)


def _targets(project: Project, provider: str, inputs: dict[str, Any] | None = None) -> list[Target]:
    cfg = project.config
    if provider == "openvino" and cfg.providers.openvino.runtime == "onnxruntime":
        return [_onnx_target(project, provider, {"optimization": "basic", "precision": "fp32"})]
    if provider == "openvino":
        o = cfg.providers.openvino
        label = f"int8-{o.int8_mode}" if o.precision == "int8" else o.precision  # the int8 variants apart
        return [Target(f"openvino-ir-{label}", "openvino-ir", provider, o.precision, o.model_dump(mode="json"))]
    if provider == "cpu":
        return [_onnx_target(project, provider, cfg.providers.cpu.model_dump(mode="json"))]
    if provider == "tensorrt":
        t = cfg.providers.tensorrt
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
    # ORT GPU EPs (cuda, rocm, directml, coreml) load the portable ONNX artifact
    return [_onnx_target(project, provider, {"optimization": "basic", "precision": "fp32"})]


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
    """The same project with fields of `providers.<provider>` replaced (fields it lacks are left alone)."""
    block = getattr(project.config.providers, provider)
    update = {k: v for k, v in update.items() if hasattr(block, k) and getattr(block, k) != v}
    if not update:
        return project
    providers = project.config.providers.model_copy(update={provider: block.model_copy(update=update)})
    return dataclasses.replace(project, config=project.config.model_copy(update={"providers": providers}))
