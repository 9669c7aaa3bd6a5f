"""OpenVINO's names for gpux.yml's `openvino` block: the device to compile for, and the properties
`Core.compile_model` gets (the same at build, verification and run).

Nothing here imports openvino.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.model.tensor import Tensor
    from gpux.plan.targets import Target
    from gpux.providers.options import OpenVINOOptions

VIRTUAL = ("AUTO", "MULTI", "HETERO")


class DeviceMissing(RuntimeError):
    """The requested OpenVINO device is not present on this machine."""


# ---- devices ------------------------------------------------------------------------------------------
def split_device(spec: str) -> tuple[str, list[str]]:
    """'AUTO:GPU,CPU' -> ('AUTO', ['GPU', 'CPU']); 'GPU.1' -> ('', ['GPU.1']); 'AUTO' -> ('AUTO', [])."""
    head, sep, rest = spec.partition(":")
    if sep:
        return head, rest.split(",")
    return (spec, []) if spec in VIRTUAL else ("", [spec])


def _same(a: str, b: str) -> bool:
    """GPU matches GPU.0 / GPU.1; GPU.1 matches only GPU.1 (or a lone GPU)."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def resolve_device(spec: str, available: Sequence[str]) -> str:
    """The device string to compile for here: missing devices leave a priority list; none left raises."""
    virtual, wanted = split_device(spec)
    if virtual and not wanted:
        return spec
    here = [d for d in wanted if any(_same(d, a) for a in available)]
    if not here:
        seen = ", ".join(available) or "no device"
        raise DeviceMissing(f"OpenVINO device {spec} is not available on this machine (OpenVINO sees {seen})")
    return f"{virtual}:{','.join(here)}" if virtual else here[0]


def dropped(requested: str, execution: Sequence[str]) -> str | None:
    """Why OpenVINO did not take a device requested alone (AUTO/HETERO/MULTI lists may settle anywhere)."""
    virtual, wanted = split_device(requested)
    clean = [d.strip("()") for d in execution]
    if virtual or not clean or any(_same(wanted[0], d) for d in clean):
        return None
    return f"OpenVINO did not take {requested} (it would run on {', '.join(clean)})"


# ---- properties ---------------------------------------------------------------------------------------
def _text(value: Any) -> str | None:
    return None if value is None else str(value)


# OpenVINOOptions field -> (OpenVINO property, converter: the property's string, or None to leave it out).
OPENVINO_PROPERTIES: dict[str, tuple[str, Callable[[Any], str | None]]] = {
    "hint": ("PERFORMANCE_HINT", lambda v: v.upper()),
    "num_requests": ("PERFORMANCE_HINT_NUM_REQUESTS", _text),
    "streams": ("NUM_STREAMS", lambda v: None if v is None else str(v).upper()),
    "threads": ("INFERENCE_NUM_THREADS", _text),
}


def openvino_execution_precision(opts: OpenVINOOptions) -> str:
    """INFERENCE_PRECISION_HINT for `opts`: the explicit value, else bf16 for precision bf16, else f32."""
    if opts.inference_precision != "auto":
        return opts.inference_precision
    return "bf16" if opts.precision == "bf16" else "f32"


def execution_precision(target: Target) -> str:
    """The precision an OpenVINO IR computes at (the kind's `precision` step): its execution precision hint where
    below fp32; an int8 IR's is int8."""
    if target.precision == "int8":
        return target.precision
    from gpux.providers.options import OpenVINOOptions

    hint = openvino_execution_precision(OpenVINOOptions.model_validate(target.options))
    return {"bf16": "bf16", "f16": "fp16"}.get(hint, target.precision)


def openvino_properties(opts: OpenVINOOptions, cache_dir: str | None = None) -> dict[str, str]:
    """OpenVINO properties for `Core.compile_model(model, opts.device, properties)`.

    Verification and sessions compile with the same execution precision (INFERENCE_PRECISION_HINT), so
    what is verified is what runs; `cache_dir` (the artifact store's directory) becomes CACHE_DIR when
    `opts.cache` is on.
    """
    props = {name: value for field, (name, convert) in OPENVINO_PROPERTIES.items()
             if (value := convert(getattr(opts, field))) is not None}
    props["INFERENCE_PRECISION_HINT"] = openvino_execution_precision(opts)
    if opts.cache and cache_dir is not None:
        props["CACHE_DIR"] = str(cache_dir)
    return props


def compile_properties(opts: Any, intra_op: int, cache_dir: Path | None, device: str) -> dict[str, str]:
    """What `compile_model` gets, the same at build and run; runtime.threads.intra_op applies when
    `threads` is unset and the CPU plugin alone compiles."""
    props = openvino_properties(opts, cache_dir=None if cache_dir is None else str(cache_dir))
    return with_threads(props, intra_op if opts.threads is None else 0, device)


def with_threads(props: dict[str, str], threads: int, device: str) -> dict[str, str]:
    """`props` with INFERENCE_NUM_THREADS `threads` (runtime.threads.intra_op where the block sets none; 0: none)
    when the CPU plugin alone compiles for `device`."""
    if threads > 0 and split_device(device)[1] == ["CPU"]:
        props["INFERENCE_NUM_THREADS"] = str(threads)
    return props


# ---- planning and Triton ------------------------------------------------------------------------------
def openvino_targets(project: Project, provider: str, inputs: dict[str, Tensor] | None = None) -> list[Target]:
    """An OpenVINO IR at the block's precision; with runtime: onnxruntime, ONNX Runtime's portable ONNX artifact."""
    from gpux.plan.targets import Target
    from gpux.runtimes.onnxruntime_plan import onnx_targets

    o = getattr(project.config.providers, provider)
    if o.runtime == "onnxruntime":
        return onnx_targets(project, provider, inputs)
    label = f"int8-{o.int8_mode}" if o.precision == "int8" else o.precision  # the int8 variants apart
    return [Target(id=f"openvino-ir-{label}", kind="openvino-ir", provider=provider, precision=o.precision,
                   options=o.model_dump(mode="json"))]


def triton_parameters(o: OpenVINOOptions) -> dict[str, dict[str, str]]:
    """Triton's OpenVINO backend takes the compile properties as the model's string parameters."""
    out: dict[str, dict[str, str]] = {}
    for field, (prop, convert) in OPENVINO_PROPERTIES.items():
        value = convert(getattr(o, field))
        if value is not None:
            out[prop] = {"string_value": str(value)}
    return out
