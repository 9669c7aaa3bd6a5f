"""PyTorch sources: loading TorchScript and torch.export programs, running them as the FP32 reference, and
exporting them to ONNX.

Exporter: the TorchScript-based `torch.onnx.export(..., dynamo=False)`. The dynamo exporter (the default
since torch 2.9) needs `onnxscript`, which gpux does not depend on; it emits opset 18 and newer and would
have to be converted down to the pinned opset; and it cannot take a TorchScript module, the most common
PyTorch deployment file. The TorchScript exporter writes the pinned opset directly, names dynamic dims
after `dynamic_axes` (so the declared dim names are the ONNX graph's `dim_param`s), and also exports the
module of a torch.export program: that module refuses `.train()`, which the exporter calls, so it is
wrapped in a module that ignores it.

Example inputs: seeded random data by the declared inputs; symbolic dims take their resolved sizes
(benchmark.shapes / batch) but at least 2, since tracing at size 1 can bake broadcasting into the graph.
A model that rejects those sizes is traced at the resolved sizes instead.

The exported file is then normalised: IR version lowered to what the installed ONNX Runtime reads (never
below what the opsets need), outputs renamed to the declared names (or output_0, output_1, ...),
declared inputs the graph does not use put back as graph inputs, and models over protobuf's 2 GB limit
saved as `model.onnx` + `model.onnx.data` (the exporter itself writes one file per tensor there).
"""

from __future__ import annotations

import contextlib
import inspect
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from gpux.errors import BuildFailed, first_line, model_step
from gpux.optional import require

if TYPE_CHECKING:
    from gpux.arrays import Feeds, Outputs
    from gpux.model.tensor import Tensor
    from gpux.runtimes import Context

MAIN = "model.onnx"
EXPORTER = "torchscript"
MIN_TRACE_SIZE = 2


def _torch() -> Any:
    return require("torch", "torch")


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    """The exporter and torch.export warn about deprecations and tracing; gpux reports what matters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def system_temp() -> Iterator[None]:
    """The system's temp dir while torch's compiler stack is imported and runs. Inductor and Dynamo fix
    process-wide folders from the temp dir when first imported (precompiled headers, the Dynamo cache,
    TORCHINDUCTOR_CACHE_DIR); a build step runs with the temp dir in its scratch folder, deleted after the
    step, and a later compile in the same process (verification on other sizes, `run`) would point at it."""
    saved = tempfile.tempdir
    tempfile.tempdir = None
    try:
        yield
    finally:
        tempfile.tempdir = saved


# ---- loading and running ---------------------------------------------------------------------------
def load_module(path: str | Path, fmt: str) -> Any:
    """The source as a callable module on the CPU, in inference mode: TorchScript via `torch.jit.load`,
    a torch.export program (.pt2) via `torch.export.load(...).module()`."""
    torch = _torch()
    try:
        with _quiet_warnings(), system_temp():  # torch 2.13 marks torch.jit deprecated; .pt2 imports Dynamo
            if fmt == "torch_export":
                return torch.export.load(str(path)).module()  # inference form already: refuses .eval()
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:  # torch raises RuntimeError, zipfile and pickle errors alike
        other = "torchscript" if fmt == "torch_export" else "torch_export"
        raise BuildFailed(f"{path}: cannot load as {fmt}: {first_line(exc)}",
                          hint=f"check the file, or set model.format: {other} if it is that") from exc
    module.eval()
    return module


def load_program(path: str | Path) -> Any:
    """A torch.export program in the ATen dialect (what converters such as coremltools take)."""
    torch = _torch()
    with _quiet_warnings(), system_temp():
        return torch.export.load(str(path)).run_decompositions({})


def parameter_names(module: Any) -> list[str] | None:
    """The names of the module's forward() parameters, or None where they cannot be read."""
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is not None:  # TorchScript: the first argument is self
        return [a.name for a in schema.arguments][1:]
    try:
        return [p.name for p in inspect.signature(module.forward).parameters.values()
                if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError, AttributeError):
        return None


def input_order(module: Any, names: Sequence[str]) -> list[str]:
    """The order the module takes the inputs in: its forward() parameter order when every input name is a
    parameter name, else the given (declared) order."""
    params = parameter_names(module)
    if params and set(names) <= set(params):
        return [p for p in params if p in names]
    return list(names)


def to_tensor(value: Any) -> Any:
    import numpy as np

    return _torch().from_numpy(np.require(np.asarray(value), requirements=["C", "W"]))


def flatten(value: Any) -> list[Any]:
    """Model outputs as a flat list: tuples and lists in order, dicts by insertion order, None dropped."""
    if value is None:
        return []
    if isinstance(value, Mapping):
        return [x for v in value.values() for x in flatten(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in flatten(v)]
    return [value]


def to_array(value: Any) -> Any:
    import numpy as np

    torch = _torch()
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:  # numpy has no bfloat16
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def reference_runner(path: str | Path, fmt: str) -> Callable[[Feeds], Outputs]:
    """`run(feeds) -> outputs`: the PyTorch model itself under `torch.inference_mode()`. Feeds go in as
    positional arguments (see `input_order`); outputs come back flattened, as numpy arrays."""
    torch = _torch()
    module = load_module(path, fmt)

    def run(feeds: Feeds) -> Outputs:
        args = [to_tensor(feeds[n]) for n in input_order(module, list(feeds))]
        with torch.inference_mode():
            out = module(*args)
        return [to_array(x) for x in flatten(out)]

    return run


def example_inputs(module: Any, inputs: Mapping[str, Tensor], shapes: Mapping[str, int],
                   names: Sequence[str]) -> tuple[tuple[Any, ...], list[Any], dict[str, int]]:
    """Example tensors in `names` order, the flattened outputs they give, and the sizes of symbolic dims
    used: resolved sizes raised to at least MIN_TRACE_SIZE, else the resolved sizes as they are."""
    from gpux.model.inputs import synthetic

    torch = _torch()
    symbolic = {d for t in inputs.values() for d in (t.shape or ()) if isinstance(d, str)}
    raised = {**shapes, **{d: max(MIN_TRACE_SIZE, int(shapes.get(d, 1))) for d in symbolic}}
    tries = [raised] if raised == dict(shapes) else [raised, dict(shapes)]
    error: Exception | None = None
    for sizes in tries:
        feeds = synthetic(dict(inputs), sizes, 0)
        args = tuple(to_tensor(feeds[n]) for n in names)
        try:
            with torch.no_grad():
                out = flatten(module(*args))
        except Exception as exc:  # the model rejects these sizes (shape checks, guards)
            error = exc
            continue
        return args, out, {d: sizes.get(d, 1) for d in sorted(symbolic)}
    assert error is not None
    raise BuildFailed(f"the PyTorch model fails on example inputs of the declared shapes: {first_line(error)}",
                      hint="check inputs: in gpux.yml (order, dtype, shape), or set benchmark.shapes for "
                           "symbolic dims")


def output_names(declared: Mapping[str, Any] | None, count: int) -> list[str]:
    """The declared output names, or output_0.. when none are declared; a count mismatch is an error."""
    if not declared:
        return [f"output_{i}" for i in range(count)]
    if len(declared) != count:
        raise BuildFailed(f"the PyTorch model returns {count} output{'s' * (count != 1)} but gpux.yml declares "
                          f"{len(declared)} ({', '.join(declared)})",
                          hint="declare every output in order under outputs:, or none")
    return list(declared)


def dynamic_axes(tensors: Mapping[str, Any]) -> dict[str, dict[int, str]]:
    """{name: {axis: dim name}} for the symbolic dims (an unnamed dynamic dim gets `<name>_dim<axis>`)."""
    axes: dict[str, dict[int, str]] = {}
    for name, t in tensors.items():
        shape = getattr(t, "shape", None) or ()
        named = {i: d if isinstance(d, str) else f"{name}_dim{i}" for i, d in enumerate(shape)
                 if not isinstance(d, int)}
        if named:
            axes[name] = named
    return axes


# ---- export -----------------------------------------------------------------------------------------
@cache
def _exportable_type() -> type:
    torch = _torch()

    class Exportable(torch.nn.Module):  # type: ignore[name-defined]
        """A torch.export module for the TorchScript exporter, which calls .train(False) on what it gets."""

        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(*args)

        def train(self, mode: bool = True) -> Any:
            return self

    return Exportable


class Finished(TypedDict):
    """What normalising an exported model did (`finish`)."""

    ir_version: int
    ir_version_exported: NotRequired[int]  # lowered from it to what ONNX Runtime reads
    renamed_outputs: NotRequired[dict[str, str]]
    unused_inputs: NotRequired[list[str]]  # declared inputs the exporter dropped, put back
    external_data: bool


class ExportInfo(Finished):
    """An exported ONNX artifact's info."""

    main: str
    opset: int
    exporter: str
    torch: str
    source_format: str
    inputs: list[str]
    outputs: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    trace_sizes: dict[str, int]


def export_onnx(ctx: Context) -> ExportInfo:
    """PyTorch source → `model.onnx` at the pinned opset, with the declared input/output names and dims."""
    torch = _torch()
    opts = ctx.target.options
    fmt, opset = opts.get("source_format", "torchscript"), int(opts["opset"])
    module = load_module(ctx.src, fmt)
    names = input_order(module, list(ctx.inputs))
    args, outputs, sizes = example_inputs(module, ctx.inputs, ctx.shapes, names)
    declared = ctx.project.config.outputs
    outs = output_names(declared, len(outputs))
    axes = dynamic_axes({n: ctx.inputs[n] for n in names})
    if declared:
        axes.update(dynamic_axes(declared))
    raw = ctx.workdir / "export"
    raw.mkdir()
    model = _exportable_type()(module) if fmt == "torch_export" else module
    ctx.log(f"exporting {ctx.src.name} ({fmt}) to ONNX opset {opset} with torch {torch.__version__}")
    hint = "simplify the model for tracing, or export it to ONNX yourself and point model.source at the .onnx file"
    with model_step(f"torch.onnx.export cannot export {ctx.src.name}", hint=hint), _quiet_warnings(), \
            torch.no_grad():  # the exporter raises anything: unsupported ops, tracing failures
        torch.onnx.export(model, args, str(raw / MAIN), dynamo=False, opset_version=opset,
                          input_names=names, output_names=outs, dynamic_axes=axes or None)
    info = finish(raw / MAIN, ctx.workdir / MAIN, names, outs, ctx.inputs)
    shutil.rmtree(raw)
    return {"main": MAIN, "opset": opset, "exporter": EXPORTER, "torch": torch.__version__,
            "source_format": fmt, "inputs": names, "outputs": outs, "dynamic_axes": axes,
            "trace_sizes": sizes, **info}


def finish(src: Path, dst: Path, inputs: Sequence[str], outputs: Sequence[str], tensors: Mapping[str, Tensor],
           threshold: int | None = None) -> Finished:
    """Normalise an exported model (IR version, output names, unused inputs) and save it to `dst`: one
    file, or `dst` + `dst.data` when the tensors exceed `threshold` bytes (default: protobuf's limit)."""
    onnx = require("onnx")
    from gpux.runtimes.onnxruntime import EXTERNAL_THRESHOLD

    model = onnx.load(str(src))  # with its external data, if the exporter wrote any
    info: Finished = {"ir_version": model.ir_version, "external_data": False}
    limit = ort_ir_limit()
    if limit is not None and model.ir_version > limit:
        floor = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
        if floor <= limit:
            info["ir_version_exported"] = model.ir_version
            model.ir_version = info["ir_version"] = limit
    renamed = _rename_outputs(model, outputs)
    if renamed:
        info["renamed_outputs"] = renamed
    added = _restore_inputs(model, inputs, tensors)
    if added:
        info["unused_inputs"] = added
    external = model.ByteSize() > (EXTERNAL_THRESHOLD if threshold is None else threshold)
    onnx.save_model(model, str(dst), save_as_external_data=external, all_tensors_to_one_file=True,
                    location=dst.name + ".data", size_threshold=1024)
    onnx.checker.check_model(str(dst))
    info["external_data"] = external
    return info


def _rename_outputs(model: Any, names: Sequence[str]) -> dict[str, str]:
    """Graph outputs renamed to `names` in order, through Identity nodes (the exporter may name an output
    after an input or deduplicate a tensor returned twice)."""
    from onnx import helper

    graph = model.graph
    if len(graph.output) != len(names):
        got = ", ".join(o.name for o in graph.output)
        raise BuildFailed(f"the exported graph has {len(graph.output)} outputs ({got}), expected "
                          f"{len(names)} ({', '.join(names)})",
                          hint="outputs that are not tensors (ints, None, strings) do not export to ONNX")
    renamed = {}
    for out, want in zip(graph.output, names, strict=True):
        if out.name != want:
            graph.node.append(helper.make_node("Identity", [out.name], [want], name=f"gpux_output_{want}"))
            renamed[out.name] = want
            out.name = want
    return renamed


def _restore_inputs(model: Any, names: Sequence[str], tensors: Mapping[str, Tensor]) -> list[str]:
    """Declared inputs the exporter dropped because the graph does not use them, put back (unused) so every
    runtime accepts the same feeds."""
    from onnx import helper

    from gpux.formats import ONNX_DTYPES

    present = {i.name for i in model.graph.input}
    codes = {v: k for k, v in ONNX_DTYPES.items()}
    missing = [n for n in names if n not in present]
    for n in missing:
        t = tensors[n]
        shape = [d if isinstance(d, int) else (d or None) for d in (t.shape or ())]
        model.graph.input.append(helper.make_tensor_value_info(n, codes.get(t.dtype, 1), shape))
    return missing


def ort_ir_limit() -> int | None:
    """The newest ONNX IR version the installed ONNX Runtime loads (None: no ONNX Runtime here)."""
    from gpux.model.compat import ort_limits

    limits = ort_limits()
    return limits[0] if limits else None
