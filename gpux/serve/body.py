"""A REST infer body both ways: compressed bodies, the JSON header and binary tail in, typed parameters, the reply."""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import orjson

from gpux.serve import codec, shm
from gpux.serve.classify import class_count
from gpux.serve.errors import BadRequest, TooLarge
from gpux.serve.protocol import InferInput, InferRequest, InferResult

if TYPE_CHECKING:
    from gpux.serve.settings import Settings

K = TypeVar("K")
V = TypeVar("V")
JSON_TYPE = b"application/json"
OCTET_TYPE = b"application/octet-stream"
NESTING = 500  # where a body too deep for the JSON parser is reported (tensor data nests as deep as its shape)


@dataclass(frozen=True, kw_only=True)
class Limits:
    """The server-wide limits (the first model's serve: block)."""

    max_body_bytes: int
    max_tensor_elements: int
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: int = 5
    max_connections: int = 512
    max_header_bytes: int = 64 * 2**10

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The limits a model's Settings (gpux/serve/settings.py) set."""
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


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
        raise BadRequest(f"request body is not valid {encoding.decode()} data: {exc}") from exc
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
    head = body[:split] if split < size else body
    # a header without JSON data (binary tensors, shared memory) is read once: a client sends the same one each time
    key = (head, limits) if header_length is not None and len(head) <= PLAN_BYTES else None
    plan = PLANS.get(key) if key is not None else None
    tail = memoryview(body)[split:]
    try:
        if plan is None:
            plan = _plan(load_json(head), limits)
            if key is not None and plan.reusable:
                PLANS.keep(key, plan)
        inputs = _arrays(plan.inputs, tail)
    except BadRequest:
        if LONG_NUMBER.search(head) is None:
            raise
        # orjson reads an integer beyond 64 bits as a float: a refused request that may hold one is read again by
        # json, whose reading (and so its message, or its answer) is the one given. An accepted one keeps orjson's:
        # every number the server reads (shapes, sizes, counts, integer data) refuses a float, and others are unused
        plan = _plan(load_json(head, fast=False), limits)
        inputs = _arrays(plan.inputs, tail)
    request = InferRequest(model=name, version=version, id=plan.id, inputs=inputs, outputs=plan.outputs,
                           classification=plan.classes, parameters=plan.params, shm_outputs=plan.in_shm)
    return request, plan.binary


@dataclass(kw_only=True, slots=True)
class Plan:
    """What an infer header asks, checked: its inputs (data still to read), outputs and parameters. Shared by every
    request with the same header, so nothing downstream may change it."""

    inputs: list[Spec]
    outputs: list[str] | None
    binary: dict[str, bool]  # output -> sent as binary data ("": the default)
    classes: dict[str, int]
    in_shm: dict[str, shm.Ref]
    params: dict[str, Any]
    id: str

    @property
    def reusable(self) -> bool:
        return all(s.data is None for s in self.inputs)


@dataclass(kw_only=True, slots=True)
class Spec:
    """One input of a header: its data is `size` bytes of the binary tail, a shared memory region, or JSON data."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    size: int | None = None
    ref: shm.Ref | None = None
    data: Any = None


class Kept(Generic[K, V]):
    """A bounded cache of what a pure function gave for a key: at most `size` entries, emptied in one step when
    full (safe beside a thread reading it; the next few requests fill it again)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._memo: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._memo.get(key)

    def keep(self, key: K, value: V) -> None:
        if len(self._memo) >= self.size:
            self._memo.clear()
        self._memo[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self._memo

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._memo))


KEPT = 256  # headers read, and reply headers written, kept at most (a client sends the same few)
PLAN_BYTES = 4096  # headers kept (read or written) are at most this long (a few hundred bytes name a few tensors)
PLANS: Kept[tuple[bytes, Limits], Plan] = Kept(KEPT)  # an infer header, read (its reading depends on it alone)
HEADS: Kept[tuple[Any, ...], bytes] = Kept(KEPT)  # a reply's JSON header, written (the same for the same key)


def _plan(doc: Any, limits: Limits) -> Plan:
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise BadRequest("request JSON must be an object with an 'inputs' list")
    specs = _specs(doc["inputs"], limits)
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
    return Plan(inputs=specs, outputs=outputs, binary=binary, classes=classes, in_shm=in_shm, params=params,
                id=req_id or "")


def load_json(text: bytes, fast: bool = True) -> Any:
    """The request JSON; bare NaN/Infinity kept as markers for codec to name (JSON has none), nesting too deep for
    the parser a 400 that says where. orjson (`fast`) reads valid UTF-8 JSON in a tenth of json's time; what it
    refuses is read again by json, whose answer (markers, UTF-16 bodies) or error is the one given."""
    if fast:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    try:
        return DECODER.decode(text.decode(json.detect_encoding(text)))
    except RecursionError as exc:
        raise BadRequest(_too_deep(text)) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc


LONG_NUMBER = re.compile(rb"\d{19}")  # an integer orjson may have read as a float (beyond int64 / uint64)
DECODER = json.JSONDecoder(parse_constant=codec.NonFinite)  # made once: json.loads(**options) makes one a call
# a JSON string, or one structural character: enough to follow nesting without parsing values
TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


@dataclass(slots=True)
class _Open:
    """A JSON container still open where `_too_deep` scans: `[` or `{`, the index or key it is at, whether its
    current value began (a `:` read), and its 'name' value."""

    kind: bytes
    at: int | str | None
    value: bool = False
    name: object = None

    def take(self, token: bytes) -> None:
        """A `:`, `,` or string token read directly inside this container."""
        if token == b":":
            self.value = True
        elif token == b",":
            self.value = False
            if isinstance(self.at, int):  # in a list
                self.at += 1
        elif self.kind == b"{" and self.value and self.at == "name":
            self.name = json.loads(token)
        elif self.kind == b"{" and not self.value:  # a key
            self.at = json.loads(token)


def _too_deep(text: bytes) -> str:
    """Where `text` nests deeper than NESTING, from a scan that does not recurse: the input (named when its
    'name' came first) or the JSON path."""
    stack: list[_Open] = []
    for match in TOKEN.finditer(text):
        token = match.group()
        top = stack[-1] if stack else None
        if token in (b"[", b"{"):
            if len(stack) == NESTING:
                break
            stack.append(_Open(token, 0 if token == b"[" else None))
        elif token in (b"]", b"}"):
            if stack:
                stack.pop()
        elif top is not None:
            top.take(token)
    path = [f.at for f in stack]
    if path[:1] == ["inputs"] and len(path) > 2 and isinstance(path[1], int):
        name = stack[2].name
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


def _specs(items: list[Any], limits: Limits) -> list[Spec]:
    out = []
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
            out.append(Spec(name=name, datatype=datatype, shape=shape, ref=ref))
        elif size is not None:
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise BadRequest(f"input '{name}': parameters.binary_data_size must be a non-negative integer, "
                                 f"got {size!r}")
            if item.get("data") is not None:
                raise BadRequest(f"input '{name}' has 'data' and also parameters.binary_data_size; send one")
            out.append(Spec(name=name, datatype=datatype, shape=shape, size=size))
        elif "data" in item:
            out.append(Spec(name=name, datatype=datatype, shape=shape, data=item["data"]))
        else:
            raise BadRequest(f"input '{name}' has neither 'data' nor parameters.binary_data_size")
    return out


def _arrays(specs: list[Spec], tail: memoryview) -> list[InferInput]:
    """Each input's array: read from its slice of the binary tail, or its JSON data (shared memory: later); every
    byte of the tail must belong to an input."""
    out, offset = [], 0
    for s in specs:
        if s.ref is not None:
            out.append(InferInput(s.name, s.datatype, shm.UNREAD, s.ref))
            continue
        if s.size is not None:
            if offset + s.size > len(tail):
                raise BadRequest(f"input '{s.name}': binary_data_size {s.size} but only {len(tail) - offset} bytes "
                                 f"of binary data remain (truncated body?)")
            array = codec.from_bytes(s.name, s.datatype, s.shape, tail[offset:offset + s.size])
            offset += s.size
        else:
            array = codec.from_json(s.name, s.datatype, s.shape, s.data)
        out.append(InferInput(s.name, s.datatype, array))
    if offset != len(tail):
        raise BadRequest(f"{len(tail) - offset} bytes of binary data follow the JSON header but no input claims them")
    return out


def render_infer(result: InferResult, request: InferRequest, binary: dict[str, bool]) -> Reply:
    """The reply: a reply whose outputs all go as numeric binary data reuses the JSON header written for the last
    reply of that model, id, names, dtypes and shapes."""
    key = _head_key(result, request, binary)
    head = HEADS.get(key) if key is not None else None
    if head is None:
        reply = _render(result, request, binary)
        if key is not None and reply.header_length is not None and reply.header_length <= PLAN_BYTES:
            HEADS.keep(key, reply.body[:reply.header_length])
        return reply
    return Reply(status=200, body=b"".join([head, *(codec.to_bytes(a) for _, a in result.outputs)]),
                 content_type=OCTET_TYPE, header_length=len(head))


def _head_key(result: InferResult, request: InferRequest, binary: dict[str, bool]) -> tuple[Any, ...] | None:
    if result.shm or not result.outputs:
        return None
    default = binary[""]
    if not all(binary.get(n, default) and a.dtype.kind in "biuf" for n, a in result.outputs):
        return None
    return (result.model.name, result.model.version, request.id,
            *((n, a.dtype.str, a.shape) for n, a in result.outputs))


def _render(result: InferResult, request: InferRequest, binary: dict[str, bool]) -> Reply:
    """The response JSON, with binary outputs appended after it when asked; always JSON (never a bare NaN)."""
    entries, blobs = [], []
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
        else:  # large: encoded in slices (codec.json_text), spliced in
            entries.append(codec.dumps(entry)[:-1] + b',"data":[' + codec.json_text(array) + b"]}")
            continue
        entries.append(codec.dumps(entry))
    doc = {"model_name": result.model.name, "model_version": result.model.version, "outputs": None}
    if request.id:
        doc["id"] = request.id
    raw = codec.dumps(doc).replace(b'"outputs":null', b'"outputs":[' + b",".join(entries) + b"]", 1)
    if not blobs:
        return Reply(status=200, body=raw)
    return Reply(status=200, body=b"".join([raw, *blobs]), content_type=OCTET_TYPE, header_length=len(raw))
