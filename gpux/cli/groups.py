"""The command groups that hand artifacts on: `gpux export` (Triton, KServe), `gpux deploy` (Ray Serve) and
`gpux cache` (the artifact store)."""

from __future__ import annotations

import sys
from typing import Any

import click

from gpux.cli.options import JSON, PROVIDER, STORE, STRICT


@click.group()
def export() -> None:
    """Hand built, verified artifacts to other serving engines."""


@export.command("triton")
@click.argument("targets", nargs=-1, required=True)
@click.option("--output", "-o", "repo", type=click.Path(file_okay=False), required=True,
              help="The model repository folder (created; each model's folder is replaced whole).")
@click.option("--provider", "-p", default=None,
              help="cpu, openvino, cuda or tensorrt (default: $GPUX_PROVIDER, `gpux use`, runtime.backend, else cpu).")
@click.option("--version", "model_version", type=click.IntRange(min=1), default=1, show_default=True,
              help="Triton version folder the artifact goes in.")
@STORE
@JSON
def export_triton(targets: tuple[str, ...], repo: str, provider: str | None, model_version: int,
                  store: str | None, as_json: bool) -> None:
    """Write a Triton model repository: config.pbtxt + the artifact per model (batching from serve:); a
    workspace adds its pipeline as an ensemble."""
    from gpux.deploy.ensemble import triton_command

    sys.exit(triton_command(list(targets), repo, provider, model_version, store, as_json))


@export.command("kserve")
@click.argument("target", default=".")
@click.option("--provider", "-p", default=None,
              help="Provider the image runs (default: $GPUX_PROVIDER, runtime.backend, else cpu).")
@click.option("--image", default=None, help="Image built by `gpux package --serve` (default: its default tag).")
@click.option("--cpu", default="1", show_default=True, help="CPU request and limit.")
@click.option("--memory", default="2Gi", show_default=True, help="Memory request and limit.")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write to a file.")
def export_kserve(target: str, provider: str | None, image: str | None, cpu: str, memory: str,
                  output: str | None) -> None:
    """Write a KServe InferenceService (protocol v2) that runs the `gpux package --serve` image."""
    from pathlib import Path

    from gpux.config.locate import open_project
    from gpux.deploy.image import choose_provider, default_tag
    from gpux.deploy.kserve import write

    project = open_project(target)
    name = choose_provider(project, provider)
    text = write(project, name, image or default_tag(project, name), cpu=cpu, memory=memory)
    if output is None:
        click.echo(text, nl=False)
    else:
        Path(output).write_text(text, encoding="utf-8")


@click.group()
def deploy() -> None:
    """Run models on an engine that schedules replicas across machines."""


@deploy.command("ray")
@click.argument("targets", nargs=-1, required=True)
@click.option("--address", default=None, help="A running Ray cluster (e.g. ray://head:10001 or auto); the "
              "application stays there after gpux exits. Default: a local Ray, served until Ctrl-C / SIGTERM.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address Ray Serve's HTTP proxy binds.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="HTTP port.")
@PROVIDER
@STRICT
@click.option("--api-key", envvar="GPUX_API_KEY", default=None, help="Require this bearer token ($GPUX_API_KEY).")
@STORE
def deploy_ray(targets: tuple[str, ...], **options: Any) -> None:
    """Deploy to Ray Serve: an application per model (deploy.ray: replicas, autoscaling) whose replicas answer
    the Open Inference Protocol over HTTP themselves."""
    from gpux.deploy.ray_launch import RayLaunch, launch

    sys.exit(launch(RayLaunch(targets=list(targets), **options)))  # address, host, port, provider, strict, ...


@click.group()
def cache() -> None:
    """Manage the artifact store."""


@cache.command("ls")
@click.argument("path", default=".")
@STORE
@JSON
def cache_ls(path: str, store: str | None, as_json: bool) -> None:
    """List built artifacts."""
    from gpux.cli.cache import cache_command

    sys.exit(cache_command("ls", path, store, as_json))


@cache.command("verify")
@click.argument("path", default=".")
@STORE
@JSON
def cache_verify(path: str, store: str | None, as_json: bool) -> None:
    """Re-hash every artifact against its manifest; exit 1 if any is damaged."""
    from gpux.cli.cache import cache_command

    sys.exit(cache_command("verify", path, store, as_json))


@cache.command("prune")
@click.argument("path", default=".")
@click.option("--all", "everything", is_flag=True, help="Remove every artifact, not only stale ones.")
@STORE
@JSON
def cache_prune(path: str, everything: bool, store: str | None, as_json: bool) -> None:
    """Remove damaged, superseded and half-built artifacts."""
    from gpux.cli.cache import cache_command

    sys.exit(cache_command("prune-all" if everything else "prune", path, store, as_json))


GROUPS = (export, deploy, cache)
