"""Tensors on the wire: Open Inference Protocol datatypes, JSON `data`, and raw little-endian bytes."""

from __future__ import annotations

import itertools
import json
import math
import struct
import sys
from typing import Any

import numpy as np
import orjson

from gpux.formats import PROTOCOL_DATATYPES, WIRE_DTYPES
from gpux.serve.errors import BadRequest

# protocol datatype -> numpy dtype (BYTES: object arrays of bytes/str; BF16 travels as the top half of FP32)
NUMPY = {datatype: np.dtype(wire) for datatype, wire in WIRE_DTYPES.items()}
DATATYPE = PROTOCOL_DATATYPES  # gpux / ONNX dtype name -> protocol datatype
# numpy kind+size -> protocol datatype, for outputs
BY_NUMPY = {np.dtype(v).str.lstrip("<|="): k for k, v in NUMPY.items() if k not in ("BYTES", "BF16")}


def datatype_of(array: np.ndarray) -> str:
    """The protocol datatype of an output array."""
    if array.dtype.kind in "OUS":
        return "BYTES"
    return BY_NUMPY.get(array.dtype.str.lstrip("<|="), "BYTES")


LITTLE_ENDIAN = sys.byteorder == "little"
MAX_RANK = 32  # numpy 1.x holds at most 32 dims
# what JSON `data` may hold per datatype (Triton's JSON rules: bools only for BOOL, strings only for BYTES)
FLOATS = ("FP16", "FP32", "FP64", "BF16")
JSON_KINDS: dict[str, tuple[frozenset[type], str]] = {
    **{t: (frozenset({int}), "integers") for t in NUMPY if t[0] in "IU"},
    **{t: (frozenset({int, float}), "numbers") for t in FLOATS},
    "BOOL": (frozenset({bool}), "true or false"), "BYTES": (frozenset({str}), "strings"),
}
JSON_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string", type(None): "null",
              dict: "an object"}


class NonFinite(str):
    """A bare NaN, Infinity or -Infinity in request JSON (json.loads' parse_constant): not JSON, rejected by name."""


def check_shape(name: str, shape: Any, max_elements: int) -> tuple[int, ...]:
    """A shape is a list of at most MAX_RANK non-negative ints whose product is within the element limit; so is the
    product of its non-zero dims (numpy cannot hold [2**63, 2**63, 0] either)."""
    if not isinstance(shape, list | tuple) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                       for d in shape):
        raise BadRequest(f"input '{name}': shape must be a list of integers, got {shape!r}")
    if any(d < 0 for d in shape):
        raise BadRequest(f"input '{name}': shape {list(shape)} has a negative dim")
    if len(shape) > MAX_RANK:
        raise BadRequest(f"input '{name}': shape has {len(shape)} dims, more than {MAX_RANK}")
    count, span = math.prod(shape), math.prod(d for d in shape if d)
    if count > max_elements or span > max_elements:
        what = f"{count} elements exceed" if count > max_elements else \
            f"shape {list(shape)}: its non-zero dims multiply to {span}, above"
        raise BadRequest(f"input '{name}': {what} the limit of {max_elements} (serve.max_tensor_elements)")
    return tuple(shape)


def from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray:
    """JSON `data` (flat or nested, row-major) as an array of `shape`: values of the
    datatype's JSON kind only, finite floats only (JSON has no NaN or Infinity)."""
    leaves, kinds = _leaves(name, data)
    allowed, words = JSON_KINDS[datatype]
    if not kinds <= allowed:
        bad = next(v for v in leaves if type(v) not in allowed)
        got = "NaN/Infinity, which JSON does not have (send non-finite values as binary data or over gRPC)" \
            if isinstance(bad, NonFinite) else f"{JSON_NAMES.get(type(bad), type(bad).__name__)} ({bad!r})"
        raise BadRequest(f"input '{name}': {datatype} data must be {words}, got {got}")
    array = from_contents(name, datatype, shape, leaves)
    if datatype in FLOATS and not _finite(array):
        raise BadRequest(f"input '{name}': data holds a value out of the {datatype} range (or not finite); "
                         "send non-finite values as binary data or over gRPC")
    return array


def _finite(array: np.ndarray) -> bool:
    if array.size > 64:
        return bool(np.isfinite(array).all())
    return all(map(math.isfinite, array.reshape(-1).tolist()))  # a few values: faster than a numpy call


def from_contents(name: str, datatype: str, shape: tuple[int, ...], values: list[Any]) -> np.ndarray:
    """A flat list of values already of the datatype's kind (JSON leaves, gRPC typed contents) as an array."""
    if len(values) != math.prod(shape):
        raise BadRequest(f"input '{name}': shape {list(shape)} needs {math.prod(shape)} values but data has "
                         f"{len(values)}")
    if datatype == "BYTES":
        return np.array(values, dtype=object).reshape(shape)
    try:
        with np.errstate(over="ignore"):  # a float out of range becomes inf: from_json names it
            return np.asarray(values, dtype=NUMPY[datatype]).reshape(shape)
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(f"input '{name}': data cannot be read as {datatype}: {exc}") from exc


def _leaves(name: str, data: Any) -> tuple[list[Any], set[type]]:
    """The values of nested lists, row-major, and their types; at most MAX_RANK lists deep (any nesting whose
    values fill the shape is taken, as Triton does) and without recursion, however deep a request nests."""
    items = data if isinstance(data, list) else [data]
    for _ in range(MAX_RANK):
        kinds = set(map(type, items))
        if list not in kinds:
            return items, kinds
        if len(kinds) > 1:
            raise BadRequest(f"input '{name}': data mixes lists and values at the same depth")
        items = list(itertools.chain.from_iterable(items))
    raise BadRequest(f"input '{name}': data nests deeper than {MAX_RANK} lists (a tensor has at most {MAX_RANK} dims)")


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
    if array.dtype.byteorder == "<" or (array.dtype.byteorder in "=|" and LITTLE_ENDIAN):
        return array.tobytes()  # row-major whatever the array's layout
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()


def to_json(array: np.ndarray) -> list[Any]:
    """An output array as flat JSON values (BYTES as text; NaN and Infinity as the strings "NaN", "Infinity" and
    "-Infinity", which numpy, and so tritonclient's as_numpy, reads back: JSON has neither)."""
    flat = array.reshape(-1)
    if datatype_of(array) == "BYTES":
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x) for x in flat]
    values = flat.tolist()
    return values if flat.dtype.kind != "f" or _finite(flat) else finite_or_text(values)


JSON_SLICE = 16384  # values per encoding call: a thread encoding a large output lets the event loop run between


def dumps(doc: Any) -> bytes:
    """Compact JSON. orjson: a tenth of the time of json's encoder on a reply; it writes a non-finite float as
    null, so values come through to_json. What it refuses (text with a lone surrogate, which json reads from a
    request's \\ud800) json writes, escaped."""
    try:
        return orjson.dumps(doc)
    except orjson.JSONEncodeError:
        return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


def json_text(array: np.ndarray) -> bytes:
    """An output's flat JSON values without the brackets, encoded in slices of JSON_SLICE values."""
    flat = array.reshape(-1)
    return b",".join(dumps(to_json(flat[i:i + JSON_SLICE]))[1:-1] for i in range(0, max(flat.size, 1), JSON_SLICE))


def finite_or_text(value: Any) -> Any:
    """`value` with every non-finite float, in lists and dicts too, as the string JSON can carry."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, list):
        return [finite_or_text(v) for v in value]
    if isinstance(value, dict):
        return {k: finite_or_text(v) for k, v in value.items()}
    return value


def model_input(array: np.ndarray, dtype: str) -> np.ndarray:
    """What the runtime takes for a model input: string inputs as str objects, others as sent."""
    if dtype == "string":
        return np.array([x.decode("utf-8", "replace") if isinstance(x, bytes) else str(x)
                         for x in array.reshape(-1)], dtype=object).reshape(array.shape)
    return array
