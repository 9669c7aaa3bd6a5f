"""Test tooling: a virtualenv with onnxruntime-gpu (it cannot share an environment with onnxruntime)."""

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
    """Create (once) and return the python of a venv holding onnxruntime-gpu and gpux's dependencies;
    run this checkout of gpux in it with PYTHONPATH (see `env()`)."""
    version = metadata.version("onnxruntime")
    venv = cache_dir() / f"venv-onnxruntime-gpu-{version}"
    python = venv / "bin" / "python"
    stamp = venv / ".ready"
    if not stamp.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"onnxruntime-gpu=={version}", *DEPS], check=True)
        stamp.write_text(version)
    return python


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}
