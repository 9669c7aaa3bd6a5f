"""The gRPC service's methods registered with deserializers that never raise: a message that does not parse comes
in as `Malformed`, answered INVALID_ARGUMENT (and counted and logged) by the method, where grpc itself would answer
UNKNOWN ("Unexpected DecodeError") without a word in the access log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from gpux.serve.errors import BadRequest
from gpux.serve.proto import inference_pb2 as pb

SERVICE = "inference.GRPCInferenceService"
KINDS = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
         (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}


class Malformed:
    """A request message that did not parse, in its place; it names no model."""

    model_name = model_version = id = ""

    def __init__(self, kind: str, why: str) -> None:
        self.kind, self.why = kind, why

    def error(self) -> BadRequest:
        return BadRequest(f"malformed {self.kind} message: {self.why}")


def tolerant(message: Any) -> Callable[[bytes], Any]:
    name = message.DESCRIPTOR.name

    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as exc:  # protobuf's DecodeError, or a RuntimeWarning-like error of the C parser
            return Malformed(name, str(exc) or type(exc).__name__)

    return parse


def refusing(method: Callable[..., Any]) -> Callable[..., Any]:
    """A unary method that answers a Malformed request INVALID_ARGUMENT (ModelInfer counts it itself)."""

    async def call(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.error().message)
        return await method(request, context)

    return call


def handlers(servicer: Any) -> grpc.GenericRpcHandler:
    """Every method of the service, as the generated code registers them, with tolerant deserializers."""
    methods = {}
    for m in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        request, response = getattr(pb, m.input_type.name), getattr(pb, m.output_type.name)
        method = getattr(servicer, m.name)
        if not m.client_streaming and m.name != "ModelInfer":
            method = refusing(method)
        methods[m.name] = KINDS[m.client_streaming, m.server_streaming](
            method, request_deserializer=tolerant(request), response_serializer=response.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE, methods)


class Unimplemented(grpc.GenericRpcHandler):
    """Any method the service does not have: UNIMPLEMENTED naming it and gpux, where grpc says 'Method not found!'."""

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        method = handler_call_details.method

        async def refuse(request: Any, context: Any) -> Any:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented by gpux serve; "
                                "docs/serve.md lists the methods it serves")

        return grpc.unary_unary_rpc_method_handler(refuse)
