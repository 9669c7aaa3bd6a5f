"""Model file formats: the source format of a model file (by `model.format`, suffix or contents) and the
ONNX element type names."""

from __future__ import annotations

from typing import Any

ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16",
}  # fmt: skip

SUFFIX_FORMATS = {".onnx": "onnx", ".pt2": "torch_export", ".pt": "torchscript", ".pth": "torchscript",
                  ".ts": "torchscript", ".torchscript": "torchscript", ".jit": "torchscript"}
TORCH_FORMATS = ("torchscript", "torch_export")


def source_format(project: Any) -> str:
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
