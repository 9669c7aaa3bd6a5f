"""HTTP connections that cannot be held by slow or oversized clients: uvicorn's protocol with a deadline for each
request's head and for its body, and a bound on the head's size.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for a request line and headers,
and for a body shorter than its Content-Length: a client sending them a byte at a time (slowloris) or nothing at all
holds a connection as long as it likes; nor does it bound the size of the headers (httptools buffers them all).
Here a connection must deliver each request's head within `header_timeout_s` of the connection opening or of the
head's first byte, and its body within `body_timeout_s` of the head's end, else it is answered 408 and closed; a
head above `max_header_bytes` is answered 431 and closed before it is parsed further, and a connection past
`max_connections` open is answered 503 and closed. Responses are not timed. One
timer per connection watches both deadlines, re-armed only when it fires: nothing is armed or cancelled per request.
While the server drains, a connection busy with a request closes after its answer; an idle one waits DRAIN_GRACE_S
for a request already on its way (gpux/serve/drain.py closes the listeners)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

from gpux.serve.body import Limits

if TYPE_CHECKING:
    _Protocol = Any  # uvicorn's protocol, chosen when `guarded` makes the class
else:
    _Protocol = object

END_OF_HEAD = b"\r\n\r\n"
DRAIN_GRACE_S = 0.5  # an idle connection of a draining server waits this long for a request already sent
LINGER_S = 2.0  # a connection refused while its client still sends: what it sends is read and dropped this long


def reply(status: str, message: str) -> bytes:
    """A whole HTTP response that closes the connection, its body {"error": message}."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode() + body


def refusals(limits: Limits) -> dict[str, bytes]:
    return {
        "head": reply("408 Request Timeout", f"request line and headers not received within {limits.header_timeout_s}"
                                             " s (serve.header_timeout_s)"),
        "body": reply("408 Request Timeout", f"request body not received within {limits.body_timeout_s} s "
                                             "(serve.body_timeout_s)"),
        "size": reply("431 Request Header Fields Too Large",
                      f"request line and headers exceed {limits.max_header_bytes} bytes (serve.max_header_bytes)"),
        "busy": reply("503 Service Unavailable", f"more than {limits.max_connections} connections open "
                                                 "(serve.max_connections): retry later"),
    }


class Guard(_Protocol):
    """What `guarded` adds to uvicorn's protocol: the deadlines, the head's bound, how a draining connection ends."""

    http = "httptools"  # the parser under it: "httptools" (callbacks say where a request is) or "h11"
    deadlines: ClassVar[dict[str, float]] = {}  # set per class by `guarded`
    refused: ClassVar[dict[str, bytes]] = {}
    max_header_bytes = 0
    max_connections = 0

    _watch: Any = None  # one timer per connection, re-armed only when it fires (nothing per request)
    _phase = "idle"  # idle (before the first request), head, body, done (answering, or between requests)
    _since = 0.0  # when the phase began (loop time): a deadline runs from there
    _head_bytes = 0
    _tail = b""
    _dropping = False  # refused while the client still sends: read and drop until closed

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self._refuse("busy")
            return
        self._since = self.loop.time()
        self._watch = self.loop.call_later(min(self.deadlines.values()), self._check)

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        if self._phase != "body" and self._head_too_large(data):
            self._refuse("size")
            return
        super().data_received(data)
        if self.http != "httptools":
            self._follow_h11()

    def shutdown(self) -> None:
        """The server is draining: a connection busy with a request closes after its answer (as uvicorn's do);
        an idle or new one is given DRAIN_GRACE_S for a request already on its way (answered 503, then closed)
        instead of being closed on it, which would reset it."""
        if self._idle():
            self.loop.call_later(DRAIN_GRACE_S, self._close_if_idle)
        else:
            super().shutdown()

    def _idle(self) -> bool:
        cycle = getattr(self, "cycle", None)
        return (cycle is None or cycle.response_complete) and self._phase in ("idle", "done")

    def _close_if_idle(self) -> None:
        if self._idle() and not self.transport.is_closing():
            self.transport.close()
        elif not self.transport.is_closing():
            super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
        super().connection_lost(exc)

    # httptools' parser callbacks: where a request's head and body begin and end
    def on_message_begin(self) -> None:
        self._enter("head")
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._enter("body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._phase = "done"
        super().on_message_complete()

    def _enter(self, phase: str) -> None:
        if self._phase != "idle" or phase != "head":  # the first head's deadline runs from the connection
            self._since = self.loop.time()
        self._phase = phase

    def _follow_h11(self) -> None:
        import h11

        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else "done"
        if phase != self._phase and not (phase == "head" and self._phase == "idle"):
            self._enter(phase)

    def _head_too_large(self, data: bytes) -> bool:
        """Count the head's bytes in `data` (up to its blank line); whether they are over the limit."""
        seen = self._tail + data
        end = seen.find(END_OF_HEAD)
        self._head_bytes += len(data) if end < 0 else max(0, end + len(END_OF_HEAD) - len(self._tail))
        over = self._head_bytes > self.max_header_bytes
        if end >= 0:
            self._head_bytes, self._tail = 0, b""
        else:
            self._tail = seen[-3:]
        return over

    def _check(self) -> None:
        """The watch: refuse a head or body past its deadline, else look again when the next one can pass."""
        what = "head" if self._phase in ("idle", "head") else "body" if self._phase == "body" else ""
        left = self.deadlines[what] - (self.loop.time() - self._since) if what else min(self.deadlines.values())
        if left <= 0:
            self._watch = None
            self._refuse(what)
            return
        self._watch = self.loop.call_later(left, self._check)

    def _refuse(self, what: str) -> None:
        """Answer `what`'s refusal unless a response has started, and close."""
        if self.transport.is_closing():
            return
        cycle = getattr(self, "cycle", None)
        if what != "body" or cycle is None or not cycle.response_started:
            self.transport.write(self.refused[what])
        if what in ("size", "busy") and self.transport.can_write_eof():  # the client may still send: closed now,
            self.transport.write_eof()  # it would get a reset instead of the answer; it gets the answer and EOF,
            self._dropping = True  # and what it sends meanwhile is dropped
            self.loop.call_later(LINGER_S, self.transport.close)
            return
        self.transport.close()


def guarded(http: str, limits: Limits) -> type:
    """uvicorn's `http` protocol class ("httptools" or "h11") with the deadlines and the head's bound."""
    base: Any
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol
    return type("Guarded", (Guard, base), {
        "http": http, "deadlines": {"head": limits.header_timeout_s, "body": limits.body_timeout_s},
        "refused": refusals(limits), "max_header_bytes": limits.max_header_bytes,
        "max_connections": limits.max_connections})


