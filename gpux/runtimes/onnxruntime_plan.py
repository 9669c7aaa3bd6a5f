"""What ONNX Runtime's providers plan: the one portable ONNX artifact, at the options their blocks give."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpux.config.load import Project
from gpux.plan.targets import Target

if TYPE_CHECKING:
    from gpux.model.tensor import Tensor

# ONNX artifact precision -> build step that makes it from the source model
ONNX_STEPS = {"fp32": "optimize", "fp16": "float16", "int8": "quantize"}


def onnx_targets(project: Project, provider: str, inputs: dict[str, Tensor] | None = None) -> list[Target]:
    """ONNX Runtime execution providers (cuda, rocm, directml, coreml) load the portable ONNX artifact."""
    return [onnx_target({"optimization": "basic", "precision": "fp32"})]


def cpu_targets(project: Project, provider: str, inputs: dict[str, Tensor] | None = None) -> list[Target]:
    """The CPU's ONNX artifact is built at its block's options (optimization level, precision, int8 mode)."""
    return [onnx_target(getattr(project.config.providers, provider).model_dump(mode="json"))]


# The options that change the ONNX file, and those that change it only for int8; the rest of a block (how a session
# opens it, the runtime, threads) is not part of the artifact, so providers that run the same file share it.
FILE_OPTIONS = ("optimization", "precision")
INT8_OPTIONS = ("quantization", "calibration", "calibration_samples", "per_channel", "calibration_method", "keep_fp32")


def onnx_target(options: dict[str, Any]) -> Target:
    """The ONNX artifact at `options`; one serves every ONNX Runtime provider that asks for the same options."""
    precision = options.get("precision", "fp32")
    kept = FILE_OPTIONS + (INT8_OPTIONS if precision == "int8" else ())
    opts = {k: options[k] for k in kept if options.get(k) is not None}
    label = precision
    if precision == "int8":
        label = f"int8-{opts.get('quantization', 'dynamic')}"
    level = opts.get("optimization", "basic")
    return Target(id=f"onnx-{label}-{level}", kind=ONNX_STEPS[precision], provider="onnxruntime", precision=precision,
                  options=opts)
