"""The routes a Ray replica answers for every model, not its own alone: the repository index, the statistics summed
over every replica, and the 404 of a model no application serves. Everything else goes to gpux serve's REST app.

Ray Serve gives no call that reaches every replica of a deployment; the replica actor's routing-stats hook
(`record_routing_stats`, user code Ray runs on demand) is the one that runs gpux code in a chosen replica, so each
replica's statistics come through it (gpux.deploy.ray.ModelServer)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, NoReturn

from gpux.serve.body import Reply, json_reply
from gpux.serve.errors import BadRequest, NotServed, ServeError
from gpux.serve.rest import Receive, RestApp, Send, error_reply, read_body
from gpux.serve.rest import _options as options

REPLICA_ACTOR = "SERVE_REPLICA::{app}#{deployment}#"  # Ray Serve's name of a replica actor, then its id
GATHER_TIMEOUT_S = 10.0
NOT_UNDER_RAY = ("model '{name}': load and unload are not supported under Ray Serve (each model is a Ray Serve "
                 "application whose replicas Ray starts and replaces); run gpux deploy ray again to load a new "
                 "version, serve.delete('{app}') to unload it")
STATES = {"RUNNING": "READY", "DEPLOYING": "LOADING"}  # Ray application status -> repository index state


@dataclass(frozen=True)
class Peer:
    """One served model: its name and version, and the Ray Serve application and deployment that serve it."""

    name: str
    version: str
    app: str
    deployment: str


class RayRoutes:
    """ASGI app of one replica: the cluster-wide routes here, the rest (`rest`) as in gpux serve."""

    def __init__(self, rest: RestApp, peers: tuple[Peer, ...]) -> None:
        self.rest, self.peers = rest, peers
        self.by_name = {p.name: p for p in peers}

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        route = self._claims(scope["method"], scope["path"]) if scope["type"] == "http" else None
        if route is None:
            return await self.rest(scope, receive, send)
        try:
            self.rest._authorize(scope["path"], dict(scope["headers"]))
            reply = await route(await _small_body(receive))
        except ServeError as exc:
            reply = error_reply(exc)
        except Exception as exc:  # a bug: answer 500, keep serving
            logging.getLogger("gpux.serve").exception("internal error on %s %s", scope["method"], scope["path"])
            reply = error_reply(ServeError(f"internal error: {type(exc).__name__}: {exc}"))
        await self.rest._send(send, reply)

    def _claims(self, method: str, path: str) -> Any:
        """The handler of a cluster-wide route (it takes the request body), or None: gpux serve's route."""
        parts = path.strip("/").split("/")
        if parts[:2] == ["v2", "repository"]:
            return lambda body: self.repository(method, parts[2:], body)
        if parts[:2] != ["v2", "models"] or len(parts) < 3:
            return None
        name = parts[2]
        if name == "stats" and len(parts) == 3 and method == "GET":
            return lambda _body: self.statistics(list(self.peers))
        if name not in self.rest.repo.models:  # Ray's proxy sends a served model's requests to its own app
            return lambda _body: self._unknown(name)
        if parts[3:] == ["stats"] or (parts[3:4] == ["versions"] and parts[5:] == ["stats"]):
            version = parts[4] if len(parts) == 6 else ""
            return lambda _body: self.statistics([self.by_name[name]], version)
        return None

    def _unknown(self, name: str) -> NoReturn:
        known = ", ".join(sorted(self.by_name)) or "none"
        raise NotServed(f"Request for unknown model: '{name}' is not found; served models: {known}")

    async def repository(self, method: str, rest: list[str], body: bytes) -> Reply:
        """POST index: every model with its application's state; load and unload: a 400 saying what to do."""
        if method != "POST":
            return json_reply({"error": "use POST for the repository API"}, 405)
        if rest == ["index"]:
            ready_only = options(body).get("ready", False)
            if not isinstance(ready_only, bool):
                raise BadRequest(f"'ready' must be true or false, got {ready_only!r}")
            index = await asyncio.to_thread(self.index)
            return json_reply([e for e in index if e["state"] == "READY" or not ready_only])
        if len(rest) == 3 and rest[0] == "models" and rest[2] in ("load", "unload"):
            peer = self.by_name.get(rest[1])
            if peer is None:
                self._unknown(rest[1])
            raise BadRequest(NOT_UNDER_RAY.format(name=peer.name, app=peer.app))
        raise NotServed(f"unknown path /v2/repository/{'/'.join(rest)}")

    def index(self) -> list[dict[str, str]]:
        """Triton's RepositoryIndex of every model, its state from its Ray application's status."""
        from ray import serve

        apps = serve.status().applications
        out = []
        for peer in sorted(self.peers, key=lambda p: p.name):
            status = apps.get(peer.app)
            raw = str(getattr(status.status, "value", status.status)) if status is not None else ""
            state = STATES.get(raw, "UNAVAILABLE")
            entry = {"name": peer.name, "version": peer.version, "state": state}
            if state == "UNAVAILABLE":
                entry["reason"] = f"Ray application '{peer.app}' is {raw or 'not running'}" + (
                    f": {status.message}" if status is not None and status.message else "")
            out.append(entry)
        return out

    async def statistics(self, peers: list[Peer], version: str = "") -> Reply:
        """The statistics extension's answer for `peers`, each summed over every live replica of its model."""
        if version:  # 404 for a version this model does not serve
            self.rest.repo.find(peers[0].name, version)
        out = []
        for peer in sorted(peers, key=lambda p: p.name):
            docs = await replica_stats(peer)
            if not docs and peer.name in self.rest.repo.models:  # none found (an app renamed): this replica's own
                docs = [self.rest.repo.statistics()]
            entries = [e for doc in docs for e in doc.get("model_stats", [])
                       if e["name"] == peer.name and (not version or e["version"] == version)]
            out.append(merge(entries) if entries else empty(peer))
        return json_reply({"model_stats": out})


async def replica_stats(peer: Peer) -> list[dict[str, Any]]:
    """Each live replica's statistics of `peer`'s model (replicas that die meanwhile are left out)."""
    import ray

    def handles() -> list[Any]:
        prefix = REPLICA_ACTOR.format(app=peer.app, deployment=peer.deployment)
        found = []
        for actor in ray.util.list_named_actors(all_namespaces=True):
            if actor["name"].startswith(prefix):
                try:
                    found.append(ray.get_actor(actor["name"], namespace=actor["namespace"]))
                except ValueError:  # gone since it was listed
                    continue
        return found

    async def stats_of(handle: Any) -> Any:
        return await handle.record_routing_stats.remote()

    calls = [asyncio.ensure_future(stats_of(h)) for h in await asyncio.to_thread(handles)]
    if not calls:
        return []
    done, late = await asyncio.wait(calls, timeout=GATHER_TIMEOUT_S)  # a replica that hangs is left out
    for call in late:
        call.cancel()
    return [c.result() for c in done if c.exception() is None and isinstance(c.result(), dict)]


def _total(durations: list[dict[str, int]]) -> dict[str, int]:
    return {"count": sum(d["count"] for d in durations), "ns": sum(d["ns"] for d in durations)}


def merge(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One `model_stats` entry from the same model version's entries of several replicas: counts and times
    summed, batch sizes summed by size, the latest inference."""
    first = entries[0]
    phases = {k: _total([e["inference_stats"][k] for e in entries]) for k in first["inference_stats"]}
    by_size: dict[int, list[dict[str, Any]]] = {}
    for b in (b for e in entries for b in e["batch_stats"]):
        by_size.setdefault(b["batch_size"], []).append(b)
    batches = [{"batch_size": size, **{k: _total([b[k] for b in same]) for k in same[0] if k != "batch_size"}}
               for size, same in sorted(by_size.items())]
    return {**first, "last_inference": max(e["last_inference"] for e in entries),
            "inference_count": sum(e["inference_count"] for e in entries),
            "execution_count": sum(e["execution_count"] for e in entries),
            "inference_stats": phases, "batch_stats": batches}


def empty(peer: Peer) -> dict[str, Any]:
    """The entry of a model none of whose replicas answered (all restarting): nothing counted."""
    from gpux.serve.stats import ModelStats

    return ModelStats().doc(peer.name, peer.version)


async def _small_body(receive: Receive, limit: int = 64 * 1024) -> bytes:
    """The body of a repository or statistics request (a small JSON object at most)."""
    return await read_body(receive, limit, lambda: BadRequest(
        f"request body over {limit} bytes; a repository request is a small JSON object"))
