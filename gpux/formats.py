"""Model file formats: the source format of a model file (by `model.format`, suffix or contents) and the one
table of tensor element types, from which every other spelling of them is derived (ONNX codes, the Open Inference
Protocol, Triton's model config, numpy)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from gpux.views import ProjectView


class ElementType(NamedTuple):
    """One tensor element type, as each party spells it."""

    name: str  # gpux.yml and numpy's name
    onnx: int  # ONNX TensorProto.DataType
    onnx_name: str  # TensorProto's name, lower case (accepted in gpux.yml too)
    protocol: str  # the Open Inference Protocol's datatype
    triton: str  # Triton's model config data_type
    wire: str  # numpy dtype of its elements on the wire (BF16 travels as the top half of FP32: float32 arrays)


ELEMENT_TYPES = (  # in the protocol's order (the order error messages list them in)
    ElementType("bool", 9, "bool", "BOOL", "TYPE_BOOL", "bool"),
    ElementType("uint8", 2, "uint8", "UINT8", "TYPE_UINT8", "<u1"),
    ElementType("uint16", 4, "uint16", "UINT16", "TYPE_UINT16", "<u2"),
    ElementType("uint32", 12, "uint32", "UINT32", "TYPE_UINT32", "<u4"),
    ElementType("uint64", 13, "uint64", "UINT64", "TYPE_UINT64", "<u8"),
    ElementType("int8", 3, "int8", "INT8", "TYPE_INT8", "<i1"),
    ElementType("int16", 5, "int16", "INT16", "TYPE_INT16", "<i2"),
    ElementType("int32", 6, "int32", "INT32", "TYPE_INT32", "<i4"),
    ElementType("int64", 7, "int64", "INT64", "TYPE_INT64", "<i8"),
    ElementType("float16", 10, "float16", "FP16", "TYPE_FP16", "<f2"),
    ElementType("float32", 1, "float", "FP32", "TYPE_FP32", "<f4"),
    ElementType("float64", 11, "double", "FP64", "TYPE_FP64", "<f8"),
    ElementType("string", 8, "string", "BYTES", "TYPE_STRING", "object"),
    ElementType("bfloat16", 16, "bfloat16", "BF16", "TYPE_BF16", "<f4"),
)
ONNX_DTYPES = {t.onnx: t.name for t in ELEMENT_TYPES}  # ONNX element type code -> gpux name
ONNX_DTYPE_NAMES = {t.onnx_name: t.name for t in ELEMENT_TYPES if t.onnx_name != t.name}  # float, double
PROTOCOL_DATATYPES = {t.name: t.protocol for t in ELEMENT_TYPES}  # gpux name -> Open Inference Protocol
TRITON_DATA_TYPES = {t.name: t.triton for t in ELEMENT_TYPES}  # gpux name -> Triton config data_type
WIRE_DTYPES = {t.protocol: t.wire for t in ELEMENT_TYPES}  # protocol datatype -> numpy dtype on the wire

SUFFIX_FORMATS = {".onnx": "onnx", ".pt2": "torch_export", ".pt": "torchscript", ".pth": "torchscript",
                  ".ts": "torchscript", ".torchscript": "torchscript", ".jit": "torchscript"}
TORCH_FORMATS = ("torchscript", "torch_export")


def source_format(project: ProjectView) -> str:
    """onnx | torchscript | torch_export: stated in model.format, else from the suffix, else sniffed."""
    if project.config.model.format:
        return project.config.model.format
    src = project.source
    if src.suffix.lower() in SUFFIX_FORMATS:
        return SUFFIX_FORMATS[src.suffix.lower()]
    import zipfile

    if zipfile.is_zipfile(src):
        with zipfile.ZipFile(src) as z:
            names = z.namelist()
        return "torch_export" if any("serialized_exported_program" in n for n in names) else "torchscript"
    return "onnx"
