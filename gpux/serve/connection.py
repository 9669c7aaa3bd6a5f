"""HTTP connections that cannot be held by slow clients: uvicorn's protocol with a deadline for each request's head.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`) but waits forever for a request line and headers:
a client sending them a byte at a time (slowloris) or nothing at all holds a connection as long as it likes. Here a
connection must deliver each request's head within `header_timeout_s` of the connection opening or of the head's
first byte, else it is answered 408 and closed; bodies and responses are not timed by this."""

from __future__ import annotations

from typing import Any

TIMEOUT_REPLY = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


def guarded(http: str, header_timeout_s: float) -> type:
    """uvicorn's `http` protocol class ("httptools" or "h11") with the head deadline."""
    base: Any
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol

    class Guarded(base):
        _head_timer: Any = None
        _in_head = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._reading_head():
                self._arm()
            else:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        # httptools' parser callbacks: a head starts at its first byte and ends with the headers
        def on_message_begin(self) -> None:
            self._in_head = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def _reading_head(self) -> bool:
            if http == "httptools":
                return self._in_head
            import h11

            return bool(self.conn.their_state is h11.IDLE)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _timed_out(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                self.transport.write(TIMEOUT_REPLY)
                self.transport.close()

    return Guarded
