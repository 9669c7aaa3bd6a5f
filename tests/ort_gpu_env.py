"""Test tooling: virtualenvs holding another ONNX Runtime distribution (onnxruntime-gpu, onnxruntime-openvino):
they install the same module as onnxruntime and cannot share an environment with it."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEPS = ["click", "pydantic", "pyyaml", "rich", "numpy", "onnx"]


def cache_dir() -> Path:
    base = os.environ.get("GPUX_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gpux-test")
    return Path(base)


def ort_gpu_python() -> Path:
    """The python of a venv holding onnxruntime-gpu at the installed onnxruntime's version."""
    return distribution_python("onnxruntime-gpu", metadata.version("onnxruntime"))


def distribution_python(dist: str, version: str | None = None) -> Path:
    """Create (once) and return the python of a venv holding `dist` and gpux's dependencies;
    run this checkout of gpux in it with PYTHONPATH (see `env()`)."""
    venv = cache_dir() / f"venv-{dist}-{version or 'latest'}"
    python = venv / "bin" / "python"
    stamp = venv / ".ready"
    if not stamp.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"{dist}=={version}" if version else dist, *DEPS], check=True)
        stamp.write_text(version or "latest")
    return python


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}
