"""`gpux deploy ray`: start or join a Ray cluster, run the application, and (locally) serve until stopped."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

from gpux import report
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
        ray.init(include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": req.host, "port": req.port})
        for a in applications:  # one application per model: Ray's proxy routes each request to its model
            serve.run(a.application, name=a.name, route_prefix=a.route_prefix, blocking=False)
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
