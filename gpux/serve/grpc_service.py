"""The gRPC side of the protocol: inference.GRPCInferenceService on grpc.aio, raw tensor contents."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np

from gpux.serve import codec, shm
from gpux.serve.access import AccessLog
from gpux.serve.classify import class_count
from gpux.serve.errors import BadRequest, NotServed, ServeError, Unauthorized
from gpux.serve.grpc_messages import Malformed, Unimplemented, handlers
from gpux.serve.lifecycle import Lifecycle
from gpux.serve.metrics import Metrics
from gpux.serve.model_config import message_of
from gpux.serve.models import Repository
from gpux.serve.offload import on_thread
from gpux.serve.proto import inference_pb2 as pb
from gpux.serve.proto import inference_pb2_grpc as pb_grpc
from gpux.serve.protocol import InferInput, InferRequest, infer, server_metadata
from gpux.serve.rest import CUDA_REFUSED, OFF_LOOP_BYTES, Limits, load_override

# typed `contents` field per datatype, for clients that do not send raw bytes
CONTENTS = {
    "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents", "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
}  # fmt: skip
STREAM_WINDOW = 64  # requests of one ModelStreamInfer stream in flight at once (more wait to be read)
PARAMETER = {bool: "bool_param", int: "int64_param", str: "string_param", float: "double_param", list: "string_param"}


class InferenceService(pb_grpc.GRPCInferenceServiceServicer):
    """Health, metadata and ModelInfer over the shared model repository."""

    def __init__(self, repo: Repository, metrics: Metrics, limits: Limits, api_key: str | None = None,
                 lifecycle: Lifecycle | None = None, *, access: AccessLog | None = None) -> None:
        self.repo, self.metrics, self.limits, self.lifecycle = repo, metrics, limits, lifecycle
        self.api_key = api_key
        self.access = access or AccessLog()

    async def _guard(self, context: grpc.aio.ServicerContext, error: ServeError) -> None:
        await context.abort(getattr(grpc.StatusCode, error.grpc_code), error.message)

    def _authorize(self, context: grpc.aio.ServicerContext) -> None:
        if self.api_key is None:
            return
        meta = dict(context.invocation_metadata() or ())
        given = str(meta.get("authorization", ""))
        token = given[7:] if given[:7].lower() == "bearer " else str(meta.get("x-api-key", ""))
        if not hmac.compare_digest(token.encode(), self.api_key.encode()):
            raise Unauthorized("missing or wrong API key: send metadata 'authorization: Bearer <key>'")

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return pb.ServerLiveResponse(live=self.repo.live)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.repo.ready)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            return pb.ModelReadyResponse(ready=self.repo.find(request.name, request.version).ready)
        except ServeError as exc:
            await self._guard(context, exc)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.ServerMetadataResponse(**server_metadata())

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            doc = self.repo.metadata(request.name, request.version)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.ModelMetadataResponse(
            name=doc["name"], versions=doc["versions"], platform=doc["platform"],
            inputs=[tensor_metadata(t) for t in doc["inputs"]], outputs=[tensor_metadata(t) for t in doc["outputs"]])

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        from google.protobuf.json_format import ParseDict

        try:
            self._authorize(context)
            doc = self.repo.statistics(request.name, request.version)
        except ServeError as exc:
            await self._guard(context, exc)
        return ParseDict(doc, pb.ModelStatisticsResponse())

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            models = self._lifecycle().index(request.ready)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.RepositoryIndexResponse(models=[pb.RepositoryIndexResponse.ModelIndex(**m) for m in models])

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            config = message_of(self.repo.config(request.name, request.version))
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.ModelConfigResponse(config=config)

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            params = {k: getattr(v, v.WhichOneof("parameter_choice") or "string_param")
                      for k, v in request.parameters.items()}
            await self._lifecycle().load(request.model_name, load_override(request.model_name, params))
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            await self._lifecycle().unload(request.model_name)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.RepositoryModelUnloadResponse()

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            regions = self.repo.shm.status(request.name)
        except ServeError as exc:
            await self._guard(context, exc)
        status = pb.SystemSharedMemoryStatusResponse.RegionStatus
        return pb.SystemSharedMemoryStatusResponse(regions={r["name"]: status(**r) for r in regions})

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            self.repo.shm.register(request.name, request.key, request.offset, request.byte_size)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            self.repo.shm.unregister(request.name)
        except ServeError as exc:
            await self._guard(context, exc)
        return pb.SystemSharedMemoryUnregisterResponse()

    async def CudaSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        return pb.CudaSharedMemoryStatusResponse()  # as Triton's CPU-only build: no region

    async def CudaSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, CUDA_REFUSED)

    async def CudaSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()

    def _lifecycle(self) -> Lifecycle:
        if self.lifecycle is None:
            raise NotServed("the model repository API is not served here")
        return self.lifecycle

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        try:
            self._authorize(context)
            if isinstance(request, Malformed):
                raise request.error()
        except ServeError as exc:
            self._answered(request, exc.status, time.perf_counter())
            await self._guard(context, exc)
        response, error = await self._infer(request)
        if error is None:
            return response
        await self._guard(context, error)

    async def ModelStreamInfer(self, requests: Any, context: Any) -> Any:
        """Each request on the stream answered in order; a failing one gets error_message and the stream goes on.
        Up to STREAM_WINDOW requests of a stream run at once (so they can share a batch)."""
        try:
            self._authorize(context)
        except ServeError as exc:
            await self._guard(context, exc)
        answers: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue(STREAM_WINDOW)

        async def read() -> None:
            try:
                async for request in requests:
                    await answers.put(asyncio.ensure_future(self._infer(request)))
            except Exception as exc:  # the client went away: the stream ends
                logging.getLogger("gpux.serve").debug("stream closed: %s", exc)
            finally:
                await answers.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while (task := await answers.get()) is not None:
                response, error = await task
                yield (pb.ModelStreamInferResponse(infer_response=response) if error is None else
                       pb.ModelStreamInferResponse(error_message=error.message, infer_response=response))
        finally:
            reader.cancel()

    async def _infer(self, request: Any) -> tuple[Any, ServeError | None]:
        """The response to one ModelInferRequest, or its error (then the response only names the request)."""
        started = time.perf_counter()
        try:
            if isinstance(request, Malformed):
                raise request.error()
            decoded = await on_thread(request.ByteSize() > OFF_LOOP_BYTES, decode, request, self.limits)
            result = await infer(self.repo, decoded)
            response = encode(result.model.name, result.model.version, request.id, result.outputs, result.shm)
        except ServeError as exc:
            error = exc
        except Exception as exc:  # a bug: INTERNAL with its one line, keep serving
            logging.getLogger("gpux.serve").exception("internal error in ModelInfer")
            error = ServeError(f"internal error: {type(exc).__name__}: {exc}")
        else:
            self._answered(request, 200, started, (result.model.name, result.model.version))
            return response, None
        self._answered(request, error.status, started)
        return pb.ModelInferResponse(model_name=request.model_name, model_version=request.model_version,
                                     id=request.id), error

    def _answered(self, request: Any, status: int, started: float, labels: tuple[str, str] | None = None) -> None:
        """Every answer counted in the request metrics and logged, with its real status."""
        seconds = time.perf_counter() - started
        self.metrics.answered(*(labels or self.repo.metric_labels(request.model_name, request.model_version)), "grpc",
                              status, seconds if labels else None)
        if status != 200:
            self.repo.refused(request.model_name, request.model_version, seconds)
        self.access.line(started, protocol="grpc", method="ModelInfer", model=request.model_name,
                         version=request.model_version, status=status)


def decode(request: Any, limits: Limits) -> InferRequest:
    """A ModelInferRequest as the transport-free request; raw contents go by input order, to the inputs not in
    shared memory (tritonclient sends none for those)."""
    raw = request.raw_input_contents
    params = [_params(t.parameters) for t in request.inputs]
    own = sum("shared_memory_region" not in p for p in params)
    if raw and len(raw) != own:
        raise BadRequest(f"{len(raw)} raw_input_contents for {own} inputs not in shared memory")
    inputs, contents = [], iter(raw)
    for tensor, tensor_params in zip(request.inputs, params, strict=True):
        name, datatype = tensor.name, tensor.datatype
        if datatype not in codec.NUMPY:
            raise BadRequest(f"input '{name}': unknown datatype {datatype!r}; one of {', '.join(codec.NUMPY)}")
        shape = codec.check_shape(name, list(tensor.shape), limits.max_tensor_elements)
        ref = shm.input_ref(name, datatype, shape, tensor_params)
        if ref is not None:
            inputs.append(InferInput(name, datatype, shm.UNREAD, ref))
            continue
        if raw and tensor.HasField("contents"):
            raise BadRequest(f"input '{name}': contents and raw_input_contents in one request; send either (as "
                             "Triton requires)")
        if raw:
            array = codec.from_bytes(name, datatype, shape, next(contents))
        elif datatype in CONTENTS:
            array = codec.from_contents(name, datatype, shape, list(getattr(tensor.contents, CONTENTS[datatype])))
        else:
            raise BadRequest(f"input '{name}': {datatype} must travel in raw_input_contents")
        inputs.append(InferInput(name, datatype, array))
    outputs = [o.name for o in request.outputs] or None
    classes = {o.name: class_count(o.name, o.parameters["classification"].int64_param)
               for o in request.outputs if "classification" in o.parameters}
    in_shm = {o.name: ref for o in request.outputs
              if (ref := shm.ref_of(f"output '{o.name}'", _params(o.parameters))) is not None}
    return InferRequest(model=request.model_name, version=request.model_version, id=request.id, inputs=inputs,
                        outputs=outputs, classification=classes, parameters=_params(request.parameters),
                        shm_outputs=in_shm)


def _params(parameters: Any) -> dict[str, Any]:
    """A map of InferParameter as plain values (most requests carry none: no walk)."""
    if not parameters:
        return {}
    return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in parameters.items()
            if v.WhichOneof("parameter_choice")}


def tensor_metadata(entry: dict[str, Any]) -> Any:
    """REST's tensor metadata as the message; a parameter that is a list (a shape) travels as its JSON text."""
    params: dict[str, Any] = {}
    for key, value in entry.get("parameters", {}).items():
        fields: dict[str, Any] = {PARAMETER[type(value)]: json.dumps(value) if isinstance(value, list) else value}
        params[key] = pb.InferParameter(**fields)
    return pb.ModelMetadataResponse.TensorMetadata(name=entry["name"], datatype=entry["datatype"],
                                                   shape=entry["shape"], parameters=params)


def encode(name: str, version: str, req_id: str, outputs: list[tuple[str, np.ndarray]],
           in_shm: dict[str, dict[str, Any]] | None = None) -> Any:
    """The response; outputs written to shared memory come last, with their parameters and no contents (so each
    other output's raw_output_contents index is its place, which tritonclient's as_numpy counts on)."""
    response = pb.ModelInferResponse(model_name=name, model_version=version, id=req_id)
    in_shm = in_shm or {}
    for out_name, array in sorted(outputs, key=lambda o: o[0] in in_shm):  # stable: the others keep their order
        params = in_shm.get(out_name)
        if params is None:
            response.outputs.add(name=out_name, datatype=codec.datatype_of(array), shape=array.shape)
            response.raw_output_contents.append(codec.to_bytes(array))
        else:
            where = {k: pb.InferParameter(**{PARAMETER[type(v)]: v}) for k, v in params.items()}
            response.outputs.add(name=out_name, datatype=codec.datatype_of(array), shape=array.shape, parameters=where)
    return response


def make_server(service: InferenceService, address: str, limits: Limits,
                wrap: Callable[[Any], Any] = lambda handler: handler) -> tuple[grpc.aio.Server, int]:
    """A grpc.aio server with the service on `address` (its generic handler passed through `wrap`), and the port it
    bound."""
    options = [("grpc.max_receive_message_length", limits.max_body_bytes),
               ("grpc.max_send_message_length", max(limits.max_body_bytes, 64 * 2**20)),
               ("grpc.so_reuseport", 0)]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((wrap(handlers(service)), Unimplemented()))
    port = server.add_insecure_port(address)
    return server, port
