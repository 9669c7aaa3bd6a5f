"""OpenVINO int8 by NNCF: post-training quantization (NNCF's preset and bias correction as asked, the layers
`keep_fp32` names or ranks left in fp32 as NNCF's ignored scope), int8 weight compression, or accuracy-aware
quantization that keeps the declared cosine by leaving in fp32 the layers that break it.

`keep_fp32` as a count or fraction takes the layers ONNX Runtime's QDQ debugger ranks most sensitive on the same
calibration samples (gpux.runtimes.onnxruntime_int8; weights per channel, minmax ranges, as NNCF's defaults): one
measured ranking per model and samples, shared with the cpu provider's builds and reported as one list, and no
second NNCF quantization to rank on. The IR keeps the ONNX node names (a Conv's convolution is `NAME/WithoutBiases`,
its bias `NAME`), so each ranked layer maps to the OpenVINO operation NNCF would quantize.

Accuracy-aware (`int8_mode: accuracy`): nncf.quantize_with_accuracy_control on the calibration feeds, validated
on the inputs verification will use (verify.data, else the seeded generated ones), the metric being the pooled
cosine of the outputs against the FP32 reference's (as verification computes it, worst output), allowed to drop
by 1 - min_cosine less a margin (MARGIN of it) so that the verification after the build passes.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from gpux.errors import BuildFailed, debugging
from gpux.optional import require

if TYPE_CHECKING:
    from gpux.arrays import Feeds
    from gpux.providers.options import OpenVINOOptions
    from gpux.runtimes import Context
    from gpux.runtimes.onnxruntime_int8 import Kept

MARGIN = 0.1  # share of the allowed cosine drop kept back from NNCF


class AccuracyGoal(TypedDict):
    min_cosine: float
    max_drop: float  # the validation cosine NNCF may lose
    validation: str  # where the validation inputs come from (verify.data, or generated)
    validation_samples: int


class NncfInfo(TypedDict, total=False):
    """What NNCF's int8 adds to an IR's info: NNCF, the mode and its time, the int8 operations (a warning where
    none), the calibration samples, and as the mode asks `keep_fp32`'s record, the layers left int8 and fp32, and
    the accuracy-aware mode's goal."""

    nncf: str
    int8_mode: str
    nncf_seconds: float
    quantized_ops: int
    int8_warning: str
    calibration_samples: int
    keep_fp32: Kept
    int8_layers: int
    fp32_layers: int
    accuracy_goal: AccuracyGoal
LAYERS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData", "MatMul")


def compress(ctx: Context, model: Any, opts: OpenVINOOptions) -> tuple[Any, NncfInfo]:
    """int8 by NNCF per `int8_mode`, and what it did and how long it took (nothing at another precision). NNCF's
    own errors propagate (the caller words them)."""
    if opts.precision != "int8":
        return model, {}
    mode = opts.int8_mode
    feeds = None if mode == "weights" else ctx.calibration()
    extra: NncfInfo = {}
    started = time.perf_counter()
    with nncf_quietly() as nncf:
        if feeds is None:
            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)
        elif mode == "quantize":
            model, extra = _quantize(nncf, ctx, model, opts, feeds)
        else:
            model, extra = _with_accuracy_control(nncf, ctx, model, feeds)
    seconds = round(time.perf_counter() - started, 4)
    info: NncfInfo = {"nncf": nncf.__version__, "int8_mode": mode, "nncf_seconds": seconds,
                      "quantized_ops": quantized_ops(model), **extra}
    from gpux.runtimes import NOTHING_QUANTIZED, int8_did_nothing

    problem = "" if info["quantized_ops"] else NOTHING_QUANTIZED
    if int8_did_nothing(ctx, problem):
        info["int8_warning"] = problem
    if feeds is not None:
        info["calibration_samples"] = len(feeds)
    ctx.log(f"{ctx.target.id}: NNCF int8 {mode} in {seconds:.2f}s"
            + (f" ({extra['fp32_layers']} of {extra['fp32_layers'] + extra['int8_layers']} layers left in fp32)"
               if "int8_layers" in extra else ""))
    return model, info


PRESETS = {"performance": "PERFORMANCE", "mixed": "MIXED"}  # -> nncf.QuantizationPreset


def _quantize(nncf: Any, ctx: Context, model: Any, opts: OpenVINOOptions,
              feeds: list[Feeds]) -> tuple[Any, NncfInfo]:
    """nncf.quantize with the block's preset, bias correction and `keep_fp32` (an ignored scope)."""
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters

    extra: NncfInfo = {}
    scope = None
    if opts.keep_fp32:
        extra["keep_fp32"], names = ignored(ctx, model, opts.keep_fp32, feeds)
        scope = nncf.IgnoredScope(names=names)
    quantized = nncf.quantize(
        model, nncf.Dataset(feeds), subset_size=len(feeds), preset=getattr(nncf.QuantizationPreset,
                                                                          PRESETS[opts.preset]),
        fast_bias_correction=opts.bias_correction != "full", ignored_scope=scope,
        advanced_parameters=AdvancedQuantizationParameters(disable_bias_correction=opts.bias_correction == "off"))
    if scope is not None:
        extra["int8_layers"], extra["fp32_layers"] = layer_precisions(quantized)
    return quantized, extra


def ignored(ctx: Context, model: Any, keep: int | float | list[str], feeds: list[Feeds]) -> tuple[Kept, list[str]]:
    """What `keep_fp32` leaves in fp32 (as onnxruntime_int8.kept records it) and the OpenVINO operations that
    are, for NNCF's ignored scope."""
    from gpux.runtimes import onnxruntime_int8 as ort8

    ops = {op.get_friendly_name(): op for op in model.get_ops() if op.get_type_name() in LAYERS}

    def op_name(layer: str) -> str | None:
        return next((n for n in (layer + "/WithoutBiases", layer) if n in ops), None)

    with tempfile.TemporaryDirectory() as tmp:  # in the build's scratch folder
        pre = ort8.pre_processed(ctx.src, Path(tmp) / "pre.onnx", ctx.log)
        how = ort8.Int8("static", per_channel=True)
        record = ort8.kept(ctx, keep, ort8.quantizable(pre), lambda: ort8.ranking(ctx, pre, how, feeds),
                           f"providers.{ctx.target.provider}.keep_fp32", aliases=list(ops))
    names = [n for n in (k if k in ops else op_name(k) for k in record["kept"]) if n is not None]
    record["openvino_ops"] = names
    if len(names) < len(record["kept"]):
        record["not_in_ir"] = [k for k in record["kept"] if k not in ops and op_name(k) is None]
    return record, names


def _with_accuracy_control(nncf: Any, ctx: Context, model: Any, feeds: list[Feeds]) -> tuple[Any, NncfInfo]:
    """Quantize, then give layers back to fp32 (most harmful first) until the validation cosine holds."""
    if ctx.goal is None:
        raise BuildFailed(f"{ctx.target.id}: int8_mode accuracy needs the verification inputs, which this build "
                          "does not have")
    goal = ctx.goal()
    max_drop = max(0.0, (1.0 - goal.min_cosine) * (1.0 - MARGIN))

    def validate(compiled: Any, items: Any) -> tuple[float, list[float]]:
        items = list(items)
        got = [list(compiled(feed).to_tuple()) for _, feed in items]
        each = [goal.cosine([g], [i]) for (i, _), g in zip(items, got, strict=True)]
        return goal.cosine(got, [i for i, _ in items]), each

    validation = nncf.Dataset(list(enumerate(goal.feeds)), lambda item: item[1])
    quantized = nncf.quantize_with_accuracy_control(
        model, nncf.Dataset(feeds), validation, validate, max_drop=max_drop, drop_type=nncf.DropType.ABSOLUTE,
        subset_size=len(feeds))
    int8, fp32 = layer_precisions(quantized)
    return quantized, {"int8_layers": int8, "fp32_layers": fp32,
                       "accuracy_goal": {"min_cosine": goal.min_cosine, "max_drop": round(max_drop, 8),
                                         "validation": goal.data, "validation_samples": len(goal.feeds)}}


def layer_precisions(model: Any) -> tuple[int, int]:
    """Layers (convolutions, matrix products) with an int8 (FakeQuantize) input, and those without."""
    layers = [op for op in model.get_ops() if op.get_type_name() in LAYERS]
    int8 = sum(1 for op in layers if any(v.get_node().get_type_name() == "FakeQuantize" for v in op.input_values()))
    return int8, len(layers) - int8


def quantized_ops(model: Any) -> int:
    """FakeQuantize operations (post-training quantization) plus int8/uint8 weight constants (compression)."""
    def quantized(op: Any) -> bool:
        kind = op.get_type_name()
        return kind == "FakeQuantize" or (kind == "Constant" and op.get_element_type().get_type_name() in ("i8", "u8"))

    return sum(1 for op in model.get_ops() if quantized(op))


@contextlib.contextmanager
def nncf_quietly() -> Iterator[Any]:
    """NNCF with its logs and progress bars kept off stdout, which `--json` owns (GPUX_DEBUG: on stderr),
    and torch unimportable unless already loaded: NNCF imports torch whenever it is installed (seconds,
    and a broken torch breaks NNCF) though an OpenVINO model never needs it."""
    sink = sys.stderr if debugging() else io.StringIO()
    block = "torch" not in sys.modules
    if block:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        with contextlib.redirect_stdout(sink):
            nncf = require("nncf")
            handlers = [h for h in logging.getLogger("nncf").handlers if type(h) is logging.StreamHandler]
            saved = [h.stream for h in handlers]
            for h in handlers:
                h.setStream(sink)
            try:
                yield nncf
            finally:
                for h, stream in zip(handlers, saved, strict=True):
                    h.setStream(stream)
    finally:
        if block and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
