"""Ray Serve: one application from gpux projects, a replicated deployment per model behind the same Open
Inference Protocol ingress `gpux serve` speaks, so the same clients work.

Artifacts are built on the driver before deployment; every replica opens them from the same store (on
another node it builds them from the same cache key) and reports the provider it really runs on.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from ray import serve

from gpux.config.load import Project
from gpux.providers import registry


@dataclass(frozen=True)
class ModelSpec:
    """What a replica needs to open one model: its gpux.yml, the store, and the provider request."""

    config: str
    store: str | None = None
    provider: str | None = None
    strict: bool = False


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
class ModelReplica:
    """One replica: a gpux session on the best provider that really works here; batching as `serve:` says."""

    def __init__(self, spec: ModelSpec) -> None:
        from gpux.run.session import load

        self.session = load(spec.config, provider=spec.provider, strict=spec.strict, store_dir=spec.store,
                            provider_source="--provider")
        settings = self.session.project.config.serve
        tensors = [*self.session.inputs.values(), *self.session.outputs.values()]
        self.batching = settings.max_batch_size > 0 and all(t.shape and not isinstance(t.shape[0], int)
                                                            for t in tensors)
        if self.batching:
            self.batched.set_max_batch_size(settings.max_batch_size)  # type: ignore[attr-defined]
            self.batched.set_batch_wait_timeout_s(settings.max_queue_delay_us / 1e6)  # type: ignore[attr-defined]

    def info(self) -> dict[str, Any]:
        return {"provider": self.session.provider, "runs_on": self.session.used, "pid": os.getpid(),
                "inputs": self.session.inputs, "outputs": self.session.outputs, "report": self.session.report()}

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.session.output_names, self.session.run_feeds(feeds), strict=True))

    async def infer(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        """Outputs, and the pid of the process that computed them (which replica served)."""
        if self.batching:
            return await self.batched(feeds), os.getpid()
        return await asyncio.to_thread(self._run, feeds), os.getpid()

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0.0)
    async def batched(self, many: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        rows = [len(next(iter(f.values()))) for f in many]
        merged = {n: np.concatenate([f[n] for f in many]) for n in many[0]}
        out = await asyncio.to_thread(self._run, merged)
        bounds = np.cumsum([0, *rows])
        return [{n: v[a:b] for n, v in out.items()} for a, b in itertools.pairwise(bounds)]


class HandleWorker:
    """The ingress's stand-in for a local worker: requests go to the model's replicas through its handle."""

    inline = False

    def __init__(self, handle: Any, served_by: dict[int, int]) -> None:
        self.handle = handle
        self.served_by = served_by

    async def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out, pid = await self.handle.infer.remote(feeds)
        self.served_by[pid] = self.served_by.get(pid, 0) + 1
        return out


@serve.deployment(name="gpux-ingress", max_ongoing_requests=256)  # Ray's default of 5 would queue clients
@serve.ingress()
class Ingress:
    """The Open Inference Protocol over HTTP (REST + binary tensors), answered by the model deployments."""

    def __init__(self, specs: dict[str, ModelSpec], handles: dict[str, Any], api_key: str | None = None) -> None:
        self.specs, self.handles, self.api_key = specs, handles, api_key
        self.served_by: dict[int, int] = {}

    async def __serve_build_asgi_app__(self) -> Any:
        from gpux.config.locate import open_project
        from gpux.serve.metrics import Metrics
        from gpux.serve.models import Repository
        from gpux.serve.rest import Limits, RestApp

        projects = [open_project(s.config) for s in self.specs.values()]
        metrics = Metrics()
        repo = Repository(projects, metrics)
        for model in repo.all():
            info = await self.handles[model.name].info.remote()
            model.inputs, model.outputs = info["inputs"], info["outputs"]
            model.provider, model.runs_on, model.report = info["provider"], info["runs_on"], info["report"]
            model.worker = HandleWorker(self.handles[model.name], self.served_by)  # type: ignore[assignment]
            model.ready = True
        first = projects[0].config.serve
        return RestApp(repo, metrics, Limits(first.max_body_bytes, first.max_tensor_elements), self.api_key)

    def served(self) -> dict[int, int]:
        """Requests per replica process seen by this ingress replica."""
        return dict(self.served_by)


def app(targets: Sequence[str | Project], *, provider: str | None = None, store: str | None = None,
        strict: bool = False, api_key: str | None = None, log: Any = None) -> Any:
    """A bound Ray Serve application for gpux projects (folders, gpux.yml files, names or Projects):
    artifacts are built here first, then each model is a deployment behind one ingress."""
    from gpux.artifacts.build import build
    from gpux.config.locate import open_project
    from gpux.plan.choice import choose
    from gpux.providers import probe

    specs: dict[str, ModelSpec] = {}
    handles: dict[str, Any] = {}
    for target in targets:
        project = target if isinstance(target, Project) else open_project(str(target))
        if project.name in specs:
            raise ValueError(f"two projects named {project.name!r}: a Ray application serves one version per model")
        project, selection, _ = choose(project, provider, strict, store)  # gpux use, the tune lock, as everywhere
        chain = selection.chain
        chosen = next((p for p in chain if probe(p).ok), chain[-1])
        build(project, chosen, store_dir=store, log=log)
        spec = ModelSpec(str(project.path), store, provider, strict)
        specs[project.name] = spec
        replica: Any = ModelReplica
        handles[project.name] = replica.options(**deployment_options(project, chosen)).bind(spec)
    ingress: Any = Ingress
    return ingress.bind(specs, handles, api_key)


__all__ = ["Ingress", "ModelReplica", "ModelSpec", "app"]
