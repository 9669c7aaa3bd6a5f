"""Core ML: converts PyTorch sources into Core ML packages with coremltools, and runs them on macOS.

Formats: `model_format: mlprogram` (the default) writes an ML Program, `model.mlpackage` (a folder), with
intermediates in `compute_precision` (ct.precision.FLOAT16 / FLOAT32); `neuralnetwork` writes the older
`model.mlmodel`, whose fp16 is fp16 weight storage. TorchScript modules are converted as they load;
torch.export programs are first lowered to the ATen dialect (`run_decompositions({})`), as coremltools
requires.

Shapes: declared int dims are fixed. Symbolic dims become `ct.RangeDim`s (named after the dim, so inputs
that share a dim name share its size), bounded by `providers.tensorrt.profiles[dim]` (min, opt as the
default, max) when the model declares one, else 1 .. max(RANGE_MAX, resolved size) with the resolved size
(benchmark.shapes / batch, else 1) as the default: ML Programs refuse unbounded ranges. A torch.export
program narrows these to its own range constraints (a dim it fixed stays fixed). With
`static_shapes: true` every symbolic dim is fixed to its resolved size instead (what the Neural Engine
runs best).

Compression (ML Programs, iOS16/macOS13 and newer), post-training with `coremltools.optimize.coreml` on
weights of at least 2048 elements (coremltools' threshold: smaller ones cost more than they save):
`palettize` = k-means lookup tables of `compression_bits` (default 6), `linear_quantize` = symmetric
per-channel int8 (or int4 with `compression_bits: 4`), `prune` = magnitude pruning to 50 % sparsity.
Pruning and low-bit palettization cost accuracy that only a run on macOS can measure. With no
minimum_deployment_target, the lowest target the compression needs is used (iOS16, iOS18 for int4 and
3-bit tables).

Running: prediction needs macOS (Core ML is not on other systems), so builds elsewhere record the
package's spec but skip verification; the probe already reports "no device" off macOS.
"""

from __future__ import annotations

import contextlib
import io
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux.errors import ProviderUnavailable, debugging, model_step
from gpux.optional import require
from gpux.runtimes.coreml_spec import Compression, PackageInfo, describe
from gpux.runtimes.tensorrt import declared_profiles

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.config.load import Project
    from gpux.plan.targets import Target
    from gpux.providers.row import Runner
    from gpux.runtimes import Context, Published

MAIN = {"mlprogram": "model.mlpackage", "neuralnetwork": "model.mlmodel"}
RANGE_MAX = 1024  # upper bound of a symbolic dim without a declared profile
COMPUTE_UNITS = {"all": "ALL", "cpu_only": "CPU_ONLY", "cpu_and_gpu": "CPU_AND_GPU", "cpu_and_ne": "CPU_AND_NE"}
PRECISIONS = {"fp16": "FLOAT16", "fp32": "FLOAT32"}
PALETTE_BITS = 6  # palettize without compression_bits
PRUNE_SPARSITY = 0.5


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """coremltools writes "Failed to load ..." (no native Core ML off macOS), version warnings and progress
    bars to stderr: silence fd 2, flushing Python's buffer on both sides, and its Python warnings."""
    from gpux.runtimes.onnxruntime import quiet_stderr

    if debugging():
        yield
        return
    real = sys.stderr  # handlers that kept it write here, buffered: flushed while fd 2 is still silenced
    real.flush()
    with quiet_stderr():
        try:
            with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                yield
        finally:
            real.flush()


@cache
def ct() -> Any:
    with quiet():
        return require("coremltools", "coreml")


def on_macos() -> bool:
    return sys.platform == "darwin"


def _not_here() -> str:
    return f"Core ML prediction needs macOS; this is {sys.platform}"


# ---- build --------------------------------------------------------------------------------------------
def build_package(ctx: Context) -> PackageInfo:
    """PyTorch source → Core ML package (`model.mlpackage`, or `model.mlmodel` for neuralnetwork)."""
    from gpux.providers.options import CoreMLOptions
    from gpux.runtimes import torch_export as pt

    c = ct()
    fmt = ctx.target.options.get("source_format", "torchscript")
    opts = CoreMLOptions.model_validate({k: v for k, v in ctx.target.options.items()
                                         if k in CoreMLOptions.model_fields})
    module = pt.load_module(ctx.src, fmt)
    names = pt.input_order(module, list(ctx.inputs))
    _, outputs, _ = pt.example_inputs(module, ctx.inputs, ctx.shapes, names)
    outs = pt.output_names(ctx.project.config.outputs, len(outputs))
    source = pt.load_program(ctx.src) if fmt == "torch_export" else module
    bounds = program_bounds(source, names, ctx.inputs) if fmt == "torch_export" else None
    ranges = shape_ranges(ctx.project, ctx.inputs, ctx.shapes, bounds, ctx.target.options.get("profiles"))
    inputs = [c.TensorType(name=n, shape=_shape(ctx.inputs[n], ranges, ctx.shapes, opts.static_shapes),
                           dtype=_dtype(ctx.inputs[n].dtype)) for n in names]
    target = opts.minimum_deployment_target or _compression_target(opts)
    kwargs: dict[str, Any] = {
        "inputs": inputs, "convert_to": opts.model_format,
        "outputs": [c.TensorType(name=n, dtype=_out_dtype(o)) for n, o in zip(outs, outputs, strict=True)],
        "compute_units": getattr(c.ComputeUnit, COMPUTE_UNITS[opts.compute_units]),
        "minimum_deployment_target": getattr(c.target, target) if target else None,
    }
    if opts.model_format == "mlprogram":
        kwargs["compute_precision"] = getattr(c.precision, PRECISIONS[opts.compute_precision])
    ctx.log(f"converting {ctx.src.name} ({fmt}) with coremltools {c.__version__} to {opts.model_format}")
    hint = "check providers.coreml (minimum_deployment_target, compression), or leave coreml out of runtime.supported"
    # coremltools raises anything: unsupported ops, bad targets, shape errors
    with model_step(f"coremltools cannot convert {ctx.src.name}", hint=hint), quiet():
        model = c.convert(source, **kwargs)
        if opts.model_format == "neuralnetwork" and opts.compute_precision == "fp16":
            from coremltools.models.neural_network import quantization_utils

            model = quantization_utils.quantize_weights(model, nbits=16)
        compressed = compress(model, opts)
    main = ctx.workdir / MAIN[opts.model_format]
    with quiet():
        compressed.save(str(main))
        spec = c.utils.load_spec(str(main))  # what was written, not what was asked for
    return {"main": main.name, "coremltools": c.__version__, "source_format": fmt, "format": opts.model_format,
            "compute_units": opts.compute_units, "requested_precision": opts.compute_precision,
            "minimum_deployment_target": target, "compression": _compression_info(opts),
            "ranges": {d: list(r) for d, r in ranges.items()} if not opts.static_shapes else {},
            "static_shapes": opts.static_shapes, **describe(spec), "size": size_of(main)}


def shape_ranges(project: Project, inputs: Mapping[str, Any], shapes: Mapping[str, int],
                 bounds: Mapping[str, tuple[int, int | None]] | None = None,
                 profiles: Mapping[str, Mapping[str, int]] | None = None) -> dict[str, tuple[int, int, int]]:
    """(lower, default, upper) per symbolic dim name: `profiles` ({dim: {min, opt, max}}, as the plan put
    them in the target's options), else providers.tensorrt.profiles, else 1 .. RANGE_MAX with the resolved
    size as default; narrowed to `bounds` (what a torch.export program allows)."""
    if profiles is None:
        profiles = declared_profiles(project)
    out: dict[str, tuple[int, int, int]] = {}
    for t in inputs.values():
        for d in t.shape or ():
            if not isinstance(d, str) or d in out:
                continue
            if d in profiles:
                p = profiles[d]
                lower, default, upper = int(p["min"]), int(p["opt"]), int(p["max"])
            else:
                default = int(shapes.get(d, 1))
                lower, upper = 1, max(RANGE_MAX, default)
            lo, hi = (bounds or {}).get(d, (lower, upper))
            lower, upper = max(lower, lo), min(upper, hi if hi is not None else upper)
            upper = max(lower, upper)
            out[d] = (lower, min(max(default, lower), upper), upper)
    return out


def program_bounds(program: Any, names: list[str], inputs: Mapping[str, Any]) -> dict[str, tuple[int, int | None]]:
    """The sizes a torch.export program accepts for each declared symbolic dim: its range constraints
    (upper None = unbounded), or (n, n) where the program fixed the dim to n."""
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    out: dict[str, tuple[int, int | None]] = {}
    for name, user in zip(names, program.graph_signature.user_inputs, strict=False):
        val = nodes[user].meta.get("val") if user in nodes else None
        for d, size in zip(inputs[name].shape or (), getattr(val, "shape", ()), strict=False):
            if not isinstance(d, str):
                continue
            if isinstance(size, int):
                out[d] = (size, size)
                continue
            r = program.range_constraints.get(getattr(getattr(size, "node", None), "expr", None))
            if r is not None:
                out[d] = (int(r.lower), int(r.upper) if r.upper.is_finite else None)
    return out


def _shape(tensor: Any, ranges: Mapping[str, tuple[int, ...]], shapes: Mapping[str, int], static: bool) -> Any:
    c = ct()
    dims: list[Any] = []
    for d in tensor.shape or ():
        if isinstance(d, int):
            dims.append(d)
        elif static or d is None:
            dims.append(int(shapes.get(d or "", 1)))
        else:
            lower, default, upper = ranges[d]
            dims.append(lower if lower == upper else
                        c.RangeDim(lower_bound=lower, upper_bound=upper, default=default, symbol=d))
    return c.Shape(tuple(dims))


def _dtype(dtype: str) -> Any:
    """Core ML input types: float32, float16 (iOS16+), int32 (int64 and other ints narrow to it), bool."""
    import numpy as np

    kind = "int32" if dtype.startswith(("int", "uint")) else dtype if dtype in ("float16", "bool") else "float32"
    return np.dtype(kind).type


def _out_dtype(example: Any) -> Any:
    """Float outputs keep their PyTorch type (fp16 compute would otherwise return fp16 from iOS16 on);
    others are coremltools' choice."""
    import numpy as np

    kind = str(getattr(example, "dtype", ""))
    if kind == "torch.float16":
        return np.float16
    return np.float32 if kind in ("torch.float32", "torch.float64", "torch.bfloat16") else None


def _compression_target(opts: Any) -> str | None:
    """The oldest deployment target the requested compression needs (None: coremltools' default)."""
    if opts.compression == "none" or opts.model_format != "mlprogram":
        return None
    bits = opts.compression_bits
    if (opts.compression == "linear_quantize" and bits == 4) or (opts.compression == "palettize" and bits == 3):
        return "iOS18"
    return "iOS16"


def _compression_info(opts: Any) -> Compression | None:
    bits = opts.compression_bits
    kinds: dict[str, Compression] = {
        "palettize": {"method": "palettize", "mode": "kmeans", "bits": bits or PALETTE_BITS},
        "linear_quantize": {"method": "linear_quantize", "mode": "linear_symmetric", "bits": bits or 8},
        "prune": {"method": "prune", "mode": "magnitude", "target_sparsity": PRUNE_SPARSITY}}
    return None if opts.compression == "none" else kinds[opts.compression]


def compress(model: Any, opts: Any) -> Any:
    """Post-training weight compression of an ML Program (see the module docstring)."""
    if opts.compression == "none":
        return model
    import coremltools.optimize.coreml as cto

    if opts.compression == "palettize":
        op: Any = cto.OpPalettizerConfig(mode="kmeans", nbits=opts.compression_bits or PALETTE_BITS)
        return cto.palettize_weights(model, config=cto.OptimizationConfig(global_config=op))
    if opts.compression == "linear_quantize":
        dtype = "int4" if opts.compression_bits == 4 else "int8"
        op = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype=dtype)
        return cto.linear_quantize_weights(model, config=cto.OptimizationConfig(global_config=op))
    op = cto.OpMagnitudePrunerConfig(target_sparsity=PRUNE_SPARSITY)
    return cto.prune_weights(model, config=cto.OptimizationConfig(global_config=op))


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


# ---- running (macOS only) ----------------------------------------------------------------------------
def _runner(path: Path, compute_units: str) -> tuple[Callable[[Feeds], Outputs], Any, list[str]]:
    """(run(feeds) -> outputs, MLModel, output names) for a package, on macOS."""
    import numpy as np

    c = ct()
    with quiet():
        model = c.models.MLModel(str(path), compute_units=getattr(c.ComputeUnit, COMPUTE_UNITS[compute_units]))
    spec = model.get_spec()
    in_names = [f.name for f in spec.description.input]
    out_names = [f.name for f in spec.description.output]

    def run(feeds: Feeds) -> Outputs:
        if set(feeds) != set(in_names):  # names coremltools sanitised: same order
            feeds = dict(zip(in_names, feeds.values(), strict=True))
        prepared = {k: _core_ml_array(np.asarray(v)) for k, v in feeds.items()}
        result = model.predict(prepared)
        return [np.asarray(result[n]) for n in out_names]

    return run, model, out_names


def _core_ml_array(a: Any) -> Any:
    import numpy as np

    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype.kind in "iu" and a.dtype != np.int32:
        return a.astype(np.int32)
    return a


def verify_runner(artifact: Path, target: Target) -> Callable[[Feeds], Outputs] | str:
    """A runner for verification on macOS; elsewhere the reason it cannot run (verification is skipped)."""
    if not on_macos():
        return _not_here()
    run, _, _ = _runner(artifact, target.options.get("compute_units", "all"))
    return run


def open_runner(provider: str, project: Project, artifact: Published) -> Runner:
    """A Core ML session with the configured compute units; off macOS a clear error (the session records it
    and moves on)."""
    from gpux.providers import Runner

    if not on_macos():
        raise ProviderUnavailable(f"{provider}: a Core ML package cannot run here: {_not_here()}",
                                  hint="run it on a Mac, or choose another provider")
    units = getattr(project.config.providers, provider).compute_units
    run, model, names = _runner(artifact.main, units)
    return Runner(run=run, output_names=names, used=f"Core ML {units}", dropped=None,
                  details={"compute_units": units, "package": str(artifact.main),
                   "precision": artifact.info.get("precision")},
                  native=model)


def package_targets(project: Project, provider: str, fmt: str) -> list[Target]:
    """coremltools converts a PyTorch source directly into an ML Program package (TensorRT's profiles bound it)."""
    from gpux.plan.targets import Target

    o = getattr(project.config.providers, provider)
    profiles = declared_profiles(project)
    return [Target(id=f"coreml-package-{o.compute_precision}", kind="coreml-package", provider=provider,
                   precision=o.compute_precision,
                   options={**o.model_dump(mode="json"), "source_format": fmt, "profiles": profiles})]
