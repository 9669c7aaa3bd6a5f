"""Tensors on the wire: Open Inference Protocol datatypes, JSON `data`, and raw little-endian bytes."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from gpux.serve.errors import BadRequest

# protocol datatype -> numpy dtype (BYTES: object arrays of bytes/str; BF16 travels as the top half of FP32)
NUMPY = {
    "BOOL": np.dtype(bool), "UINT8": np.dtype("<u1"), "UINT16": np.dtype("<u2"), "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"), "INT8": np.dtype("<i1"), "INT16": np.dtype("<i2"), "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"), "FP16": np.dtype("<f2"), "FP32": np.dtype("<f4"), "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object), "BF16": np.dtype("<f4"),
}  # fmt: skip
# gpux / ONNX dtype name -> protocol datatype
DATATYPE = {
    "bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "int8": "INT8",
    "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16", "float32": "FP32", "float64": "FP64",
    "string": "BYTES", "bfloat16": "BF16",
}  # fmt: skip
# numpy kind+size -> protocol datatype, for outputs
BY_NUMPY = {np.dtype(v).str.lstrip("<|="): k for k, v in NUMPY.items() if k not in ("BYTES", "BF16")}


def datatype_of(array: np.ndarray) -> str:
    """The protocol datatype of an output array."""
    if array.dtype.kind in "OUS":
        return "BYTES"
    return BY_NUMPY.get(array.dtype.str.lstrip("<|="), "BYTES")


def check_shape(name: str, shape: Any, max_elements: int) -> tuple[int, ...]:
    """A shape is a list of non-negative ints whose product is within the element limit."""
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                       for d in shape):
        raise BadRequest(f"input '{name}': shape must be a list of integers, got {shape!r}")
    if any(d < 0 for d in shape):
        raise BadRequest(f"input '{name}': shape {list(shape)} has a negative dim")
    count = math.prod(shape)
    if count > max_elements:
        raise BadRequest(f"input '{name}': {count} elements exceed the limit of {max_elements} "
                         f"(serve.max_tensor_elements)")
    return tuple(shape)


def from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """JSON `data` (nested or flat, row-major) as an array of `shape`."""
    try:
        arr = (np.array(_flat(data), dtype=object) if datatype == "BYTES"
               else np.asarray(data, dtype=NUMPY[datatype]))
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(f"input '{name}': data cannot be read as {datatype}: {exc}") from None
    if arr.size != math.prod(shape):
        raise BadRequest(f"input '{name}': shape {list(shape)} needs {math.prod(shape)} values but data has "
                         f"{arr.size}")
    return arr.reshape(shape)


def _flat(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        out.extend(_flat(item))
    return out


def from_bytes(name: str, datatype: str, shape: tuple[int, ...], raw: bytes | memoryview) -> np.ndarray:
    """Raw little-endian tensor bytes (BYTES: 4-byte length + bytes per element) as an array of `shape`."""
    count = math.prod(shape)
    if datatype == "BYTES":
        return np.array(_split_bytes(name, raw, count), dtype=object).reshape(shape)
    itemsize = 2 if datatype == "BF16" else NUMPY[datatype].itemsize
    if len(raw) != count * itemsize:
        raise BadRequest(f"input '{name}': shape {list(shape)} of {datatype} needs {count * itemsize} bytes but "
                         f"{len(raw)} were sent")
    if datatype == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4").reshape(shape)
    return np.frombuffer(raw, dtype=NUMPY[datatype]).reshape(shape)


def _split_bytes(name: str, raw: bytes | memoryview, count: int) -> list[bytes]:
    out, pos, view = [], 0, memoryview(raw)
    while pos < len(view):
        if pos + 4 > len(view):
            raise BadRequest(f"input '{name}': BYTES data ends inside an element's length prefix")
        (size,) = struct.unpack_from("<I", view, pos)
        if pos + 4 + size > len(view):
            raise BadRequest(f"input '{name}': BYTES element of {size} bytes runs past the data")
        out.append(bytes(view[pos + 4:pos + 4 + size]))
        pos += 4 + size
    if len(out) != count:
        raise BadRequest(f"input '{name}': shape needs {count} BYTES elements but {len(out)} were sent")
    return out


def to_bytes(array: np.ndarray) -> bytes:
    """An output array as raw little-endian bytes (BYTES: length-prefixed elements)."""
    if datatype_of(array) == "BYTES":
        parts = []
        for item in array.reshape(-1):
            b = item if isinstance(item, bytes) else str(item).encode()
            parts.append(struct.pack("<I", len(b)) + b)
        return b"".join(parts)
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def to_json(array: np.ndarray) -> list[Any]:
    """An output array as flat JSON data (BYTES as text)."""
    flat = array.reshape(-1)
    if datatype_of(array) == "BYTES":
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat]
    return flat.tolist()


def model_input(array: np.ndarray, dtype: str) -> np.ndarray:
    """What the runtime takes for a model input: string inputs as str objects, others as sent."""
    if dtype == "string":
        return np.array([x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                         for x in array.reshape(-1)], dtype=object).reshape(array.shape)
    return array
