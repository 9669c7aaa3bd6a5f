"""The provider registry: one row of data per provider (eight built in, more from plugins), each with a cheap
probe that never raises."""

from __future__ import annotations

import os
import sys
from functools import cache
from pkgutil import resolve_name
from typing import TYPE_CHECKING, Any

from gpux.optional import install_hint, installed_ort_distributions, is_installed
from gpux.providers.builtin import BUILTIN_ROWS
from gpux.providers.row import Availability, Flavor, ImageRow, Provider, Runner, Status, TorchDevice

if TYPE_CHECKING:
    from gpux.views import ProjectView

ENTRY_POINT_GROUP = "gpux.providers"
__all__ = [
    "BUILTIN_ROWS",
    "ENTRY_POINT_GROUP",
    "Availability",
    "Flavor",
    "ImageRow",
    "Provider",
    "Runner",
    "Status",
    "TorchDevice",
    "probe",
    "probe_for",
    "probe_torch",
    "registry",
    "runtime_of",
]
PLATFORM_NAMES = {"linux": "Linux", "win32": "Windows", "darwin": "macOS"}


def _fix(p: Provider) -> str:
    package = p.ort_package or f"the ONNX Runtime build that has {p.ep}"
    return f"install {package}" + (f": {install_hint(p.extra)}" if p.extra else "")


@cache
def ort_available_eps() -> tuple[str, ...] | str:
    """EPs compiled into the installed onnxruntime, or the import error as a string."""
    try:
        import onnxruntime

        return tuple(onnxruntime.get_available_providers())
    except Exception as exc:  # a broken install raises anything
        return f"{type(exc).__name__}: {exc}"


def _probe_ort(p: Provider) -> Availability:
    if not is_installed("onnxruntime"):
        return Availability(p.name, "not installed", "onnxruntime is not installed", _fix(p))
    if p.in_every_build:
        return Availability(p.name, "ok", f"{p.ep} is part of every ONNX Runtime build")
    eps = ort_available_eps()
    if isinstance(eps, str):
        return Availability(p.name, "import failed", f"onnxruntime fails to import: {eps}",
                            f"pip install --force-reinstall {(p.ort_package or 'onnxruntime').split()[0]}")
    ep = next((e for e in p.also_accepted or (p.ep,) if e in eps), p.ep)
    if ep not in eps:
        dists = ", ".join(installed_ort_distributions()) or "onnxruntime"
        return Availability(p.name, "not installed", f"{p.ep} is not in this ONNX Runtime build ({dists})", _fix(p))
    return Availability(p.name, "ok", f"{ep} available")


def _probe_openvino(p: Provider) -> Availability:
    if not is_installed("openvino"):
        eps = ort_available_eps() if is_installed("onnxruntime") else ()
        if p.ep in eps:
            return Availability(p.name, "ok", f"ONNX Runtime's {p.ep} (the openvino package "
                                "is not installed: use providers.openvino.runtime: onnxruntime)")
        return Availability(p.name, "not installed", "openvino is not installed", install_hint(p.extra))
    try:
        import openvino

        devices = openvino.Core().available_devices
    except Exception as exc:  # a broken install raises anything; a probe must never raise
        return Availability(p.name, "import failed", f"openvino fails to load: {exc}",
                            "pip install --force-reinstall openvino")
    if not devices:
        return Availability(p.name, "no device", "OpenVINO sees no device", None)
    return Availability(p.name, "ok", f"OpenVINO devices: {', '.join(devices)}")


@cache
def probe(name: str) -> Availability:
    """Is provider `name` usable here? Cheap, cached, never raises."""
    p = registry().get(name)
    if p is None:
        return Availability(name, "not installed", f"unknown provider {name!r}", None)
    try:
        if not sys.platform.startswith(p.platforms):
            where = " or ".join(PLATFORM_NAMES.get(x, x) for x in p.platforms)
            return Availability(name, "no device", f"{name} needs {p.hardware} on {where}; this is "
                                f"{PLATFORM_NAMES.get(sys.platform, sys.platform)}", f"run on {where}")
        if p.probe_with:
            own: Availability = resolve_name(p.probe_with)(name)
            return own
        if p.runtime == "torch":
            return probe_torch(name)
        avail = _probe_openvino(p) if p.runtime == "openvino" else _probe_ort(p)
        if avail.ok and p.device_problem is not None and os.environ.get("GPUX_PROBE_DEVICES", "1") != "0":
            why = p.device_problem()
            if why:
                return Availability(name, "no device", why, f"run on a machine with {p.hardware}")
        return avail
    except Exception as exc:  # a probe must never raise
        return Availability(name, "import failed", f"probe failed: {type(exc).__name__}: {exc}", None)


TORCH_INDEX_URL = "https://download.pytorch.org/whl/"  # + a row's torch.index: the builds with its device


def _torch_fix(provider: str) -> str:
    torch = registry()[provider].torch
    index = torch.index if torch else None
    return f"pip install torch --index-url {TORCH_INDEX_URL}{index}" if index else "pip install torch"


@cache
def probe_torch(provider: str, device_id: int = 0) -> Availability:
    """Can PyTorch run on `provider`'s device (cpu, cuda, rocm, mps)? Imports torch only when it is installed;
    never raises."""
    if not is_installed("torch"):
        return Availability(provider, "not installed", "torch is not installed", _torch_fix(provider))
    try:
        import torch

        return _torch_device(torch, provider, device_id)
    except Exception as exc:  # a broken install raises anything
        return Availability(provider, "import failed", f"torch fails: {type(exc).__name__}: {exc}",
                            "pip install --force-reinstall torch")


def _torch_device(torch: Any, provider: str, device_id: int) -> Availability:
    version = torch.__version__
    check = os.environ.get("GPUX_PROBE_DEVICES", "1") != "0"
    if provider == "cpu":
        return Availability(provider, "ok", f"PyTorch {version} on the CPU")
    if provider == "mps":
        ok = not check or torch.backends.mps.is_available()
        return Availability(provider, "ok", f"PyTorch {version} on Metal (MPS)") if ok else \
            Availability(provider, "no device", f"PyTorch {version} sees no Metal (MPS) device", None)
    hip, cuda = torch.version.hip, torch.version.cuda
    built = "ROCm" if hip else "CUDA" if cuda else "CPU-only"
    needs = registry()[provider].torch.build  # type: ignore[union-attr]  # only rows with a torch device get here
    if built != needs:
        return Availability(provider, "not installed", f"this PyTorch ({version}) is a {built} build; {provider} "
                            f"needs a {needs} build", _torch_fix(provider))
    if check and not torch.cuda.is_available():
        return Availability(provider, "no device", f"PyTorch {version} ({built} {hip or cuda}) sees no GPU",
                            f"run on a machine with {registry()[provider].hardware}")
    count = torch.cuda.device_count() if check else device_id + 1
    if device_id >= count:
        return Availability(provider, "no device", f"device_id {device_id}, but PyTorch sees {count} GPU(s)",
                            f"set device_id below {count}")
    name = torch.cuda.get_device_name(device_id) if check else "device probe off"
    return Availability(provider, "ok", f"PyTorch {version} ({built} {hip or cuda}) on {name}")


def registry() -> dict[str, Provider]:
    """Every provider in priority order: the built-in rows, then those plugins register."""
    return {**BUILTIN_ROWS, **plugin_providers()}


def runtime_of(project: ProjectView, name: str) -> str:
    """The runtime the project's config picks for provider `name` (its block's `runtime`, else the row's)."""
    block = getattr(project.config.providers, name, None)
    row = registry().get(name)
    return str(getattr(block, "runtime", None) or (row.runtime if row else "onnxruntime"))


def probe_for(project: ProjectView, name: str) -> Availability:
    """`probe(name)`, or PyTorch's own probe where the project runs provider `name` with runtime torch."""
    if runtime_of(project, name) != "torch":
        return probe(name)
    from gpux.formats import TORCH_FORMATS, source_format

    platform_ok = probe(name) if name == "mps" else None
    if platform_ok is not None and not platform_ok.ok:
        return platform_ok
    if source_format(project) not in TORCH_FORMATS:
        return Availability(name, "no device", f"runtime torch runs PyTorch sources; {project.source.name} is "
                            "ONNX", "use another provider for ONNX models (coreml on Apple hardware)")
    row = registry()[name]
    if not sys.platform.startswith(row.platforms):
        return probe(name)
    return probe_torch(name, int(getattr(getattr(project.config.providers, name), "device_id", 0) or 0))


def plugin_providers() -> dict[str, Provider]:
    """Third-party providers registered under the `gpux.providers` entry-point group."""
    return _plugins()[0]


def broken_plugin(name: str) -> str:
    """Why provider `name` is unknown when a plugin registered it and does not load (`; ...`), else ''."""
    why = _plugins()[1].get(name)
    return f"; its plugin is installed but does not load: {why}" if why else ""


@cache
def _plugins() -> tuple[dict[str, Provider], dict[str, str]]:
    """The plugin rows, and for each entry point that does not give one, why (by the entry point's name)."""
    from importlib import metadata

    found: dict[str, Provider] = {}
    broken: dict[str, str] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # a third party's import raises anything: said where the name is asked for
            broken[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}".splitlines()[0]
            continue
        if not isinstance(obj, Provider):
            broken[ep.name] = f"{ep.value} is a {type(obj).__name__}, not a gpux.providers.Provider row"
        elif obj.name not in BUILTIN_ROWS:
            found[obj.name] = obj
    return found, broken


def ort_conflict_warning() -> str | None:
    dists = installed_ort_distributions()
    if len(dists) > 1:
        return (f"several ONNX Runtime distributions are installed ({', '.join(dists)}); they overwrite "
                f"each other's files: keep one (pip uninstall the others, then reinstall it)")
    return None
