"""The server's life: bind REST and gRPC, load and warm up models, ready, then drain and stop on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpux.serve.access import AccessLog
from gpux.serve.errors import is_bug
from gpux.serve.lifecycle import Lifecycle, one_line, retire
from gpux.serve.metrics import Metrics
from gpux.serve.models import LoadRequest, Repository
from gpux.serve.offload import Offload
from gpux.serve.rest import Limits, RestApp

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.serve.record import Recorded

log = logging.getLogger("gpux.serve")


@dataclass(kw_only=True)
class ServeRequest:
    """What `gpux serve` was asked for; None means the first project's serve: block decides."""

    projects: list[Project | Recorded]  # read from gpux.yml, or recorded by an earlier start (gpux/serve/record.py)
    host: str | None = None
    http_port: int | None = None
    grpc_port: int | None = None
    grpc: bool = True
    api_key: str | None = None
    load: LoadRequest = field(default_factory=LoadRequest)
    drain_s: float = 30.0
    on_ready: Callable[[Server], None] | None = None
    access: AccessLog = field(default_factory=AccessLog)  # where answered requests are logged (access.writing)


class _Uvicorn:
    """uvicorn's Server without its own signal handling (this module owns SIGTERM/SIGINT)."""

    @staticmethod
    def make(app: Any, drain_s: float, limits: Limits) -> Any:
        import uvicorn

        from gpux.serve.connection import guarded

        class Quiet(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

            async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                """uvicorn's, but the listeners close without resetting a connection (gpux/serve/drain.py), and a
                draining connection ends as gpux/serve/connection.py says."""
                from gpux.serve.drain import stop_listening

                await stop_listening(self.servers, sockets or [], self.config, self.server_state)
                await super().shutdown(sockets)

        loop = "uvloop" if _has("uvloop") else "asyncio"
        http = "httptools" if _has("httptools") else "h11"
        config = uvicorn.Config(app, lifespan="off", access_log=False, log_config=None, loop=loop, ws="none",
                                http=guarded(http, limits), timeout_keep_alive=limits.keep_alive_s,
                                timeout_graceful_shutdown=int(drain_s) or 1, server_header=False)
        return Quiet(config)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


class Server:
    """Both endpoints over one repository; `http_port`/`grpc_port` are the bound ports once started."""

    def __init__(self, request: ServeRequest) -> None:
        self.request = request
        self.metrics = Metrics()
        self.repo = Repository(request.projects, self.metrics)
        first = self.repo.all()[0].settings
        self.host = request.host or first.host
        self.lifecycle = Lifecycle(self.repo, self.metrics, request.load, request.drain_s)
        self.limits = Limits.of(first)
        self.http_port = first.http_port if request.http_port is None else request.http_port
        grpc_port = first.grpc_port if request.grpc_port is None else request.grpc_port
        self.grpc_port: int | None = grpc_port if request.grpc else None
        self._uvicorn: Any = None
        self._grpc: Any = None
        self._arrivals: Any = None  # the gRPC calls counted, for the drain (gpux/serve/drain.py)
        self._tasks: list[asyncio.Task[Any]] = []
        self.stopping = asyncio.Event()
        self.offload = Offload()
        self.load_error: BaseException | None = None

    async def start(self) -> None:
        """Listen on both ports (live at once), then load and warm up every model (ready after)."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM,
                             socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only on sockets that name TCP
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # answers go out at once (accepted sockets inherit)
        sock.bind((self.host, self.http_port))
        self.http_port = sock.getsockname()[1]
        app = RestApp(self.repo, self.metrics, self.limits, self.request.api_key, self.offload, self.lifecycle,
                      access=self.request.access)
        self._uvicorn = _Uvicorn.make(app, self.request.drain_s, self.limits)
        self._tasks.append(asyncio.create_task(self._uvicorn.serve(sockets=[sock])))
        if self.grpc_port is not None:
            from gpux.serve.drain import Arrivals
            from gpux.serve.grpc_service import InferenceService, make_server

            service = InferenceService(self.repo, self.metrics, self.limits, self.request.api_key, self.lifecycle,
                                       access=self.request.access)
            self._arrivals = Arrivals()
            self._grpc, self.grpc_port = make_server(service, _address(self.host, self.grpc_port), self.limits,
                                                     self._arrivals.around)
            await self._grpc.start()
        self._tasks.append(asyncio.create_task(self._load_all()))

    async def _load_all(self) -> None:
        """Open and warm up every model; one that fails is reported by name with its reason and not served, the
        others serve. The server stops with the first failure only when no model opened, or with --strict."""
        failures: list[BaseException] = []
        for model in self.repo.all():
            try:
                await self.lifecycle.open(model)
            except Exception as exc:  # a model, a runtime or a gpux bug: reported here, the next model opens
                failures.append(exc)
                model.failed = one_line(exc)
                log.error("%s %s: not served: failed to load: %s", model.name, model.version, model.failed)
                if is_bug(exc):
                    log.error("%s", "".join(traceback.format_exception(exc)).rstrip())
                continue
            self.lifecycle.serve(model)
        if failures and (self.request.load.strict or len(failures) == len(self.repo.all())):
            self.load_error = failures[0]
            self.stopping.set()
            return
        if self.request.on_ready is not None:
            self.request.on_ready(self)

    async def wait_ready(self, timeout: float = 120) -> None:
        async def ready() -> None:
            while not self.repo.ready:
                if self.load_error is not None:
                    raise self.load_error
                await asyncio.sleep(0.01)

        await asyncio.wait_for(ready(), timeout)

    def refuse_new(self) -> None:
        """The first step of stop(): readiness drops and new requests get 503 'server is shutting down'."""
        self.repo.live, self.repo.draining = False, True
        for model in self.repo.all():
            model.ready = False

    async def stop(self) -> None:
        """Stop taking requests, let accepted ones finish (up to drain_s), then close the models and their sessions."""
        self.refuse_new()
        tasks = []
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            tasks.append(self._tasks[0])
        if self._grpc is not None:
            from gpux.serve.drain import stop_grpc

            assert self.grpc_port is not None
            address = _address(_loopback(self.host), self.grpc_port)
            tasks.append(asyncio.ensure_future(stop_grpc(self._grpc, self._arrivals, address, self.request.drain_s)))
        await asyncio.gather(*tasks, return_exceptions=True)
        for t in self._tasks[1:]:
            t.cancel()
        await retire(self.repo.all(), 0.0)  # drained: each model's worker closed, its sessions released
        self.repo.shm.unregister()
        self.offload.close()

    async def run_until_signal(self) -> None:
        """start(), then serve until SIGTERM/SIGINT (or a model fails to load), then stop()."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self.start()
        log.info("listening: http://%s:%d%s", self.host, self.http_port,
                 f", grpc {self.host}:{self.grpc_port}" if self.grpc_port is not None else "")
        await self.stopping.wait()
        log.info("draining")
        await self.stop()
        if self.load_error is not None:
            raise self.load_error


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _loopback(host: str) -> str:
    """Where this machine reaches a server bound to `host` (a wildcard is reached on loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def serve(request: ServeRequest) -> None:
    """Run the server in this thread until a signal; uvloop where installed. The process is the server's: large
    blocks go back to the system once freed (gpux/serve/memory.py)."""
    from gpux.serve.memory import return_large_blocks

    return_large_blocks()
    try:
        import uvloop

        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:
        runner = asyncio.run
    runner(Server(request).run_until_signal())
