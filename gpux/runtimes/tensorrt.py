"""TensorRT: engines built through ONNX Runtime's TensorRT EP, keyed by the GPU they were built on."""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from gpux.machine import gpu_identity

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.model.tensor import Tensor
    from gpux.plan.targets import Target
    from gpux.providers.options import ProfileRange, TensorRTOptions
    from gpux.providers.row import Runner
    from gpux.runtimes import Context, Published

BLOCK = "tensorrt"  # the provider block whose `profiles` this runtime's planner reads (Core ML's too)
ENGINES = "engines"  # folder inside the artifact: engine cache, timing cache
CONTEXT_MODEL = "model_ctx.onnx"  # ONNX Runtime EP-context model pointing at the engine
# ONNX Runtime's graph optimization at the engine's build and verification: basic, the rewrites it applies before the
# graph is partitioned, to every EP's nodes (its extended and layout ones apply after, to nodes left to CPU and CUDA)
TRT_LEVEL = "basic"


def ep_options(opts: dict[str, Any], folder: Path, dump_context: bool) -> dict[str, str]:
    """TensorRT EP options for an artifact folder: engine/timing caches inside it, profiles, precision."""
    from gpux.providers.options import TensorRTOptions
    from gpux.runtimes.onnxruntime_options import ort_provider_options

    model = TensorRTOptions.model_validate({k: v for k, v in opts.items() if k != "profile_shapes"})
    out = ort_provider_options("tensorrt", model, str(folder / ENGINES))
    out.update(opts.get("profile_shapes") or {})
    if dump_context:
        out.update({"trt_dump_ep_context_model": "True", "trt_ep_context_file_path": str(folder),
                    "trt_dump_ep_context_embed_mode": "0"})
    return out


class EngineInfo(TypedDict):
    """A TensorRT artifact's info: the model ONNX Runtime opens, the engines built and the GPU they are for."""

    main: str  # the EP-context model (else the ONNX model the engine cache serves)
    engine_seconds: float
    engines: list[str]
    gpu: str
    compute_capability: str
    cuda_driver: str
    tensorrt: str | None


def build_engine(ctx: Context) -> EngineInfo:
    """Build the engine now (not on first run): an ONNX Runtime session on the TensorRT EP with the engine
    cache and EP-context dump pointed into the artifact folder, then one inference on seeded inputs."""
    from gpux.errors import BuildFailed
    from gpux.model.inputs import synthetic
    from gpux.runtimes.onnxruntime import create_session

    identity = gpu_identity(int(ctx.target.options.get("device_id") or 0))
    gpu = identity.get("gpu")
    if not gpu:
        raise BuildFailed(f"cannot build a TensorRT engine here: {identity.get('reason', 'no NVIDIA GPU')}")
    (ctx.workdir / ENGINES).mkdir()
    src = ctx.workdir / "model.onnx"
    shutil.copyfile(ctx.src, src)
    options = ep_options(ctx.target.options, ctx.workdir, dump_context=True)
    started = time.perf_counter()
    sess = create_session(src, "TensorrtExecutionProvider", options, level=TRT_LEVEL)
    if sess.used[:1] != ["TensorrtExecutionProvider"]:
        raise BuildFailed(f"ONNX Runtime did not take TensorrtExecutionProvider (providers: {sess.used})")
    sess.run(synthetic(ctx.inputs, ctx.shapes, 0))
    seconds = time.perf_counter() - started
    produced = sorted(p.name for p in ctx.workdir.glob("*_ctx.onnx"))
    main = produced[0] if produced else src.name
    if produced and produced[0] != CONTEXT_MODEL:
        (ctx.workdir / produced[0]).rename(ctx.workdir / CONTEXT_MODEL)
        main = CONTEXT_MODEL
    engines = sorted(p.name for p in (ctx.workdir / ENGINES).glob("*.engine"))
    if not engines:
        raise BuildFailed("TensorRT produced no engine file; see the build log with GPUX_DEBUG=1")
    return {"main": main, "engine_seconds": round(seconds, 3), "engines": engines, "gpu": gpu,
            "compute_capability": identity["compute_capability"], "cuda_driver": identity["cuda_driver"],
            "tensorrt": trt_version()}


def trt_version() -> str | None:
    from gpux.optional import version_of

    return version_of("tensorrt") or version_of("tensorrt-cu12") or version_of("tensorrt-cu13")


def verify_runner(artifact: Path, target: Target) -> Callable[[Feeds], Outputs] | str:
    from gpux.providers import probe
    from gpux.runtimes.onnxruntime import create_session

    avail = probe("tensorrt")
    if not avail.ok:
        return f"TensorRT cannot run here: {avail.reason}"
    sess = create_session(artifact, "TensorrtExecutionProvider", ep_options(target.options, artifact.parent, False),
                          level=TRT_LEVEL)
    return sess.run



def open_runner(provider: str, project: Project, artifact: Published) -> Runner:
    """The engine through ONNX Runtime's TensorRT EP, loading the EP-context model and its engine."""
    from gpux.runtimes.onnxruntime import open_session_runner

    opts = artifact.target.options
    threads = project.config.runtime.threads
    return open_session_runner(artifact.main, "TensorrtExecutionProvider", ep_options(opts, artifact.dir, False),
                               intra_op=threads.intra_op, inter_op=threads.inter_op)


# ---- planning and Triton ------------------------------------------------------------------------------
def tensorrt_targets(project: Project, provider: str, inputs: dict[str, Tensor] | None = None) -> list[Target]:
    """The ONNX artifact (int8: the calibrated QDQ model), then the engine built from it on the GPU."""
    from gpux.plan.targets import Target
    from gpux.runtimes.onnxruntime_plan import onnx_target

    t = getattr(project.config.providers, provider)
    # int8 engines are built from the calibrated QDQ model (explicit quantization)
    base_opts: dict[str, Any] = {"optimization": "basic", "precision": "fp32"}
    if t.precision == "int8":
        base_opts = {"optimization": "basic", "precision": "int8", "quantization": "static",
                     "calibration": t.calibration, "calibration_samples": t.calibration_samples}
    base = onnx_target(base_opts)
    opts = t.model_dump(mode="json")
    opts["profile_shapes"] = trt_profiles(project, t, inputs or {})
    return [base, Target(id=f"tensorrt-engine-{t.precision}", kind="tensorrt-engine", provider=provider,
                         precision=t.precision, options=opts, consumes=base.id)]


def declared_profiles(project: Project) -> dict[str, dict[str, int]]:
    """The dims' ranges the tensorrt block declares ({dim: {min, opt, max}}), which bound Core ML packages' too."""
    block: TensorRTOptions = getattr(project.config.providers, BLOCK)
    return {d: r.model_dump() for d, r in (block.profiles or {}).items()}


def trt_profiles(project: Project, t: TensorRTOptions, inputs: dict[str, Tensor]) -> dict[str, str]:
    """min/opt/max shapes for TensorRT: `tensorrt.profiles`, else `shapes:` ranges, else each symbolic dim
    fixed at its resolved size."""
    from gpux.plan.targets import resolve_shapes
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


TRITON_PRECISION = {"fp32": "FP32", "fp16": "FP16", "best": "FP16", "int8": "INT8"}


def triton_accelerator(t: TensorRTOptions) -> dict[str, str]:
    """The parameters of the TensorRT accelerator Triton's ONNX Runtime backend adds."""
    params = {"precision_mode": TRITON_PRECISION.get(t.precision, "FP32")}
    if t.workspace:
        params["max_workspace_size_bytes"] = str(int(t.workspace))
    return params
