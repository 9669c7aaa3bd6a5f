"""`gpux deploy ray`: start or join a Ray cluster, run the application, and (locally) serve until stopped."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from types import ModuleType

from gpux import report
from gpux.errors import GpuxError, first_line
from gpux.optional import require


@dataclass(frozen=True, kw_only=True)
class RayLaunch:
    targets: list[str]
    address: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    provider: str | None = None
    strict: bool = False
    api_key: str | None = None
    store: str | None = None


class RayDeployFailed(GpuxError):
    """Ray Serve could not start or run the applications."""


STARTS = 3  # tries of Serve's start: its controller kills a proxy not ready in time, and waits longer the next time
PROXY_WAIT_S = 120  # a hang guard for the proxy started after a retry
# What a Ray that gpux starts itself (no --address) gives Serve's HTTP proxy to start and to answer a health check,
# read by its controller: Ray's 5 s start kills the proxy again and again on a busy machine, where the proxy's
# process alone has taken 62 s to start. A cluster joined keeps its own settings. An environment that sets either
# keeps its value.
SERVE_WAITS = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "90", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30"}


def start(ray: ModuleType, serve: ModuleType, req: RayLaunch) -> None:
    """Serve started (or joined) with its HTTP proxy at host:port. On a busy machine the proxy may not be ready
    within the controller's first wait (5 s): the controller kills it and starts another, waiting longer each time;
    or not within serve.start's own wait for it (60 s, Ray's constant): the start is tried again (it then joins the
    controller already running) rather than failing the deploy."""
    for tried in range(1, STARTS + 1):
        try:
            serve.start(http_options={"host": req.host, "port": req.port})
            break
        except (ray.exceptions.ActorDiedError, TimeoutError):  # TimeoutError: "HTTP proxies not available after 60s"
            if tried == STARTS:
                raise
            report.info(f"Ray Serve's HTTP proxy was not ready in time (try {tried} of {STARTS}); waiting again")
    if tried > 1:  # Serve joined, its new proxy still starting: answered only once the controller calls it healthy
        deadline = time.monotonic() + PROXY_WAIT_S
        while not _healthy(serve.status().proxies):
            if time.monotonic() > deadline:
                raise RayDeployFailed(f"Ray Serve's HTTP proxy did not become healthy in {PROXY_WAIT_S} s",
                                      hint="see `ray status` and the cluster's logs, then deploy again")
            time.sleep(0.5)


def _healthy(proxies: dict[str, str]) -> bool:
    """Whether Serve lists its HTTP proxies and calls every one healthy (none listed yet: still starting)."""
    return bool(proxies) and all(p == "HEALTHY" for p in proxies.values())


def launch(req: RayLaunch) -> int:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray = require("ray", extra="ray")
    from ray import serve

    from gpux.deploy.ray import apps

    applications = apps(req.targets, provider=req.provider, store=req.store, strict=req.strict,
                        api_key=req.api_key, log=report.progress(False))
    if req.address:
        ray.init(address=req.address, log_to_driver=False)
    else:
        for name, value in SERVE_WAITS.items():
            os.environ.setdefault(name, value)
        ray.init(include_dashboard=False, log_to_driver=False)
    try:
        try:
            start(ray, serve, req)
            for a in applications:  # one application per model: Ray's proxy routes each request to its model
                serve.run(a.application, name=a.name, route_prefix=a.route_prefix, blocking=False)
        except (ray.exceptions.RayError, TimeoutError) as exc:  # the cluster's failure (an actor lost, a node gone,
            # a proxy that never came up): one line
            raise RayDeployFailed(f"Ray Serve could not deploy {', '.join(a.name for a in applications)}: "
                                  f"{first_line(exc)}",
                                  hint="see `ray status` and the cluster's logs, then deploy again") from exc
        report.info(f"Ray Serve ready at http://{req.host}:{req.port}/v2: {len(applications)} application(s) "
                    f"({', '.join(a.name for a in applications)})")
        if req.address:
            return 0
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        serve.shutdown()
        return 0
    finally:
        if not req.address:
            ray.shutdown()
