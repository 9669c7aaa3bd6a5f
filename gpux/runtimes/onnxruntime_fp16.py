"""ONNX Runtime fp16: the source converted by ONNX Runtime's float16 converter, its inputs and outputs kept float32,
and the operators without float16 kernels kept in float32 (the converter's own block list, and every ai.onnx.ml
operator: the tree ensembles, linear and SVM models, scalers of classic ML models). A model it would convert nothing
of is said to be so (NothingConverted: the fp32 artifact is built instead), an already quantized model is refused by
name, and a conversion ONNX Runtime cannot load is refused with ONNX Runtime's own reason."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpux.errors import BuildFailed, model_step
from gpux.optional import require
from gpux.runtimes.onnxruntime import OnnxInfo, optimized, quiet_stderr, save_model

if TYPE_CHECKING:
    from gpux.runtimes import Context

ML_DOMAIN = "ai.onnx.ml"
# operators that carry int8 arithmetic in a quantized ONNX graph (also: what an int8 build put in)
QUANTIZED_OPS = ("QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "QLinearConv",
                 "QLinearMatMul", "DynamicQuantizeMatMul", "QAttention", "QGemm", "MatMulIntegerToFloat")
# operators that move or select values without arithmetic: a graph whose float operators are only these (and those
# kept in float32) computes nothing in fp16, it would only round its values
NO_ARITHMETIC = frozenset({"Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
                           "Concat", "Split", "Slice", "Gather", "Expand", "Shape", "Size", "ArgMax", "ArgMin",
                           "Constant", "ConstantOfShape"})
FLOAT = 1  # onnx.TensorProto.FLOAT


def build_fp16(ctx: Context) -> OnnxInfo:
    """The fp16 ONNX artifact: converted (what stays float32 recorded in its info), then optimized offline. Where the
    converter joins an ai.onnx.ml operator kept in float32 to an fp16 operator after it in a way ONNX Runtime does
    not load (LightGBM's post-processing, for one), what computes on those operators' outputs stays float32 too."""
    onnx = require("onnx")
    source = onnx.load(str(ctx.src))
    blocked, computes = fp16_blocks(ctx, source)
    try:
        info, model = _converted(ctx, source, blocked, [])
    except BuildFailed:
        after = after_ml(source)
        if not after:
            raise
        for i, n in enumerate(source.graph.node):  # the converter blocks nodes by name: every node gets one
            n.name = n.name or f"gpux_node_{i}"
        floats = float_tensors(source)
        computes -= sum(1 for n in after if counts(n, blocked, floats))
        if computes <= 0:
            from gpux.runtimes import refuse

            refuse(ctx, f"{ctx.target.id}: fp16 converts nothing of this model: its ai.onnx.ml operators stay "
                        "float32 (no float16 kernels), and so does what computes on their outputs")
        info, model = _converted(ctx, source, blocked, [n.name for n in after])
    kept = sorted({n.op_type for n in model.graph.node if n.op_type in blocked})
    return {**info, "fp16_ops": computes, "kept_fp32": kept}  # type: ignore[typeddict-item]


def _converted(ctx: Context, source: Any, blocked: list[str], nodes: list[str]) -> tuple[dict[str, Any], Any]:
    """(the artifact's info, the converted model): `source` converted with the operators `blocked` and the nodes
    `nodes` kept in float32, saved and optimized offline; a conversion ONNX Runtime cannot load is a BuildFailed."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx = require("onnx")
    with quiet_stderr(ctx.log, "onnxruntime.float16"):
        model = convert_float_to_float16(onnx.ModelProto.FromString(source.SerializeToString()), keep_io_types=True,
                                         disable_shape_infer=False, op_block_list=blocked,
                                         node_block_list=nodes or None)
    src = ctx.workdir / "fp16.onnx"
    save_model(model, src)
    # ONNX Runtime's errors share no base class: its refusal of the converted model
    with model_step(f"{ctx.target.id}: the fp16 conversion of this model does not load in ONNX Runtime",
                    hint="keep precision: fp32 for this model", conversion=True):
        return dict(optimized(ctx, src)), model


def after_ml(model: Any) -> list[Any]:
    """The nodes outside ai.onnx.ml that compute on an ai.onnx.ml operator's outputs, directly or not (in graph
    order, which ONNX keeps topological)."""
    tainted: set[str] = set()
    out = []
    for n in model.graph.node:
        if n.domain == ML_DOMAIN:
            tainted.update(n.output)
        elif tainted & set(n.input):
            tainted.update(n.output)
            out.append(n)
    return out


def counts(node: Any, blocked: list[str], floats: set[str] | None) -> bool:
    """Whether `node` would compute in fp16: not kept in float32, not only moving values, on float tensors."""
    return node.domain != ML_DOMAIN and node.op_type not in blocked and node.op_type not in NO_ARITHMETIC and \
        bool(floats is None or floats & {*node.input, *node.output})


def fp16_blocks(ctx: Context, model: Any) -> tuple[list[str], int]:
    """(the operators kept in float32, how many operators would compute in fp16); an already quantized model is
    refused, and one of which nothing would compute in fp16 is NothingConverted (a failure under --strict)."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    nodes = list(model.graph.node)
    quantized = sorted({n.op_type for n in nodes if n.op_type in (*QUANTIZED_OPS, "DequantizeLinear")})
    if quantized:
        raise BuildFailed(f"{ctx.target.id}: the fp16 conversion failed: the model is already quantized "
                          f"({', '.join(quantized)}); fp16 converts float32 models", hint="keep precision: fp32",
                          conversion=True)
    ml = sorted({n.op_type for n in nodes if n.domain == ML_DOMAIN})
    blocked = sorted({*DEFAULT_OP_BLOCK_LIST, *ml})
    floats = float_tensors(model)
    computes = sum(1 for n in nodes if counts(n, blocked, floats))
    if not computes:
        from gpux.runtimes import refuse

        kept = sorted({n.op_type for n in nodes if n.op_type in blocked})
        why = f"its operators {', '.join(kept)} have no float16 kernels and stay float32" if kept else \
            "none of its operators computes in floating point"
        refuse(ctx, f"{ctx.target.id}: fp16 converts nothing of this model: {why}")
    return blocked, computes


def float_tensors(model: Any) -> set[str] | None:
    """The names of the model's float32 tensors, as ONNX's shape inference types them (None: it cannot)."""
    onnx = require("onnx")
    try:
        graph = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # onnx's inference raises its own errors and plain ones on models it cannot type: unknown
        return None
    typed = [*graph.input, *graph.output, *graph.value_info]
    return {v.name for v in typed if v.type.tensor_type.elem_type == FLOAT} | \
        {t.name for t in graph.initializer if t.data_type == FLOAT}


__all__ = ["ML_DOMAIN", "NO_ARITHMETIC", "QUANTIZED_OPS", "build_fp16", "float_tensors", "fp16_blocks"]
