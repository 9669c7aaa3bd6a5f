"""The REST side of the protocol as a bare ASGI app: routes, JSON and binary-extension bodies, errors, auth."""

from __future__ import annotations

import hmac
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpux.serve import codec
from gpux.serve.classify import class_count
from gpux.serve.errors import BadRequest, NotFound, ServeError, TooLarge, Unauthorized, Unavailable
from gpux.serve.metrics import CONTENT_TYPE as METRICS_TYPE
from gpux.serve.metrics import Metrics
from gpux.serve.models import Repository
from gpux.serve.protocol import InferInput, InferRequest, InferResult, infer, server_metadata

HEADER_LENGTH = "inference-header-content-length"
JSON_TYPE = b"application/json"
access_log = logging.getLogger("gpux.serve.access")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class Limits:
    max_body_bytes: int
    max_tensor_elements: int


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: bytes = JSON_TYPE
    header_length: int | None = None
    model: str = ""


def json_reply(doc: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(doc, separators=(",", ":")).encode())


def error_reply(exc: ServeError) -> Reply:
    return json_reply({"error": exc.message}, exc.status)


class RestApp:
    """ASGI app; `repo` holds the models, `api_key` (when set) guards everything but the health routes."""

    def __init__(self, repo: Repository, metrics: Metrics, limits: Limits, api_key: str | None = None) -> None:
        self.repo, self.metrics, self.limits = repo, metrics, limits
        self.api_key = api_key.encode() if api_key else None

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        headers = dict(scope["headers"])
        path, method = scope["path"], scope["method"]
        try:
            self._authorize(path, headers)
            body = await self._body(receive, headers) if method == "POST" else b""
            if body and headers.get(b"content-encoding"):
                body = decompress(body, headers[b"content-encoding"], self.limits.max_body_bytes)
            reply = await self._route(method, path, body, headers)
        except ServeError as exc:
            reply = error_reply(exc)
        except Exception as exc:  # a bug: answer 500, keep serving
            logging.getLogger("gpux.serve").exception("internal error on %s %s", method, path)
            reply = error_reply(ServeError(f"internal error: {type(exc).__name__}: {exc}"))
        await self._send(send, reply)
        self._log(scope, reply, started)

    def _authorize(self, path: str, headers: dict[bytes, bytes]) -> None:
        if self.api_key is None or path.startswith("/v2/health/"):
            return
        given = headers.get(b"authorization", b"")
        token = given[7:] if given[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
        if not hmac.compare_digest(token, self.api_key):
            raise Unauthorized("missing or wrong API key: send 'Authorization: Bearer <key>'")

    async def _body(self, receive: Receive, headers: dict[bytes, bytes]) -> bytes:
        limit = self.limits.max_body_bytes
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise TooLarge(f"request body of {int(declared)} bytes exceeds the limit of {limit} (serve.max_body_bytes)")
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"request body exceeds the limit of {limit} bytes (serve.max_body_bytes)")
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _route(self, method: str, path: str, body: bytes, headers: dict[bytes, bytes]) -> Reply:
        parts = path.strip("/").split("/")
        if parts == ["metrics"]:
            return Reply(200, self.metrics.render(), METRICS_TYPE.encode())
        if parts[0] != "v2":
            raise NotFound(f"unknown path {path}; the API lives under /v2")
        rest = parts[1:]
        if rest in ([], [""]):
            return json_reply(server_metadata())
        if rest[0] == "health" and len(rest) == 2 and rest[1] in ("live", "ready"):
            ok = self.repo.live if rest[1] == "live" else self.repo.ready
            if not ok:
                raise Unavailable(f"server is not {rest[1]}")
            return Reply(200, b"")
        if rest[0] == "models" and len(rest) >= 2:
            return await self._model_route(method, rest[1:], body, headers)
        raise NotFound(f"unknown path {path}")

    async def _model_route(self, method: str, rest: list[str], body: bytes, headers: dict[bytes, bytes]) -> Reply:
        name, version, action = rest[0], "", rest[1:]
        if action[:1] == ["versions"] and len(action) >= 2:
            version, action = action[1], action[2:]
        if action == []:
            return json_reply(self.repo.metadata(name, version))
        if action == ["ready"]:
            model = self.repo.find(name, version)
            if not model.ready:
                raise Unavailable(f"model '{name}' version {model.version} is not ready yet")
            return Reply(200, b"")
        if action == ["infer"]:
            if method != "POST":
                return json_reply({"error": "use POST for infer"}, 405)
            return await self._infer(name, version, body, headers)
        raise NotFound(f"unknown path /v2/models/{'/'.join(rest)}")

    async def _infer(self, name: str, version: str, body: bytes, headers: dict[bytes, bytes]) -> Reply:
        started = time.perf_counter()
        try:
            self.repo.get(name, version)  # 404 / 503 before looking at the body
            request, binary = parse_infer(name, version, body, headers.get(HEADER_LENGTH.encode()), self.limits)
            result = await infer(self.repo, request)
        except ServeError as exc:
            self.metrics.answered(*self.repo.labels(name, version), "http", exc.status, None)
            raise
        reply = render_infer(result, request, binary)
        self.metrics.answered(result.model.name, result.model.version, "http", 200, time.perf_counter() - started)
        reply.model = result.model.name
        return reply

    @staticmethod
    async def _send(send: Send, reply: Reply) -> None:
        headers = [(b"content-type", reply.content_type), (b"content-length", str(len(reply.body)).encode())]
        if reply.header_length is not None:
            headers.append((HEADER_LENGTH.encode(), str(reply.header_length).encode()))
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    @staticmethod
    def _log(scope: dict[str, Any], reply: Reply, started: float) -> None:
        if not access_log.isEnabledFor(logging.INFO):
            return
        client = scope.get("client") or ("", 0)
        access_log.info(json.dumps({
            "ts": round(time.time(), 3), "protocol": "http", "client": f"{client[0]}:{client[1]}",
            "method": scope["method"], "path": scope["path"], "status": reply.status, "bytes": len(reply.body),
            "ms": round((time.perf_counter() - started) * 1000, 3)}, separators=(",", ":")))


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
    try:
        doc = json.loads(body[:split])
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise BadRequest("request JSON must be an object with an 'inputs' list")
    tail = memoryview(body)[split:]
    inputs, used = _inputs(doc["inputs"], tail, limits)
    if used != len(tail):
        raise BadRequest(f"{len(tail) - used} bytes of binary data follow the JSON header but no input claims them")
    params = _dict(doc.get("parameters"), "parameters")
    default_binary = bool(params.get("binary_data_output", False))
    outputs, binary, classes = None, {}, {}
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise BadRequest("'outputs' must be a list of {name, parameters}")
        outputs = []
        for out in doc["outputs"]:
            if not isinstance(out, dict) or not isinstance(out.get("name"), str):
                raise BadRequest("each requested output needs a 'name'")
            outputs.append(out["name"])
            out_params = _dict(out.get("parameters"), "outputs.parameters")
            binary[out["name"]] = bool(out_params.get("binary_data", default_binary))
            if "classification" in out_params:
                classes[out["name"]] = class_count(out["name"], out_params["classification"])
    binary[""] = default_binary
    req_id = doc.get("id", "")
    request = InferRequest(name, version, str(req_id) if req_id is not None else "", inputs, outputs, classes, params)
    return request, binary


def _dict(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"'{what}' must be an object")
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
        size = _dict(item.get("parameters"), "inputs.parameters").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0:
                raise BadRequest(f"input '{name}': binary_data_size must be a non-negative integer")
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
    """The response JSON, with binary outputs appended after it when asked."""
    outputs, blobs = [], []
    for name, array in result.outputs:
        entry: dict[str, Any] = {"name": name, "datatype": codec.datatype_of(array), "shape": list(array.shape)}
        if binary.get(name, binary[""]):
            blob = codec.to_bytes(array)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = codec.to_json(array)
        outputs.append(entry)
    doc: dict[str, Any] = {"model_name": result.model.name, "model_version": result.model.version,
                           "outputs": outputs}
    if request.id:
        doc["id"] = request.id
    head = json.dumps(doc, separators=(",", ":")).encode()
    if not blobs:
        return Reply(200, head)
    return Reply(200, b"".join([head, *blobs]), b"application/octet-stream", header_length=len(head))
