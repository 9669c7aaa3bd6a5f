"""Request errors of the server: one class per HTTP status, with the gRPC status each maps to."""

from __future__ import annotations


class ServeError(Exception):
    """A request that cannot be answered; `message` is sent to the client as {"error": message}."""

    status = 500
    grpc_code = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ServeError):
    status, grpc_code = 400, "INVALID_ARGUMENT"


class Unauthorized(ServeError):
    status, grpc_code = 401, "UNAUTHENTICATED"


class NotServed(ServeError):
    """No such model, version or path is served here (404)."""

    status, grpc_code = 404, "NOT_FOUND"


class RequestTimeout(ServeError):
    status, grpc_code = 408, "DEADLINE_EXCEEDED"


class TooLarge(ServeError):
    status, grpc_code = 413, "RESOURCE_EXHAUSTED"


class Unavailable(ServeError):
    status, grpc_code = 503, "UNAVAILABLE"


def is_bug(exc: BaseException) -> bool:
    """A gpux bug by the one policy (`gpux.errors.classify`): a 500 with its traceback logged, never the request's
    nor the model's fault."""
    from gpux.errors import Failure, classify

    return classify(exc) is Failure.BUG
