"""The Docker engine, through the Docker SDK: connect, make sure a base image is there, build, run."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux import report
from gpux.errors import BuildFailed, ExitCode, GpuxError
from gpux.optional import require

GPU_REQUEST = {"count": -1, "capabilities": [["gpu"]]}  # docker run --gpus all
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class EngineUnavailable(GpuxError):
    """The Docker SDK, the engine, a base image or the engine's GPU runtime is missing."""

    exit_code = ExitCode.UNAVAILABLE


class ImageBuildFailed(BuildFailed):
    """A step of the image build failed; the message names the step and ends with its last log lines."""


def engine_address() -> str:
    host = os.environ.get("DOCKER_HOST")
    return host if host else "unix:///var/run/docker.sock (DOCKER_HOST is unset)"


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


def sdk_errors() -> tuple[type[Exception], ...]:
    """What the Docker SDK raises when the engine or its connection fails: its own DockerException (APIError,
    BuildError...), the socket's and requests' errors (OSError), and urllib3's where a stream breaks."""
    import docker
    import urllib3

    return docker.errors.DockerException, OSError, urllib3.exceptions.HTTPError


def connect() -> Any:
    """A Docker SDK client for the engine DOCKER_HOST names (or the default socket), checked with a ping."""
    docker = require("docker", "docker")
    try:
        client = docker.from_env()
        client.ping()
    except sdk_errors() as exc:
        hint = "start the engine (dockerd), or point DOCKER_HOST at its socket, e.g. unix:///run/docker.sock"
        if "Permission denied" in str(exc) or isinstance(exc, PermissionError):
            hint = "the socket is not yours to use: join the docker group or use a rootless engine"
        raise EngineUnavailable(f"no Docker engine answers at {engine_address()}: {_short(exc)}", hint=hint) from exc
    return client


def ensure_base_image(client: Any, image: str, log: Callable[[str], None]) -> None:
    """The base image must be on the engine; pull it if it is not, and say so plainly if that fails."""
    import docker

    try:
        client.images.get(image)
        return
    except docker.errors.ImageNotFound:
        pass
    log(f"pulling {image} (not on the engine yet)")
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    try:
        for chunk in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise docker.errors.APIError(chunk["error"])
    except sdk_errors() as exc:
        raise EngineUnavailable(
            f"base image {image} is not on the engine at {engine_address()} and pulling it failed: {_short(exc)}",
            hint="pull it (or `docker load` it) where a registry is reachable, or pass --base-image with a local "
                 "image") from exc


class Progress:
    """Streamed build lines: a rich status line plus the steps on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self.console: Any = None
        self.status: Any = None
        if sys.stderr.isatty():
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False)
            self.status = self.console.status("starting the image build")
            self.status.start()

    def step(self, text: str) -> None:
        if self.console is None:
            report.info(text)
            return
        from rich.markup import escape

        width = max(20, self.console.width - 6)
        self.status.update(escape(text if len(text) <= width else text[: width - 1] + "…"))
        self.console.print(f"[bold]{escape(text)}[/bold]")

    def line(self, text: str) -> None:
        if self.console is None:
            report.info(f"  {text}")
            return
        from rich.markup import escape

        self.console.print(f"  [dim]{escape(text)}[/dim]")

    def close(self) -> None:
        if self.status is not None:
            self.status.stop()


def build_image(client: Any, context: Path, tag: str, progress: Progress) -> str:
    """Build `context` on the engine with host networking; stream its lines; return the image id."""
    step, tail, image_id = "", deque[str](maxlen=15), ""
    pending = ""
    buildargs = {k: v for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy")
                 if (v := os.environ.get(k))}
    try:
        stream = client.api.build(path=str(context), tag=tag, rm=True, forcerm=True, decode=True, pull=False,
                                  network_mode="host", buildargs=buildargs)
        for chunk in stream:
            if "error" in chunk:
                detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                raise ImageBuildFailed(_failure(step, detail.strip(), [*tail, pending] if pending else list(tail)))
            if "aux" in chunk:
                image_id = chunk["aux"].get("ID", image_id)
            text = pending + str(chunk.get("stream", ""))
            *lines, pending = text.split("\n")
            for line in (ANSI.sub("", x).rstrip("\r") for x in lines):
                if re.match(r"Step \d+/\d+ : ", line):
                    step = line
                    tail.clear()
                    progress.step(line)
                elif line.strip() and not line.startswith((" ---> ", "Removing intermediate container")):
                    tail.append(line)
                    progress.line(line)
    except sdk_errors() as exc:  # APIError (bad Dockerfile, context), connection lost
        raise ImageBuildFailed(_failure(step, _short(exc), list(tail))) from exc
    finally:
        progress.close()
    return image_id or client.images.get(tag).id


def _failure(step: str, error: str, tail: list[str]) -> str:
    """One line naming the step and the error, then the last lines of the step's log."""
    step = step if len(step) <= 110 else step[:109] + "…"
    where = f"at {step}" if step else "before its first step"
    code = re.search(r"returned a non-zero code: (\d+)", error)
    lines = [f"image build failed {where} → exit code {code.group(1)}" if code else
             f"image build failed {where}: {error}"]
    if tail:
        lines += ["last lines of its log:", *(f"  | {x}" for x in tail)]
    return "\n".join(lines)


@dataclass
class RunResult:
    exit_code: int
    stdout: str
    stderr: str


def run_image(client: Any, image: str, args: list[str], gpus: bool = False, devices: Iterable[str] = (),
              entrypoint: list[str] | None = None) -> RunResult:
    """Run the image once (no network), GPUs requested as `docker run --gpus all` does; wait; collect output."""
    import docker

    requests = [docker.types.DeviceRequest(**GPU_REQUEST)] if gpus else None
    binds = [f"{d}:{d}:rwm" for d in devices]
    container = client.containers.create(image, command=args, entrypoint=entrypoint, network_mode="none",
                                         device_requests=requests, devices=binds or None)
    try:
        try:
            container.start()
        except docker.errors.APIError as exc:
            if gpus and ("device driver" in str(exc) or "gpu" in str(exc).lower()):
                raise EngineUnavailable(
                    f"the Docker engine at {engine_address()} has no GPU runtime: {_short(exc)}",
                    hint="install the NVIDIA Container Toolkit where the engine runs (nvidia-ctk runtime configure "
                         "--runtime=docker, then restart it), or package --provider cpu") from exc
            raise BuildFailed(f"cannot start {image}: {_short(exc)}") from exc
        code = int(container.wait().get("StatusCode", 1))
        out = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return RunResult(code, out, err)
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


