"""How a draining server stops listening without resetting a connection whose request is already sent, on both ports.

REST: closing a listening socket resets every connection the kernel completed and the loop has not accepted yet: their
clients sent a request and get a reset. Here the listener (kept open through a duplicate) first stops completing
new handshakes (Linux: a socket filter drops SYNs, so a client connecting now retries, then finds the port closed
before it sends anything), the handshakes under way complete and are accepted by the loop meanwhile, and whatever
still waits in the queue when the loop stops accepting is served as a draining connection; only then is it closed.

gRPC: grpc core's shutdown CANCELs every call it has received but not yet handed to the server's loop (grpc/grpc
#41785), and a busy loop leaves calls there (it asks for the next call only between others). So the gRPC server is
stopped only once it is quiet: its methods answer UNAVAILABLE from the start of the drain, and the server calls itself
(ServerLive) until no other call came in between two of its own; a call queues in core first come first served, so
each probe's answer means every call that arrived before it was handed over. Then `stop(grace)` finds none waiting
(grace: the rest of the drain's time), and a call that arrives after it gets UNAVAILABLE."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import time
from typing import Any

QUIET_S = 0.05  # the least time between two probes of the gRPC server with no other call in between
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


class Arrivals:
    """A gRPC generic handler that counts the calls it is asked for (each call asks once, as its method is looked
    up), around the handler `around` was given."""

    def __init__(self) -> None:
        self.handler: Any = None
        self.count = 0

    def around(self, handler: Any) -> Arrivals:
        self.handler = handler
        return self

    def service(self, details: Any) -> Any:
        self.count += 1
        return self.handler.service(details)


async def stop_grpc(server: Any, arrivals: Arrivals, address: str, drain_s: float) -> None:
    """Stop the gRPC `server` (listening on `address`) once it is quiet, as the module says; at most drain_s in all
    (a quarter of it waiting for quiet, while clients still send)."""
    started = time.monotonic()
    await wait_quiet(arrivals, address, drain_s / 4)
    await server.stop(max(drain_s - (time.monotonic() - started), 0.1))


async def wait_quiet(arrivals: Arrivals, address: str, budget_s: float) -> None:
    """Until no call came in between two of this server's calls to itself, QUIET_S or more apart (or budget_s)."""
    import grpc

    from gpux.serve.proto import inference_pb2 as pb

    deadline = time.monotonic() + budget_s
    async with grpc.aio.insecure_channel(address) as channel:
        live = channel.unary_unary("/inference.GRPCInferenceService/ServerLive",
                                   request_serializer=pb.ServerLiveRequest.SerializeToString,
                                   response_deserializer=pb.ServerLiveResponse.FromString)
        seen = -2  # no probe answered yet
        while (left := deadline - time.monotonic()) > 0:
            try:
                await live(pb.ServerLiveRequest(), timeout=left)
            except grpc.RpcError:  # the server does not answer itself: nothing to wait for
                return
            if arrivals.count == seen + 1:  # only this probe since the last one
                return
            seen = arrivals.count
            await asyncio.sleep(QUIET_S)
