"""Ray Serve: gpux projects as Ray Serve applications, one per model, whose replicas answer the Open Inference
Protocol over HTTP themselves, so a request reaches the model in one hop and the same clients work.

Each replica is `gpux serve` for one model: the same REST app (gpux/serve/rest.py: routes, parsing, binary
tensors, errors), the same worker (gpux/serve/batcher.py: batches merge only requests of equal non-batch shapes
and dtypes) and the same warm-up. Artifacts are built on the driver before deployment; every replica opens them
from the same store (on another node it builds them from the same cache key) and reports the provider it really
runs on.

Across replicas and models (gpux/deploy/ray_routes.py): the repository index lists every model with its Ray
application's state, statistics are summed over every live replica, an unknown model's 404 names every served one;
load and unload answer a 400 (Ray starts and replaces replicas: redeploy instead). Ray's controller replaces a
replica whose process dies, or whose health check (its batch loops alive) fails.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ray import serve

from gpux.config.load import Project
from gpux.deploy.ray_routes import Peer
from gpux.providers import registry

APP_NAME = "gpux"


@dataclass(frozen=True)
class ModelSpec:
    """What a replica needs to open one model: its gpux.yml, the store, and the provider request."""

    config: str
    store: str | None = None
    provider: str | None = None
    strict: bool = False


@dataclass(frozen=True)
class RayApp:
    """One Ray Serve application to `serve.run`: its name, its route prefix and the bound deployment."""

    name: str
    route_prefix: str
    application: Any


def actor_options(project: Project, provider: str) -> dict[str, Any]:
    """`ray_actor_options` from the provider: a GPU for GPU providers, CPUs otherwise; deploy.ray wins."""
    declared = dict(project.config.deploy.ray.ray_actor_options)
    row = registry().get(provider)
    derived: dict[str, Any] = {"num_gpus": 1} if row is not None and row.gpu_resource else {"num_cpus": 1}
    return {**derived, **declared}


def deployment_options(project: Project, provider: str) -> dict[str, Any]:
    ray_cfg = project.config.deploy.ray
    opts: dict[str, Any] = {"name": project.name, "max_ongoing_requests": ray_cfg.max_ongoing_requests,
                            "ray_actor_options": actor_options(project, provider)}
    if ray_cfg.autoscaling is not None:
        opts["autoscaling_config"] = ray_cfg.autoscaling.model_dump(exclude_none=True)
    else:
        opts["num_replicas"] = ray_cfg.num_replicas
    return opts


@serve.deployment
@serve.ingress()
class ModelServer:
    """One replica of one model: loads and warms it up like `gpux serve`, then answers HTTP requests itself."""

    def __init__(self, spec: ModelSpec, api_key: str | None = None, peers: tuple[Peer, ...] = ()) -> None:
        from gpux.config.locate import open_project
        from gpux.serve.metrics import Metrics
        from gpux.serve.models import LoadRequest, Repository, open_served

        self.metrics = Metrics()
        self.repo = Repository([open_project(spec.config)], self.metrics)
        (self.model,) = self.repo.all()
        open_served(self.model, LoadRequest(spec.provider, spec.strict, spec.store), self.metrics)
        self.api_key = api_key
        self.peers = peers or (Peer(self.model.name, self.model.version, APP_NAME, self.model.name),)

    async def __serve_build_asgi_app__(self) -> Any:
        from gpux.deploy.ray_routes import RayRoutes
        from gpux.serve.body import Limits
        from gpux.serve.rest import RestApp

        model = self.model
        assert model.worker is not None
        model.worker.start()  # on the event loop that answers requests (the batch loops live there)
        model.ready = True
        self.metrics.child(self.metrics.ready, model.name, model.version).set(1)
        s = model.settings
        limits = Limits.of(s)
        app_name = serve.get_replica_context().app_name  # whatever name the application was run under
        peers = tuple(replace(p, app=app_name) if p.name == model.name else p for p in self.peers)
        return RayRoutes(RestApp(self.repo, self.metrics, limits, self.api_key), peers)

    def check_health(self) -> None:
        """Ray's periodic health check: a replica whose batch loops ended answers nothing more; Ray replaces it."""
        worker = self.model.worker
        if worker is not None and not worker.alive:
            raise RuntimeError(f"model '{self.model.name}': a batch loop ended; this replica cannot answer")

    def record_routing_stats(self) -> dict[str, Any]:
        """This replica's statistics (Triton's layout), gathered from every replica by gpux.deploy.ray_routes."""
        return self.repo.statistics()

    def info(self) -> dict[str, Any]:
        """This replica: its process, the provider it runs on, and how many infer requests it answered."""
        served = sum(s.value for m in self.metrics.requests.collect() for s in m.samples
                     if s.name.endswith("_total"))
        return {"provider": self.model.provider, "runs_on": self.model.runs_on, "pid": os.getpid(),
                "served": int(served), "report": self.model.opened.report}


def apps(targets: Sequence[str | Project], *, provider: str | None = None, store: str | None = None,
         strict: bool = False, api_key: str | None = None, log: Any = None) -> list[RayApp]:
    """Ray Serve applications for gpux projects (folders, gpux.yml files, names or Projects), one per model:
    the first at route `/` (also the health and server metadata routes), each other at `/v2/models/<name>`,
    where Ray's proxy sends that model's requests. Artifacts are built here first."""
    from gpux.artifacts.build import build
    from gpux.config.locate import open_project
    from gpux.plan.select import select

    chosen_ones: list[tuple[Project, str]] = []
    names: set[str] = set()
    for target in targets:
        project = target if isinstance(target, Project) else open_project(str(target))
        if project.name in names:
            raise ValueError(f"two projects named {project.name!r}: a Ray application serves one version per model")
        selection = select(project, provider, strict, store_dir=store)  # gpux use, the tune lock, as everywhere
        project = selection.project or project
        chosen = selection.runs_on or selection.chain[-1]
        build(project, chosen, store_dir=store, log=log)
        names.add(project.name)
        chosen_ones.append((project, chosen))
    places = [(APP_NAME, "/"), *((f"{APP_NAME}-{p.name}", f"/v2/models/{p.name}") for p, _ in chosen_ones[1:])]
    peers = tuple(Peer(p.name, str(p.config.version), app, p.name) for (p, _), (app, _) in zip(chosen_ones, places,
                                                                                                  strict=True))
    out: list[RayApp] = []
    server: Any = ModelServer
    for (project, chosen), (name, prefix) in zip(chosen_ones, places, strict=True):
        bound = server.options(**deployment_options(project, chosen)).bind(
            ModelSpec(str(project.path), store, provider, strict), api_key, peers)
        out.append(RayApp(name, prefix, bound))
    return out


def app(targets: Sequence[str | Project], **options: Any) -> Any:
    """The bound Ray Serve application of one gpux project, to `serve.run(..., route_prefix="/")`; several
    projects are several applications: use `apps`."""
    if len(targets) != 1:
        raise ValueError(f"app() takes one project, got {len(targets)}: use gpux.deploy.ray.apps for several")
    return apps(targets, **options)[0].application


__all__ = ["APP_NAME", "ModelServer", "ModelSpec", "Peer", "RayApp", "app", "apps"]
