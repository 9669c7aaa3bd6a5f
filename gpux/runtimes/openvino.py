"""OpenVINO: builds native IR (fp32, fp16 weights, NNCF int8) precompiled for its device, and opens it.

Shapes: int dims stay static, symbolic/unknown dims dynamic ("?"); NPU compiles static shapes only, so
there they take the resolved sizes (benchmark.shapes / batch / --shape, else 1).
Caches: the build compiles the IR for its device into the artifact (`ov_cache/`); sessions never write
into a published artifact: CACHE_DIR is `<store>/<model>/cache/openvino/`, seeded from it. Compiling a
read `ov.Model` names the blob by the model's hash (a path would be hashed instead, and it changes when
the build folder is published), so one folder serves every artifact of the model.
Precision: the execution precision (INFERENCE_PRECISION_HINT) is part of the artifact: f32 unless bf16/f16
is asked for (`precision: bf16` or `inference_precision`), never the device default (bf16 on CPUs with
AMX/AVX512-BF16). Verification compiles on CPU with the same hint sessions use, and both report what the
compiled model uses.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from gpux.errors import BuildFailed, MissingDependency, error_lines, model_step
from gpux.optional import require
from gpux.runtimes.openvino_int8 import NncfInfo, compress
from gpux.runtimes.openvino_options import (
    DeviceMissing,
    compile_properties,
    dropped,
    openvino_properties,
    resolve_device,
    split_device,
    with_threads,
)

MAIN = "model.xml"
CACHE = "ov_cache"  # precompiled blobs inside the artifact folder
STATIC_ONLY = ("NPU",)  # devices that compile static shapes only

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.model.tensor import Tensor
    from gpux.plan.targets import Target
    from gpux.providers.options import OpenVINOOptions
    from gpux.providers.row import Runner
    from gpux.runtimes import Context, Published


def ov() -> Any:
    return require("openvino")


def failures() -> tuple[type[Exception], ...]:
    """What OpenVINO raises on a model, layout or device it cannot take: RuntimeError (its C++ exceptions, from
    reading, compiling and pre-processing) and its frontends' failures (Exception subclasses of their own)."""
    from openvino import frontend

    return (RuntimeError, frontend.GeneralFailure, frontend.OpConversionFailure, frontend.OpValidationFailure,
            frontend.NotImplementedFailure, frontend.InitializationFailure)


@cache
def core() -> Any:
    """One Core per process: plugins load once, compiled models share it."""
    return ov().Core()


NOISE = ("Exception from", "Check '", "[ONNX Frontend]", "While validating", "Summary:", "FrontEnd API failed",
         "Model wasn't fully converted")


def reason(exc: BaseException) -> str:
    """The informative lines of an OpenVINO error (they open with source locations): each failed operation
    with the frontend's own message, else the last line that is not a location."""
    lines = error_lines(exc)
    rules: list[list[str]] = []
    for x in lines:
        if x.startswith("--"):
            body = x.lstrip("- ").strip()
            if not body.startswith("Conversion is failed for"):
                rules.append([body.removesuffix(" with a message:")])
        elif rules and not x.startswith(NOISE):
            rules[-1].append(x)
    if rules:
        return "; ".join(": ".join(r) for r in rules)[:300]
    useful = [x for x in lines if not x.startswith(NOISE)]
    return (useful or lines or [type(exc).__name__])[-1][:300]


# ---- build --------------------------------------------------------------------------------------------
class Precompiled(TypedDict, total=False):
    """The IR compiled for its device at build time (`ov_cache/`), or why not."""

    precompiled: str | None  # the folder of blobs in the artifact; None: none kept
    precompile_skipped: str
    compiled_for: str
    compile_seconds: float
    cached_compile_seconds: float
    execution_devices: list[str]
    properties: dict[str, str]  # as compiled, but the cache folder
    inference_precision: str | None


class IRInfo(NncfInfo, Precompiled):
    """An OpenVINO IR's info: OpenVINO, the device and precision, the outputs in order, the input shapes, the
    conversion's time; NNCF's int8 and the precompiled blobs."""

    main: str
    openvino: str
    device: str
    precision: str
    outputs: list[str]
    static_shapes: bool
    shapes: dict[str, str]
    convert_seconds: float


def build_ir(ctx: Context) -> IRInfo:
    """ONNX -> OpenVINO IR (model.xml/.bin) at the target's precision, precompiled into `ov_cache/`."""
    from gpux.model.io import read_io
    from gpux.providers.options import OpenVINOOptions

    o = ov()
    opts = OpenVINOOptions.model_validate(ctx.target.options)
    static = any(d.startswith(STATIC_ONLY) for d in split_device(opts.device)[1])
    shapes = _input_shapes(ctx.inputs, ctx.shapes, static, ctx.project.config.shapes) or None
    started = time.perf_counter()
    # the converter raises its frontends' failures, its own BasicError tree, AssertionError and RuntimeError alike
    with model_step(f"OpenVINO cannot convert {ctx.src.name}", reason=reason,
                    hint="run it with ONNX Runtime (provider cpu), or drop openvino from runtime.supported"):
        model = o.convert_model(str(ctx.src), input=shapes)
    outputs = [t.name for t in read_io(ctx.src, check=False).outputs]
    model = _in_order(model, outputs)
    if opts.layout:
        model = _with_layout(model, opts.layout)
    info: IRInfo = {"main": MAIN, "openvino": o.__version__, "device": opts.device,
                    "precision": opts.precision, "outputs": outputs, "static_shapes": static,
                    "shapes": {p.get_any_name(): str(p.get_partial_shape()) for p in model.inputs},
                    "convert_seconds": round(time.perf_counter() - started, 4)}
    # NNCF's own errors (no common base), or an import broken by another package
    with model_step(f"NNCF int8 ({opts.int8_mode}) failed", reason=lambda exc: f"{type(exc).__name__}: {reason(exc)}"):
        model, nncf = compress(ctx, model, opts)
    info |= nncf
    o.save_model(model, str(ctx.workdir / MAIN), compress_to_fp16=opts.precision == "fp16")
    info |= _precompile(ctx, opts)
    return info


def _input_shapes(inputs: Mapping[str, Tensor], shapes: Mapping[str, int], static: bool,
                  ranges: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """PartialShape per input: declared ints static, names/None dynamic (-1; min..max where `shapes:`
    declares a range), or resolved when `static`."""
    def size(d: Any) -> Any:
        if isinstance(d, int):
            return d
        if static:
            return int(shapes.get(d, 1)) if d else 1
        bound: Any = (ranges or {}).get(d or "")
        return ov().Dimension(bound.min, bound.max) if hasattr(bound, "min") else -1

    return {name: ov().PartialShape([size(d) for d in t.shape]) for name, t in inputs.items()
            if t.shape is not None}


def _in_order(model: Any, names: Sequence[str]) -> Any:
    """Results in the ONNX graph's output order (the frontend keeps it; this makes it certain)."""
    order = output_order(model, names)
    if order == list(range(len(model.outputs))) or model.get_sinks():
        return model
    results = model.get_results()
    return ov().Model([results[i] for i in order], model.get_parameters(), model.friendly_name)


def _with_layout(model: Any, layouts: Mapping[str, str]) -> Any:
    o = ov()
    ppp = o.preprocess.PrePostProcessor(model)
    try:
        for name, layout in layouts.items():
            ppp.input(name).model().set_layout(o.Layout(layout))
        return ppp.build()
    except failures() as exc:
        raise BuildFailed(f"providers.openvino.layout: {reason(exc)}",
                          hint=f"inputs are {', '.join(p.get_any_name() for p in model.inputs)}") from exc


def _precompile(ctx: Context, opts: OpenVINOOptions) -> Precompiled:
    """Compile once for the target device, cache on; then again to time a cached load."""
    c = core()
    try:
        device = resolve_device(opts.device, c.available_devices)
    except DeviceMissing as exc:
        return {"precompiled": None, "precompile_skipped": f"{exc}; sessions compile on first use or fall back"}
    cache_dir = ctx.workdir / CACHE if opts.cache else None
    props = compile_properties(opts, ctx.project.config.runtime.threads.intra_op, cache_dir, device)
    xml = str(ctx.workdir / MAIN)
    try:
        started = time.perf_counter()
        compiled = c.compile_model(c.read_model(xml), device, props)
        cold = time.perf_counter() - started
    except failures() as exc:
        raise BuildFailed(f"OpenVINO cannot compile the IR for {device}: {reason(exc)}") from exc
    out: Precompiled = {
        "compiled_for": device, "compile_seconds": round(cold, 4),
        "execution_devices": [str(d) for d in compiled.get_property("EXECUTION_DEVICES")],
        "properties": {k: v for k, v in props.items() if k != "CACHE_DIR"},
        "inference_precision": _precision(compiled),
    }
    del compiled
    if cache_dir is None:
        return {**out, "precompiled": None, "precompile_skipped": "providers.openvino.cache is off"}
    started = time.perf_counter()
    c.compile_model(c.read_model(xml), device, props)
    out["cached_compile_seconds"] = round(time.perf_counter() - started, 4)
    ctx.log(f"{ctx.target.id}: compiled for {device} in {cold:.3f}s cold, "
            f"{out['cached_compile_seconds']:.3f}s from the cache")
    return {**out, "precompiled": CACHE}


def _precision(compiled: Any) -> str | None:
    with contextlib.suppress(*failures()):  # not every device reports it
        return str(compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name())
    return None


# ---- run ----------------------------------------------------------------------------------------------
class Requests:
    """One InferRequest of a compiled model; `run(feeds)` returns outputs in `order`.

    `infer` copies outputs out of the request (share_outputs=False), so results stay valid after the
    next call. Inputs are copied in too: with share_inputs=True the CPU plugin (2026.4) keeps the
    caller's buffer bound to the stream, and the next request on the same compiled model from another
    InferRequest or an AsyncInferQueue writes its input into that caller's array.
    """

    def __init__(self, compiled: Any, order: Sequence[int]) -> None:
        self.request, self.order = compiled.create_infer_request(), list(order)

    def run(self, feeds: Feeds) -> Outputs:
        values = self.request.infer(feeds).to_tuple()
        return [values[i] for i in self.order]

    def close(self) -> None:
        self.request = None


def output_order(model: Any, names: Sequence[str]) -> list[int]:
    """Index of each named output among a model's outputs (OpenVINO keeps the ONNX names)."""
    ports = list(model.outputs)
    found = [next((i for i, p in enumerate(ports) if n in p.get_names()), -1) for n in names]
    return list(range(len(ports))) if -1 in found or len(found) != len(ports) else found


def verify_runner(artifact: Path, target: Target) -> Callable[[Feeds], Outputs] | str:
    """The IR compiled on CPU at the execution precision sessions use (what runs is what is verified)."""
    from gpux.providers.options import OpenVINOOptions

    try:
        c = core()
    except MissingDependency as exc:
        return exc.message
    if "CPU" not in c.available_devices:
        return "OpenVINO has no CPU device here to verify on"
    props = openvino_properties(OpenVINOOptions.model_validate(target.options))
    try:
        compiled = c.compile_model(c.read_model(str(artifact)), "CPU", props)
    except failures() as exc:
        raise BuildFailed(f"OpenVINO cannot compile {artifact.name} on CPU: {reason(exc)}") from exc
    return Requests(compiled, range(len(compiled.outputs))).run


def runtime_cache(artifact_dir: Path) -> Path:
    """`<store>/<model>/cache/openvino`, seeded with the precompiled blobs of the artifact in `artifact_dir`.

    Seeds are hard links where the file system allows (a blob holds the weights: no second copy), else
    copies. OpenVINO replaces a blob it cannot load by a new file rather than writing into it, so the
    artifact's bytes stay as published; were that ever to change, the manifest check would flag the
    artifact as damaged and it would be rebuilt, never trusted.
    """
    folder = (artifact_dir.parent / "cache" / "openvino").resolve()
    folder.mkdir(parents=True, exist_ok=True)
    seed = artifact_dir / CACHE
    for blob in seed.iterdir() if seed.is_dir() else ():
        dst = folder / blob.name
        if blob.is_file() and not (dst.is_file() and dst.stat().st_size == blob.stat().st_size):
            tmp = folder / f".{blob.name}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            try:
                os.link(blob, tmp)
            except OSError:
                shutil.copyfile(blob, tmp)
            os.replace(tmp, dst)
    return folder


def opening(project: Project, provider: str) -> dict[str, str]:
    """The properties a session compiles the IR with on this machine (besides its cache folder)."""
    opts: OpenVINOOptions = getattr(project.config.providers, provider)
    threads = project.config.runtime.threads.intra_op if opts.threads is None else 0
    return with_threads(openvino_properties(opts), threads, opts.device)


def open_runner(provider: str, project: Project, artifact: Published) -> Runner:
    """Compile the artifact on `providers.openvino.device`; raises when that device is missing or fails
    (the session records it and falls back). `used` names the EXECUTION_DEVICES."""
    opts: OpenVINOOptions = getattr(project.config.providers, provider)
    threads = project.config.runtime.threads.intra_op if opts.threads is None else 0
    outputs = artifact.info.get("outputs")  # as the build recorded them (IRInfo)
    return open_compiled_runner(artifact.main, opts.device, openvino_properties(opts), threads=threads,
                                cache=opts.cache, names=[str(n) for n in outputs] if isinstance(outputs, list) else [],
                                label=artifact.target.id)


def open_compiled_runner(model: Path | str, device: str, properties: dict[str, str], *, threads: int = 0,
                         cache: bool = True, names: list[str] | None = None, label: str = "the model") -> Runner:
    """Compile the IR at `model` for `device` (a providers.openvino.device spec, resolved against the devices
    present) with `properties` (openvino_properties, without a cache folder). `threads`: runtime.threads.intra_op
    where the block sets none (it applies when the CPU plugin alone compiles); `cache`: a runtime cache beside the
    artifact; `names`: the outputs in order; `label`: the artifact's id, for errors. The runner's `recipe` is
    these arguments, plain values: this call again opens the same compiled model (gpux/serve/record.py)."""
    from gpux.providers.row import Recipe, Runner

    recipe = {"model": str(model), "device": device, "properties": dict(properties), "threads": threads,
              "cache": cache, "names": names, "label": label}
    c = core()
    resolved = resolve_device(device, list(c.available_devices))
    cache_dir, cache_state = None, "off (providers.openvino.cache: false)"
    try:
        cache_dir = runtime_cache(Path(model).parent) if cache else None
    except OSError as exc:
        cache_state = f"off (cannot write the cache folder: {exc})"
    props = with_threads({**properties, **({"CACHE_DIR": str(cache_dir)} if cache_dir is not None else {})},
                         threads, resolved)
    before = set(cache_dir.glob("*.blob")) if cache_dir else set()
    started = time.perf_counter()
    try:
        compiled = c.compile_model(c.read_model(str(model)), resolved, props)
    except failures() as exc:
        raise RuntimeError(f"OpenVINO cannot compile {label} for {resolved}: {reason(exc)}") from exc
    seconds = time.perf_counter() - started
    if cache_dir is not None:
        cache_state = "written (cold compile)" if set(cache_dir.glob("*.blob")) - before else "loaded"
    execution = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
    names = list(names or [])
    if len(names) != len(compiled.outputs):
        names = [p.get_any_name() for p in compiled.outputs]
    requests = Requests(compiled, order := output_order(compiled, names))
    details = {"device": device, "compiled_for": resolved, "execution_devices": execution,
               "properties": props, "compile_seconds": round(seconds, 4), "cache": cache_state,
               "inference_precision": _precision(compiled), "output_order": order,
               "optimal_requests": compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"),
               "opened": {k: v for k, v in props.items() if k != "CACHE_DIR"}}
    return Runner(run=requests.run, output_names=names, used="OpenVINO " + ",".join(execution),
                  dropped=dropped(device, execution), details=details, close=requests.close, native=compiled,
                  binder=lambda feeds, n: bound_requests(compiled, feeds, n),
                  recipe=Recipe("gpux.runtimes.openvino:open_compiled_runner", recipe))


def bound_requests(compiled: Any, feeds: Feeds, n: int) -> list[Callable[[], object]]:
    """`n` zero-argument callables, one InferRequest each with its inputs set once (copied in): a call is
    just `infer()`, outputs stay in the request (what benchmark_app measures)."""
    out = []
    for _ in range(n):
        request = compiled.create_infer_request()
        for name, value in feeds.items():
            request.set_tensor(name, ov().Tensor(value.copy()))
        out.append(request.infer)
    return out
