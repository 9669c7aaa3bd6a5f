"""Test tooling: a real Docker engine for one test session, and a Python base image made without a registry.

`running_engine()` installs docker.io and debootstrap with apt when they are missing, starts `dockerd` in a
fresh folder under /tmp with its own socket, data root, exec root and pid file, waits until it answers,
imports a Debian bookworm base image with Python (built once with debootstrap and cached as a tarball
under ~/.cache/gpux-test/), yields an `Engine`, and stops the daemon by its pid at the end, failure or not.

Only host networking works here (the daemon runs with --bridge=none --iptables=false): builds use
network_mode="host", containers that need no network use "none".
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ort_gpu_env import locked

CACHE = Path(os.environ.get("GPUX_TEST_CACHE") or Path.home() / ".cache" / "gpux-test")
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
INCLUDE = ("python3", "python3-venv", "ca-certificates")
BASE_IMAGE = "gpux-test/python:bookworm"
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
START_TIMEOUT = 60.0


class CannotRunEngine(Exception):
    """This machine cannot run dockerd at all (not Linux, no root, no permission): tests skip with the reason."""


@dataclass
class Engine:
    """A running dockerd: its DOCKER_HOST, pid and folder, the base image, and how long setup took."""

    host: str
    pid: int
    root: Path
    base_image: str = BASE_IMAGE
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.host, timeout=300)

    def log_tail(self, lines: int = 30) -> str:
        return _tail(self.root / "dockerd.log", lines)

    def summary(self) -> str:
        parts = ", ".join(f"{k} {v:.1f}s" for k, v in self.timings.items())
        return f"docker engine {self.host} (pid {self.pid}) ready in {sum(self.timings.values()):.1f}s: {parts}"


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path=os.pathsep.join(SBIN))


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def cannot_run_reason() -> str | None:
    """Why dockerd cannot run on this machine at all, or None."""
    if not sys.platform.startswith("linux"):
        return f"dockerd runs on Linux only, not {sys.platform}"
    if os.geteuid() != 0:
        return f"starting dockerd needs root; this test session runs as uid {os.geteuid()}"
    if not _which("dockerd") and not shutil.which("apt-get"):
        return "dockerd is not installed and there is no apt-get to install docker.io"
    return None


def ensure_tools() -> None:
    """apt-get install docker.io debootstrap when either is missing (the machine is root; Debian is reachable)."""
    missing = [t for t in ("dockerd", "debootstrap") if not _which(t)]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "docker.io", "debootstrap"]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}) while installing {', '.join(missing)}:\n"
                               + "\n".join((r.stdout + r.stderr).splitlines()[-20:]))


def base_tarball() -> Path:
    """A debootstrap'ed Debian rootfs with Python as a .tar.gz, built once and cached (about 90 MB, ~2 min)."""
    tag = hashlib.sha256(f"{SUITE} {','.join(INCLUDE)}".encode()).hexdigest()[:10]
    out = CACHE / f"debian-{SUITE}-minbase-python-{tag}.tar.gz"
    with locked(CACHE / ".base.lock"):
        if out.is_file():
            return out
        rootfs = Path(tempfile.mkdtemp(prefix="rootfs-", dir=CACHE))
        try:
            cmd = [_which("debootstrap") or "debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}",
                   SUITE, str(rootfs), MIRROR]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            if r.returncode != 0:
                raise RuntimeError(f"debootstrap failed ({r.returncode}):\n"
                                   + "\n".join((r.stdout + r.stderr).splitlines()[-20:]))
            for deb in (rootfs / "var/cache/apt/archives").glob("*.deb"):
                deb.unlink()
            tmp = out.with_suffix(".tmp")
            pipe = f"set -o pipefail; tar -C {shlex.quote(str(rootfs))} -c . | gzip -1 > {shlex.quote(str(tmp))}"
            subprocess.run(["bash", "-c", pipe], check=True, timeout=600)
            os.replace(tmp, out)
        finally:
            shutil.rmtree(rootfs, ignore_errors=True)
    return out


def ensure_base_image(client: Any, name: str = BASE_IMAGE) -> str:
    """Import the cached rootfs tarball as `name` unless the engine has it (no registry involved)."""
    import docker

    with contextlib.suppress(docker.errors.ImageNotFound):
        client.images.get(name)
        return name
    repo, _, tag = name.rpartition(":")
    client.api.import_image_from_file(str(base_tarball()), repository=repo, tag=tag)
    client.images.get(name)
    return name


def _mounts_under(root: Path) -> list[str]:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    return sorted((m.split()[1] for m in lines if m.split()[1].startswith(str(root))), reverse=True)


def _stop(proc: subprocess.Popen[bytes], root: Path) -> None:
    """SIGTERM dockerd by its pid, SIGKILL after 30 s; then its own process group; then its mounts and folder."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # a containerd it started and left behind (its group is its pid)
    for mount in _mounts_under(root):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


PERMISSION_SIGNS = ("permission denied", "operation not permitted", "must be run as root", "are you trying to "
                    "connect to a docker daemon", "failed to mount overlay", "not supported by kernel")


@contextlib.contextmanager
def running_engine(base_image: bool = True) -> Iterator[Engine]:
    """Start dockerd for this session only; yield the Engine; stop it by pid whatever happens."""
    reason = cannot_run_reason()
    if reason:
        raise CannotRunEngine(reason)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    ensure_tools()
    timings["tools"] = time.perf_counter() - t
    root = Path(tempfile.mkdtemp(prefix="gpuxd-", dir="/tmp"))  # short: unix socket paths end at 107 bytes
    sock = root / "docker.sock"
    cmd = [_which("dockerd") or "dockerd", "--storage-driver=overlay2", "--iptables=false", "--ip6tables=false",
           "--bridge=none", f"--data-root={root}/data", f"--exec-root={root}/exec", "-H", f"unix://{sock}",
           f"--pidfile={root}/docker.pid"]  # own pid file: /var/run/docker.pid may belong to another engine
    t = time.perf_counter()
    with (root / "dockerd.log").open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        engine = Engine(f"unix://{sock}", proc.pid, root, timings=timings)
        _wait_ready(engine, proc)
        timings["dockerd"] = time.perf_counter() - t
        if base_image:
            t = time.perf_counter()
            client = engine.client()
            try:
                ensure_base_image(client)
            finally:
                client.close()
            timings["base image"] = time.perf_counter() - t
        yield engine
    finally:
        _stop(proc, root)


def _wait_ready(engine: Engine, proc: subprocess.Popen[bytes]) -> None:
    import docker

    deadline = time.monotonic() + START_TIMEOUT
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = engine.log_tail()
            if any(s in tail.lower() for s in PERMISSION_SIGNS):
                raise CannotRunEngine(f"dockerd cannot run here (exit {proc.returncode}): {tail.splitlines()[-1]}")
            raise RuntimeError(f"dockerd exited with {proc.returncode} before answering:\n{tail}")
        if (engine.root / "docker.sock").exists():
            try:
                client = docker.DockerClient(base_url=engine.host, timeout=5)
                try:
                    client.ping()
                    return
                finally:
                    client.close()
            except Exception as exc:  # not accepting yet
                last = exc
        time.sleep(0.2)
    raise RuntimeError(f"dockerd did not answer on {engine.host} within {START_TIMEOUT:.0f}s ({last}):\n"
                       f"{engine.log_tail()}")
