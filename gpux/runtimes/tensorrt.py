"""TensorRT: engines built through ONNX Runtime's TensorRT EP, keyed by the GPU they were built on."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from gpux.machine import gpu_identity

ENGINES = "engines"  # folder inside the artifact: engine cache, timing cache
CONTEXT_MODEL = "model_ctx.onnx"  # ONNX Runtime EP-context model pointing at the engine


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


def build_engine(ctx: Any) -> dict[str, Any]:
    """Build the engine now (not on first run): an ONNX Runtime session on the TensorRT EP with the engine
    cache and EP-context dump pointed into the artifact folder, then one inference on seeded inputs."""
    from gpux.errors import BuildFailed
    from gpux.model.inputs import synthetic
    from gpux.runtimes.onnxruntime import create_session

    identity = gpu_identity(int(ctx.target.options.get("device_id") or 0))
    if not identity.get("gpu"):
        raise BuildFailed(f"cannot build a TensorRT engine here: {identity.get('reason', 'no NVIDIA GPU')}")
    (ctx.workdir / ENGINES).mkdir()
    src = ctx.workdir / "model.onnx"
    shutil.copyfile(ctx.src, src)
    options = ep_options(ctx.target.options, ctx.workdir, dump_context=True)
    started = time.perf_counter()
    sess = create_session(src, "TensorrtExecutionProvider", options)
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
    return {"main": main, "engine_seconds": round(seconds, 3), "engines": engines, **identity,
            "tensorrt": trt_version()}


def trt_version() -> str | None:
    from gpux.optional import version_of

    return version_of("tensorrt") or version_of("tensorrt-cu12") or version_of("tensorrt-cu13")


def verify_runner(artifact: Path, target: Any) -> Any:
    from gpux.providers import probe
    from gpux.runtimes.onnxruntime import create_session

    avail = probe("tensorrt")
    if not avail.ok:
        return f"TensorRT cannot run here: {avail.reason}"
    sess = create_session(artifact, "TensorrtExecutionProvider", ep_options(target.options, artifact.parent, False))
    return sess.run



def open_runner(provider: str, project: Any, artifact: Any) -> Any:
    """The engine through ONNX Runtime's TensorRT EP, loading the EP-context model and its engine."""
    from gpux.runtimes.onnxruntime import open_session_runner

    opts = artifact.manifest["target"]["options"]
    return open_session_runner(artifact.main, "TensorrtExecutionProvider", ep_options(opts, artifact.dir, False),
                               project.config.runtime.threads)
