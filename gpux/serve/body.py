"""A REST infer body both ways: compressed bodies, the JSON header and binary tail in, typed parameters, the reply."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from typing import Any

from gpux.serve import codec, shm
from gpux.serve.classify import class_count
from gpux.serve.errors import BadRequest, TooLarge
from gpux.serve.protocol import InferInput, InferRequest, InferResult

JSON_TYPE = b"application/json"
NESTING = 500  # where a body too deep for the JSON parser is reported (tensor data nests as deep as its shape)


@dataclass
class Limits:
    max_body_bytes: int
    max_tensor_elements: int
    header_timeout_s: float = 10.0


@dataclass(kw_only=True)
class Reply:
    status: int
    body: bytes
    content_type: bytes = JSON_TYPE
    header_length: int | None = None
    labels: tuple[str, str] | None = None  # (model, version) of an answered infer, for the request metrics
    seconds: float | None = None  # how long the answered infer took


def json_reply(doc: Any, status: int = 200) -> Reply:
    return Reply(status=status, body=json.dumps(doc, separators=(",", ":")).encode())


# Content-Encoding -> zlib window bits (tritonclient's request_compression_algorithm sends gzip or deflate)
ENCODINGS = {b"gzip": 16 + zlib.MAX_WBITS, b"deflate": zlib.MAX_WBITS, b"identity": 0}


def decompress(body: bytes, encoding: bytes, limit: int) -> bytes:
    """A compressed request body, unpacked to at most `limit` bytes (a small bomb cannot fill memory)."""
    wbits = ENCODINGS.get(encoding.strip().lower())
    if wbits is None:
        raise BadRequest(f"unsupported Content-Encoding {encoding.decode(errors='replace')!r}; use gzip or deflate")
    if wbits == 0:
        return body
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"request body is not valid {encoding.decode()} data: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise TooLarge(f"decompressed request body exceeds the limit of {limit} bytes (serve.max_body_bytes)")
    return out


def parse_infer(name: str, version: str, body: bytes, header_length: bytes | None,
                limits: Limits) -> tuple[InferRequest, dict[str, bool]]:
    """The JSON header (and binary tail) of an infer body; returns the request and which outputs go binary."""
    size = len(body)
    if header_length is not None:
        if not header_length.isdigit() or int(header_length) > size:
            raise BadRequest(f"Inference-Header-Content-Length {header_length.decode(errors='replace')!r} is not a "
                             f"length within the {size}-byte body")
        split = int(header_length)
    else:
        split = size
    doc = load_json(body[:split])
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise BadRequest("request JSON must be an object with an 'inputs' list")
    tail = memoryview(body)[split:]
    inputs, used = _inputs(doc["inputs"], tail, limits)
    if used != len(tail):
        raise BadRequest(f"{len(tail) - used} bytes of binary data follow the JSON header but no input claims them")
    params = _dict(doc.get("parameters"), "parameters")
    default_binary = _flag(params, "binary_data_output", False, "parameters")
    outputs, binary, classes, in_shm = None, {}, {}, {}
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise BadRequest("'outputs' must be a list of {name, parameters}")
        outputs = []
        for out in doc["outputs"]:
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise BadRequest("each requested output needs a 'name'")
            outputs.append(out["name"])
            out_params = _dict(out.get("parameters"), "outputs.parameters")
            where = f"output '{out['name']}': parameters"
            binary[out["name"]] = _flag(out_params, "binary_data", default_binary, where)
            if "classification" in out_params:
                classes[out["name"]] = class_count(out["name"], out_params["classification"])
            ref = shm.ref_of(f"output '{out['name']}'", out_params)
            if ref is not None:
                in_shm[out["name"]] = ref
    binary[""] = default_binary
    req_id = doc.get("id")
    if req_id is not None and not isinstance(req_id, str):
        raise BadRequest(f"'id' must be a string, got {req_id!r}")
    request = InferRequest(model=name, version=version, id=req_id or "", inputs=inputs, outputs=outputs,
                           classification=classes, parameters=params, shm_outputs=in_shm)
    return request, binary


def load_json(text: bytes) -> Any:
    """The request JSON; bare NaN/Infinity kept as markers for codec to name (JSON has none), nesting too deep for
    the parser a 400 that says where."""
    try:
        return DECODER.decode(text.decode(json.detect_encoding(text)))
    except RecursionError:
        raise BadRequest(_too_deep(text)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None


DECODER = json.JSONDecoder(parse_constant=codec.NonFinite)  # made once: json.loads(**options) makes one a call
# a JSON string, or one structural character: enough to follow nesting without parsing values
TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def _too_deep(text: bytes) -> str:
    """Where `text` nests deeper than NESTING, from a scan that does not recurse: the input (named when its
    'name' came first) or the JSON path."""
    stack: list[dict[str, Any]] = []  # per open container: its kind, current key or index, its 'name' value
    for match in TOKEN.finditer(text):
        token = match.group()
        top = stack[-1] if stack else {}
        if token in (b"[", b"{"):
            if len(stack) == NESTING:
                break
            stack.append({"kind": token, "at": 0 if token == b"[" else None, "value": False, "name": None})
        elif token in (b"]", b"}"):
            if stack:
                stack.pop()
        elif token == b":":
            top["value"] = True
        elif token == b",":
            top["value"] = False
            if top.get("kind") == b"[":
                top["at"] += 1
        elif top.get("kind") == b"{" and (not top["value"] or top["at"] == "name"):  # a key, or the name
            top["name" if top["value"] else "at"] = json.loads(token)
    path = [f["at"] for f in stack]
    if path[:1] == ["inputs"] and len(path) > 2 and isinstance(path[1], int):
        name = stack[2]["name"]
        who = f"input '{name}'" if isinstance(name, str) else f"inputs[{path[1]}]"
        return f"{who}: {'.'.join(map(str, path[2:3]))} nests deeper than {NESTING} levels (tensor data nests " \
               f"at most {codec.MAX_RANK} lists deep)"
    where = ".".join(map(str, path[:3])) + ("..." if len(path) > 3 else "")
    return f"request JSON nests deeper than {NESTING} levels at {where or 'the top'}"


def _dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"'{what}' must be an object")
    return value


def _flag(params: dict[str, Any], key: str, default: bool, where: str) -> bool:
    value = params.get(key, default)
    if not isinstance(value, bool):
        raise BadRequest(f"{where}.{key} must be true or false, got {value!r}")
    return value


def _inputs(items: list[Any], tail: memoryview, limits: Limits) -> tuple[list[InferInput], int]:
    out, offset = [], 0
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadRequest(f"inputs[{i}] needs a 'name', a 'shape', a 'datatype' and 'data'")
        name, datatype = item["name"], item.get("datatype")
        if datatype not in codec.NUMPY:
            raise BadRequest(f"input '{name}': unknown datatype {datatype!r}; one of {', '.join(codec.NUMPY)}")
        shape = codec.check_shape(name, item.get("shape"), limits.max_tensor_elements)
        in_params = _dict(item.get("parameters"), "inputs.parameters")
        size, ref = in_params.get("binary_data_size"), shm.input_ref(name, datatype, shape, in_params)
        if ref is not None:
            if size is not None or "data" in item:
                raise BadRequest(f"input '{name}' has parameters.shared_memory_region and also "
                                 f"{'binary data' if size is not None else 'data'}; send one")
            out.append(InferInput(name, datatype, shm.UNREAD, ref))
            continue
        if size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise BadRequest(f"input '{name}': parameters.binary_data_size must be a non-negative integer, "
                                 f"got {size!r}")
            if offset + size > len(tail):
                raise BadRequest(f"input '{name}': binary_data_size {size} but only {len(tail) - offset} bytes of "
                                 f"binary data remain (truncated body?)")
            array = codec.from_bytes(name, datatype, shape, tail[offset:offset + size])
            offset += size
        elif "data" in item:
            array = codec.from_json(name, datatype, shape, item["data"])
        else:
            raise BadRequest(f"input '{name}' has neither 'data' nor parameters.binary_data_size")
        out.append(InferInput(name, datatype, array))
    return out, offset


def render_infer(result: InferResult, request: InferRequest, binary: dict[str, bool]) -> Reply:
    """The response JSON, with binary outputs appended after it when asked; always JSON (never a bare NaN). Large
    JSON data is rendered in slices (codec.json_text) and spliced in as text."""
    entries: list[dict[str, Any] | str] = []
    blobs = []
    for name, array in result.outputs:
        entry: dict[str, Any] = {"name": name, "datatype": codec.datatype_of(array), "shape": list(array.shape)}
        if name in result.shm:  # written to shared memory: the reply says where, without the data
            entry["parameters"] = result.shm[name]
        elif binary.get(name, binary[""]):
            blob = codec.to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif array.size <= codec.JSON_SLICE:
            entry["data"] = codec.to_json(array)
        else:
            entries.append(f'{_compact(entry)[:-1]},"data":[{codec.json_text(array)}]}}')
            continue
        entries.append(entry)
    spliced = any(isinstance(e, str) for e in entries)
    doc = {"model_name": result.model.name, "model_version": result.model.version,
           "outputs": None if spliced else entries}
    if request.id:
        doc["id"] = request.id
    head = _compact(doc)
    if spliced:
        outputs = ",".join(e if isinstance(e, str) else _compact(e) for e in entries)
        head = head.replace('"outputs":null', f'"outputs":[{outputs}]', 1)
    raw = head.encode()
    if not blobs:
        return Reply(status=200, body=raw)
    return Reply(status=200, body=b"".join([raw, *blobs]), content_type=b"application/octet-stream",
                 header_length=len(raw))


def _compact(doc: dict[str, Any]) -> str:
    try:
        return codec.COMPACT.encode(doc)
    except ValueError:  # NaN or Infinity in an output's data: JSON has neither
        return codec.COMPACT.encode(codec.finite_or_text(doc))
