"""How a draining server stops listening without resetting a connection whose request is already sent.

Closing a listening socket resets every connection the kernel completed and the loop has not accepted yet: their
clients sent a request and get a reset. Here the listener (kept open through a duplicate) first stops completing
new handshakes (Linux: a socket filter drops SYNs, so a client connecting now retries, then finds the port closed
before it sends anything), the handshakes under way complete and are accepted by the loop meanwhile, and whatever
still waits in the queue when the loop stops accepting is served as a draining connection; only then is it closed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
from typing import Any

HANDSHAKES_S = 0.05  # how long handshakes already under way get to complete once SYNs are dropped
SO_ATTACH_FILTER = 26
# classic BPF, on the TCP header: a SYN without ACK is dropped (0 bytes kept), anything else kept whole
NO_NEW_HANDSHAKES = [
    (0x30, 0, 0, 13),  # ldb [13]: the flags
    (0x54, 0, 0, 0x12),  # and #(SYN | ACK)
    (0x15, 0, 1, 0x02),  # jeq #SYN: next, else skip one
    (0x06, 0, 0, 0),  # ret #0: dropped
    (0x06, 0, 0, 0xFFFFFFFF),  # ret #all: kept
]


def refuse_handshakes(listener: socket.socket) -> bool:
    """Drop new connection attempts on `listener` (Linux); False where it cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in NO_NEW_HANDSHAKES))
    program = struct.pack("HL", len(NO_NEW_HANDSHAKES), ctypes.addressof(code))
    try:
        listener.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, program)
    except OSError:
        return False
    return True


async def stop_listening(servers: list[Any], sockets: list[socket.socket], config: Any, state: Any) -> None:
    """Close uvicorn's listeners (`servers`, bound to `sockets`) as the module says."""
    kept = [s.dup() for s in sockets]
    try:
        if any([refuse_handshakes(s) for s in kept]):
            await asyncio.sleep(HANDSHAKES_S)
        for server in servers:
            server.close()
        await adopt(kept, config, state)
    finally:
        for s in kept:
            s.close()


async def adopt(listeners: list[socket.socket], config: Any, state: Any) -> None:
    """Take every connection waiting in the listeners' queues and serve it as a draining one."""
    loop = asyncio.get_running_loop()
    for listener in listeners:
        listener.setblocking(False)
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # nothing more waits (BlockingIOError), or the listener is gone
                break
            with contextlib.suppress(OSError):
                _, protocol = await loop.connect_accepted_socket(
                    lambda: config.http_protocol_class(config=config, server_state=state, app_state={}), conn)
                protocol.shutdown()
