"""Test tooling: virtualenvs holding another ONNX Runtime distribution (onnxruntime-gpu, onnxruntime-openvino):
they install the same module as onnxruntime and cannot share an environment with it. Versions come from
constraints.txt (the locked set), or the newest releases under GPUX_TEST_LATEST=1 (`make test-latest`)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"

def core_dependencies() -> list[str]:
    """gpux's own dependencies (pyproject's [project] dependencies), names only: versions come from the lock."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0] for d in deps]


DEPS = core_dependencies()


def cache_dir() -> Path:
    base = os.environ.get("GPUX_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gpux-test")
    return Path(base)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created): one test process at a time makes a cached thing (xdist runs two)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        yield


def latest() -> bool:
    return os.environ.get("GPUX_TEST_LATEST", "") not in ("", "0")


def pinned(dist: str) -> str | None:
    """The version constraints.txt pins for `dist` (None under GPUX_TEST_LATEST or when it pins none)."""
    if latest():
        return None
    found = re.search(rf"^{re.escape(dist)}==(\S+)", CONSTRAINTS.read_text(), re.MULTILINE | re.IGNORECASE)
    return found.group(1) if found else None


def ort_gpu_python() -> Path:
    """The python of a venv holding onnxruntime-gpu at the installed onnxruntime's version (the newest under
    GPUX_TEST_LATEST, where the newest onnxruntime may have no onnxruntime-gpu build yet)."""
    return distribution_python("onnxruntime-gpu", None if latest() else metadata.version("onnxruntime"))


def distribution_python(dist: str, version: str | None = None) -> Path:
    """Create (once) and return the python of a venv holding `dist` (at `version`, else the pinned one) and
    gpux's dependencies at the locked versions; run this checkout of gpux in it with PYTHONPATH (see `env()`)."""
    version = version or pinned(dist)
    lock = hashlib.sha256(CONSTRAINTS.read_bytes() + " ".join(DEPS).encode()).hexdigest()[:8]
    venv = cache_dir() / f"venv-{dist}-{version or 'latest'}-{'latest' if latest() else lock}"
    python = venv / "bin" / "python"
    stamp = venv / ".ready"
    with locked(venv.with_name(venv.name + ".lock")):
        if not stamp.is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            lock = [] if latest() else ["-c", str(CONSTRAINTS)]
            subprocess.run([*pip, *lock, f"{dist}=={version}" if version else dist, *DEPS], check=True)
            stamp.write_text(version or "latest")
    return python


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}
