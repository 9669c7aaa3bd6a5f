"""A model's graph inputs/outputs read straight from the ONNX protobuf wire format, in pure Python, so plain
`gpux validate` can check declared I/O without importing onnx (weights are skipped, never read)."""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path

from gpux.formats import ONNX_DTYPES
from gpux.model.io import NONTENSOR, Dim, ModelIO, Tensor

# field numbers of onnx.proto
MODEL_GRAPH, MODEL_IR = 7, 1
GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT = 5, 11, 12
TENSOR_NAME = 8
INT64_SIGN, UINT64 = 1 << 63, 1 << 64


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise WireError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 70:
            raise WireError("varint too long")


def fields(buf: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value): ints for varints, memoryviews for length-delimited fields; fixed skipped."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise WireError("truncated field")
            yield number, buf[pos:pos + size]
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def _sub(buf: memoryview, number: int) -> list[memoryview]:
    return [v for n, v in fields(buf) if n == number and isinstance(v, memoryview)]


def _text(buf: memoryview, number: int) -> str:
    found = _sub(buf, number)
    return bytes(found[-1]).decode("utf-8", "replace") if found else ""


def _tensor(value_info: memoryview) -> Tensor:
    name = _text(value_info, 1)
    types = _sub(value_info, 2)
    tensor = _sub(types[-1], 1) if types else []
    if not tensor:
        return Tensor(name, NONTENSOR, None)
    elem = next((v for n, v in fields(tensor[-1]) if n == 1 and isinstance(v, int)), 0)
    shapes = _sub(tensor[-1], 2)
    if not shapes:
        return Tensor(name, ONNX_DTYPES.get(elem, f"onnx-type-{elem}"), None)
    dims: list[Dim] = []
    for dim in _sub(shapes[-1], 1):
        value: Dim = None
        for n, v in fields(dim):
            if n == 1 and isinstance(v, int):
                value = _dim_value(v)
            elif n == 2 and isinstance(v, memoryview):
                value = bytes(v).decode("utf-8", "replace") or None
        dims.append(value)
    return Tensor(name, ONNX_DTYPES.get(elem, f"onnx-type-{elem}"), tuple(dims))


def _dim_value(raw: int) -> Dim:
    """A dim_value as the int64 it encodes; a negative one (exporters write -1) is an unnamed dynamic dim."""
    value = raw - UINT64 if raw >= INT64_SIGN else raw
    return None if value < 0 else value


def read_io(path: Path) -> ModelIO:
    """The graph's inputs (initializers excluded) and outputs; raises WireError on a malformed file."""
    with open(path, "rb") as f:
        if not f.seek(0, 2):
            raise WireError("empty file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as view:
            try:
                return _read(view)
            except (WireError, IndexError, ValueError) as exc:
                # raised again outside: the traceback holds slices of the map, which then could not close
                reason = str(exc) or type(exc).__name__
    raise WireError(reason)


def _read(buf: memoryview) -> ModelIO:
    ir, graph = None, None
    for n, v in fields(buf):
        if n == MODEL_IR and isinstance(v, int):
            ir = v
        elif n == MODEL_GRAPH and isinstance(v, memoryview):
            graph = v
    if graph is None:
        raise WireError("no graph")
    init, inputs, outputs = set(), [], []
    for n, v in fields(graph):
        if not isinstance(v, memoryview):
            continue
        if n == GRAPH_INITIALIZER:
            init.add(_text(v, TENSOR_NAME))
        elif n == GRAPH_INPUT:
            inputs.append(_tensor(v))
        elif n == GRAPH_OUTPUT:
            outputs.append(_tensor(v))
    return ModelIO(inputs=tuple(t for t in inputs if t.name not in init), outputs=tuple(outputs), ir_version=ir)
