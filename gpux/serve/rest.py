"""The REST side of the protocol as a bare ASGI app: routes, errors, auth, request metrics; large bodies decode off
the event loop (gpux/serve/offload.py)."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpux.serve.access import AccessLog
from gpux.serve.body import Limits, Reply, decompress, json_reply, parse_infer, render_infer
from gpux.serve.errors import BadRequest, NotServed, RequestTimeout, ServeError, TooLarge, Unauthorized, Unavailable
from gpux.serve.lifecycle import Lifecycle
from gpux.serve.metrics import CONTENT_TYPE as METRICS_TYPE
from gpux.serve.metrics import Metrics
from gpux.serve.model_config import refuse_files
from gpux.serve.models import Repository
from gpux.serve.offload import Offload, on_thread
from gpux.serve.protocol import infer, server_metadata

HEADER_LENGTH = "inference-header-content-length"
CUDA_REFUSED = ("CUDA shared memory is not supported: gpux serve registers no CUDA memory (as Triton's CPU-only "
                "build); use system shared memory (/v2/systemsharedmemory) or send the tensors in the request")
# bodies and outputs above these sizes are decoded / rendered off the event loop (a process for JSON, else a thread):
# a hop costs ~0.1 ms (a process ~1 ms), decoding 64 KiB of JSON or rendering 16 Ki values costs more, and the
# event loop keeps answering everyone else meanwhile
OFF_LOOP_BYTES = 64 * 1024
OFF_LOOP_ELEMENTS = 16 * 1024

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def error_reply(exc: ServeError) -> Reply:
    return json_reply({"error": exc.message}, exc.status)


def _options(body: bytes) -> dict[str, Any]:
    """A repository request's JSON object (empty when no body); its parameters are not read."""
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise BadRequest("request JSON must be an object")
    return doc


def _dict_of(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"'parameters' must be an object, got {value!r}")
    return value


def load_override(name: str, parameters: dict[str, Any]) -> str | None:
    """A load's parameters: `config` (a ModelConfig as JSON text) is the override; model files (`file:...`) and any
    other parameter are refused, never ignored."""
    files = [k for k in parameters if k.startswith("file:")]
    if files:
        raise refuse_files(name, files)
    other = [k for k in parameters if k != "config"]
    if other:
        raise BadRequest(f"failed to load '{name}': parameter '{other[0]}' is not one gpux serve takes (it takes "
                         "'config', a model configuration override as JSON)")
    config = parameters.get("config")
    if config is not None and not isinstance(config, str):
        raise BadRequest(f"failed to load '{name}': parameters.config must be JSON text, got {type(config).__name__}")
    return config


def cuda_shared_memory(method: str, rest: list[str]) -> Reply:
    """The CUDA shared memory extension as Triton's CPU-only build answers it: no region, unregister OK, register
    refused (a client's clean-up calls pass; its CUDA tensors are refused, never ignored)."""
    action = rest[2:] if rest[:1] == ["region"] and len(rest) == 3 else rest
    if action == ["status"]:
        return json_reply([])
    if action == ["unregister"] and method == "POST":
        return Reply(status=200, body=b"")
    if action == ["register"] and method == "POST":
        raise BadRequest(CUDA_REFUSED)
    raise NotServed(f"unknown path /v2/cudasharedmemory/{'/'.join(rest)}")


def infer_target(path: str) -> tuple[str, str] | None:
    """(model, version) when `path` is an infer route: every answer to it is counted in the request metrics."""
    parts = path.strip("/").split("/")
    if parts[:2] != ["v2", "models"] or parts[-1] != "infer":
        return None
    if len(parts) == 4:
        return parts[2], ""
    return (parts[2], parts[4]) if len(parts) == 6 and parts[3] == "versions" else None


async def read_body(receive: Receive, limit: int, over: Callable[[], ServeError]) -> bytes:
    """A request's body, at most `limit` bytes (`over()` is raised past it)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":  # closed before the body was in (serve.body_timeout_s, or the client)
            raise RequestTimeout("the connection closed before the request body was received in full "
                                 "(serve.body_timeout_s)")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise over()
        chunks.append(chunk)
        if not message.get("more_body"):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class RestApp:
    """ASGI app; `repo` holds the models, `api_key` (when set) guards everything but the health routes."""

    def __init__(self, repo: Repository, metrics: Metrics, limits: Limits, api_key: str | None = None,
                 offload: Offload | None = None, lifecycle: Lifecycle | None = None, *,
                 access: AccessLog | None = None) -> None:
        self.repo, self.metrics, self.limits, self.lifecycle = repo, metrics, limits, lifecycle
        self.api_key = api_key.encode() if api_key else None
        self.offload = offload or Offload()
        self.access = access or AccessLog()

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
                body = await on_thread(len(body) > OFF_LOOP_BYTES, decompress, body, headers[b"content-encoding"],
                                       self.limits.max_body_bytes)
            reply = await self._route(method, path, body, headers)
        except ServeError as exc:
            reply = error_reply(exc)
        except Exception as exc:  # a bug: answer 500, keep serving
            logging.getLogger("gpux.serve").exception("internal error on %s %s", method, path)
            reply = error_reply(ServeError(f"internal error: {type(exc).__name__}: {exc}"))
        await self._send(send, reply, self.repo.draining)
        target = infer_target(path)
        if target is not None:  # every answer, whatever its status
            labels = reply.labels or self.repo.metric_labels(*target)
            self.metrics.answered(*labels, "http", reply.status, reply.seconds)
            if reply.status != 200:
                self.repo.refused(*target, time.perf_counter() - started)
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
        return await read_body(receive, limit, lambda: TooLarge(
            f"request body exceeds the limit of {limit} bytes (serve.max_body_bytes)"))

    async def _route(self, method: str, path: str, body: bytes, headers: dict[bytes, bytes]) -> Reply:
        parts = path.strip("/").split("/")
        if parts == ["metrics"]:
            return Reply(status=200, body=self.metrics.render(), content_type=METRICS_TYPE.encode())
        if parts[0] != "v2":
            raise NotServed(f"unknown path {path}; the API lives under /v2")
        rest = parts[1:]
        if rest in ([], [""]):
            return json_reply(server_metadata())
        if rest[0] == "health" and len(rest) == 2 and rest[1] in ("live", "ready"):  # the OIP's bodies
            ok = self.repo.live if rest[1] == "live" else self.repo.ready
            if not ok:
                raise Unavailable("server is shutting down" if self.repo.draining else f"server is not {rest[1]}")
            return json_reply({rest[1]: True})
        if rest[0] == "repository" and self.lifecycle is not None:
            return await self._repository(method, rest[1:], body)
        if rest[0] == "systemsharedmemory":
            return self._shared_memory(method, rest[1:], body)
        if rest[0] == "cudasharedmemory":
            return cuda_shared_memory(method, rest[1:])
        if rest == ["models", "stats"] and method == "GET":
            return json_reply(self.repo.statistics())
        if rest[0] == "models" and len(rest) >= 2:
            return await self._model_route(method, rest[1:], body, headers)
        raise NotServed(f"unknown path {path}")

    async def _model_route(self, method: str, rest: list[str], body: bytes, headers: dict[bytes, bytes]) -> Reply:
        name, version, action = rest[0], "", rest[1:]
        if action[:1] == ["versions"] and len(action) >= 2:
            version, action = action[1], action[2:]
        if action == []:
            return json_reply(self.repo.metadata(name, version))
        if action == ["stats"]:
            return json_reply(self.repo.statistics(name, version))
        if action == ["ready"]:  # the OIP's body; a model not ready is its error (404 unknown, 503 not ready)
            model = self.repo.get(name, version)
            return json_reply({"name": model.name, "ready": True})
        if action == ["config"]:
            return json_reply(self.repo.config(name, version))
        if action == ["infer"]:
            if method != "POST":
                return json_reply({"error": "use POST for infer"}, 405)
            return await self._infer(name, version, body, headers)
        raise NotServed(f"unknown path /v2/models/{'/'.join(rest)}")

    async def _repository(self, method: str, rest: list[str], body: bytes) -> Reply:
        """The model repository extension: POST index, POST models/{m}/load and /unload."""
        assert self.lifecycle is not None
        if method != "POST":
            return json_reply({"error": "use POST for the repository API"}, 405)
        doc = _options(body)
        if rest == ["index"]:
            ready = doc.get("ready", False)
            if not isinstance(ready, bool):
                raise BadRequest(f"'ready' must be true or false, got {ready!r}")
            return json_reply(self.lifecycle.index(ready))
        if len(rest) == 3 and rest[0] == "models" and rest[2] == "load":
            await self.lifecycle.load(rest[1], load_override(rest[1], _dict_of(doc.get("parameters"))))
            return Reply(status=200, body=b"")
        if len(rest) == 3 and rest[0] == "models" and rest[2] == "unload":
            await self.lifecycle.unload(rest[1])
            return Reply(status=200, body=b"")
        raise NotServed(f"unknown path /v2/repository/{'/'.join(rest)}")

    def _shared_memory(self, method: str, rest: list[str], body: bytes) -> Reply:
        """The system shared memory extension: [region/{name}/]status, register, unregister."""
        name, action = (rest[1], rest[2:]) if rest[:1] == ["region"] and len(rest) == 3 else ("", rest)
        if action == ["status"]:
            if method != "GET":
                return json_reply({"error": "use GET for shared memory status"}, 405)
            return json_reply(self.repo.shm.status(name))
        if action in (["register"], ["unregister"]) and (name or action == ["unregister"]):
            if method != "POST":
                return json_reply({"error": f"use POST to {action[0]} shared memory"}, 405)
            if action == ["unregister"]:
                self.repo.shm.unregister(name)
            else:
                doc = _options(body)
                self.repo.shm.register(name, doc.get("key"), doc.get("offset", 0), doc.get("byte_size"))
            return Reply(status=200, body=b"")
        raise NotServed(f"unknown path /v2/systemsharedmemory/{'/'.join(rest)}")

    async def _infer(self, name: str, version: str, body: bytes, headers: dict[bytes, bytes]) -> Reply:
        started = time.perf_counter()
        self.repo.get(name, version)  # 404 / 503 before looking at the body
        split = headers.get(HEADER_LENGTH.encode())
        args = (name, version, body, split, self.limits)
        if (int(split) if split is not None and split.isdigit() else len(body)) > OFF_LOOP_BYTES:  # JSON: process
            request, binary = await self.offload.in_process(parse_infer, *args)
        elif len(body) > OFF_LOOP_BYTES:  # a small JSON header: a large binary tail decodes on a thread
            request, binary = await on_thread(True, parse_infer, *args)
        else:
            request, binary = parse_infer(*args)
        result = await infer(self.repo, request)
        if sum(a.size for _, a in result.outputs) > OFF_LOOP_ELEMENTS:
            reply = await on_thread(True, render_infer, result, request, binary)
        else:
            reply = render_infer(result, request, binary)
        reply.labels, reply.seconds = (result.model.name, result.model.version), time.perf_counter() - started
        return reply

    @staticmethod
    async def _send(send: Send, reply: Reply, draining: bool = False) -> None:
        headers = [(b"content-type", reply.content_type), (b"content-length", str(len(reply.body)).encode())]
        if reply.header_length is not None:
            headers.append((HEADER_LENGTH.encode(), str(reply.header_length).encode()))
        if draining:  # the connection closes after this answer, and says so
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    def _log(self, scope: dict[str, Any], reply: Reply, started: float) -> None:
        if self.access.on():
            client = scope.get("client") or ("", 0)
            self.access.line(started, protocol="http", client=f"{client[0]}:{client[1]}", method=scope["method"],
                             path=scope["path"], status=reply.status, bytes=len(reply.body))

