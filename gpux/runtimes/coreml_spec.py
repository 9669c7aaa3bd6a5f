"""Core ML: what a built package holds, read from its spec (inputs, outputs, spec version, the precision it
computes or stores in, its compression operations), and the package's info record (its manifest's)."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any, NotRequired, TypedDict

NOT_COMPUTE = ("const", "cast")  # ops whose output dtype says nothing about the compute precision


class Feature(TypedDict):
    """One input or output of the spec: its name and type, and a multi-array's dtype, shape and flexible sizes."""

    name: str
    type: str | None
    dtype: NotRequired[str]
    shape: NotRequired[list[int]]
    ranges: NotRequired[list[list[int]]]  # per dim [lower, upper] (upper -1: unbounded)
    enumerated: NotRequired[list[list[int]]]


class Precision(TypedDict):
    """fp16, fp32 or mixed (None: no float op), of the compute (ML Program) or the weights (neural network)."""

    precision: str | None
    precision_of: str
    compute_dtypes: NotRequired[dict[str, int]]  # ML Program: outputs of compute ops per dtype
    compression_ops: NotRequired[dict[str, int]]  # ML Program: constexpr_ ops (compressed weights) per type


class Spec(Precision):
    spec_version: int
    inputs: list[Feature]
    outputs: list[Feature]
    spec_target: NotRequired[str]  # the oldest OS that reads this spec


class Compression(TypedDict):
    method: str
    mode: str
    bits: NotRequired[int]
    target_sparsity: NotRequired[float]


class PackageInfo(Spec):
    """A Core ML package's info: how it was converted and what the written spec holds."""

    main: str
    coremltools: str
    source_format: str
    format: str
    compute_units: str
    requested_precision: str
    minimum_deployment_target: str | None
    compression: Compression | None
    ranges: dict[str, list[int]]  # symbolic dim -> [lower, default, upper]
    static_shapes: bool
    size: int  # bytes


def describe(spec: Any) -> Spec:
    """Inputs, outputs, spec version and the precision actually in a Core ML spec."""
    import coremltools  # imported already: the spec was written and read with it

    precision = program_precision(spec) if spec.WhichOneof("Type") == "mlProgram" else \
        Precision(precision="fp16" if _has_fp16_weights(spec) else "fp32", precision_of="weights")
    out: Spec = {"spec_version": spec.specificationVersion,
                 "inputs": [_feature(f) for f in spec.description.input],
                 "outputs": [_feature(f) for f in spec.description.output], **precision}
    with contextlib.suppress(ValueError):
        out["spec_target"] = coremltools.target(spec.specificationVersion).name
    return out


def _feature(f: Any) -> Feature:
    kind = f.type.WhichOneof("Type")
    d: Feature = {"name": f.name, "type": kind}
    if kind == "multiArrayType":
        a = f.type.multiArrayType
        d["dtype"] = type(a).ArrayDataType.Name(a.dataType)
        d["shape"] = list(a.shape)
        ranges = a.shapeRange.sizeRanges
        if ranges:
            d["ranges"] = [[r.lowerBound, r.upperBound] for r in ranges]
        elif a.enumeratedShapes.shapes:
            d["enumerated"] = [list(s.shape) for s in a.enumeratedShapes.shapes]
    return d


def program_precision(spec: Any) -> Precision:
    """The dtypes the ML Program's compute ops produce: fp16, fp32, or mixed; and its compression ops."""
    from coremltools.proto import MIL_pb2

    dtypes: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    for fn in spec.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            for op in block.operations:
                ops[op.type] += 1
                if op.type in NOT_COMPUTE or op.type.startswith("constexpr_"):
                    continue
                for o in op.outputs:
                    if o.type.WhichOneof("type") == "tensorType":
                        dtypes[MIL_pb2.DataType.Name(o.type.tensorType.dataType)] += 1
    floats = {k: v for k, v in dtypes.items() if k.startswith("FLOAT") or k == "BFLOAT16"}
    kinds = set(floats)
    precision = "fp16" if kinds == {"FLOAT16"} else "fp32" if kinds == {"FLOAT32"} else "mixed" if kinds else None
    return {"precision": precision, "precision_of": "compute", "compute_dtypes": dict(sorted(dtypes.items())),
            "compression_ops": {k: v for k, v in sorted(ops.items()) if k.startswith("constexpr_")}}


def _has_fp16_weights(message: Any) -> bool:
    """Any WeightParams in a neural network spec stored as float16."""
    for field, value in message.ListFields():
        if field.name == "float16Value" and value:
            return True
        if field.type != field.TYPE_MESSAGE:
            continue
        # one message, a map of messages, or a repeated field
        items = [value] if hasattr(value, "ListFields") else value.values() if hasattr(value, "values") else value
        if any(_has_fp16_weights(v) for v in items if hasattr(v, "ListFields")):
            return True
    return False
