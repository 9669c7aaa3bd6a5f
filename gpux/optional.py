"""Lazy access to optional heavy packages: ask whether one is installed, or import it with an install hint."""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType

from gpux.errors import MissingDependency

DIST = "gpux-ml"

# module -> pip extra that provides it
EXTRAS = {
    "onnxruntime": "cpu",
    "openvino": "openvino",
    "nncf": "openvino",
    "tensorrt": "tensorrt",
    "coremltools": "coreml",
    "torch": "torch",
    "docker": "docker",
    "PIL": "images",
    "soundfile": "audio",
    "soxr": "audio",
    "tokenizers": "text",
    "huggingface_hub": "hf",
    "transformers": "hf",
    "matplotlib": "report",
}

# every distribution that installs the `onnxruntime` module
ORT_DISTRIBUTIONS = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "onnxruntime-rocm",
    "onnxruntime-migraphx",
    "onnxruntime-qnn",
)


def install_hint(extra: str) -> str:
    return f"pip install '{DIST}[{extra}]'"


@cache
def is_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import `module`, or raise MissingDependency naming the install command."""
    extra = extra or EXTRAS.get(module.split(".")[0], module)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if is_installed(module.split(".")[0]):
            raise MissingDependency(f"{module} is installed but fails to import: {exc}") from exc
        raise MissingDependency(f"{module} is not installed", hint=install_hint(extra)) from exc


def installed_ort_distributions() -> list[str]:
    return [name for name in ORT_DISTRIBUTIONS if version_of(name) is not None]


def version_of(dist: str) -> str | None:
    """The installed version of `dist` (importlib.metadata is imported here: `gpux --help` never pays for it)."""
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions_of(packages: tuple[str, ...]) -> dict[str, str | None]:
    """The installed version of each distribution (None: not installed); "onnxruntime" names whichever of its
    distributions is installed, with its version ("onnxruntime-gpu 1.20.0")."""
    out: dict[str, str | None] = {}
    for pkg in packages:
        if pkg == "onnxruntime":
            dists = installed_ort_distributions()
            out["onnxruntime"] = f"{dists[0]} {version_of(dists[0])}" if dists else None
        else:
            out[pkg] = version_of(pkg)
    return out
