"""The provider registry: one row of data per provider (eight built in, more from plugins), each with a cheap
probe that never raises."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pkgutil import resolve_name
from typing import Any, Literal

from gpux.machine import cuda_device_problem
from gpux.optional import install_hint, installed_ort_distributions, is_installed

Status = Literal["ok", "not installed", "import failed", "no device"]
ENTRY_POINT_GROUP = "gpux.providers"


@dataclass(frozen=True)
class Availability:
    provider: str
    status: Status
    reason: str = ""
    fix: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, object]:
        return {"provider": self.provider, "status": self.status, "reason": self.reason, "fix": self.fix}


@dataclass
class Runner:
    """An opened artifact: `run(feeds)` returns outputs in `output_names` order."""

    run: Callable[[dict[str, Any]], list[Any]]
    output_names: list[str]
    used: str  # what executes, e.g. "CPUExecutionProvider" or "OpenVINO CPU"
    dropped: str | None = None  # why the runtime did not take the requested device (None: it did)
    details: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    native: Any = None  # the runtime's own session / compiled model
    binder: Callable[[dict[str, Any], int], list[Callable[[], object]]] | None = None
    fast: Callable[[dict[str, Any]], list[Any]] | None = None  # run() without the runtime's Python-side checks

    def bind(self, feeds: dict[str, Any], n: int = 1) -> list[Callable[[], object]]:
        """`n` zero-argument callables that each run `feeds` with the least per-call work (for timing loops);
        each may be used from its own thread."""
        if self.binder is not None:
            return self.binder(feeds, n)
        run = self.run
        return [lambda: run(feeds)] * n


@dataclass(frozen=True)
class TorchDevice:
    """How PyTorch reaches a provider's device (`runtime: torch`)."""

    type: str  # torch.device type (ROCm builds call HIP "cuda")
    build: str = ""  # the PyTorch build it needs: CUDA | ROCm ("": any)
    index: str | None = None  # its wheels at download.pytorch.org/whl/<index> (None: PyPI's own)
    compiles: bool = False  # `compile: auto` means torch.compile here (eager elsewhere)
    variants: tuple[tuple[str, str], ...] = ()  # (compile, precision) rows `run --benchmark -p all` adds


@dataclass(frozen=True)
class Provider:
    """One row of the registry: every fact gpux keeps about one provider. Plugins add rows through the
    `gpux.providers` entry-point group; a row names its code as 'module:attribute', imported only when used."""

    name: str
    runtime: str  # what runs it unless its block says otherwise: onnxruntime | openvino | torch | a plugin's
    ep: str | None  # exact ONNX Runtime execution provider string
    extra: str  # pip extra of gpux-ml that installs it
    platforms: tuple[str, ...]  # sys.platform prefixes where it can run
    device: Callable[[], str | None] | None = field(default=None, compare=False)  # None = ok, else why not
    hardware: str = ""
    builtin: bool = False  # present in every install of its runtime: no import needed to know
    options: str = "Options"  # its gpux.yml block's option model: 'module:Class' (a bare name: gpux.providers.options)
    fallback: tuple[str, ...] = ()  # what an explicit request for it falls back to, before the last resort
    last_resort: bool = False  # runs everywhere its package installs: where every non-strict request ends
    ort_package: str = ""  # the ONNX Runtime distribution that carries its EP (for the fix line)
    also_accepted: tuple[str, ...] = ()  # other EPs that serve it
    torch: TorchDevice | None = None  # PyTorch itself runs on it (`runtime: torch`): how
    precisions: tuple[str, ...] = ("fp32",)  # what `run --benchmark -p all` measures
    targets: str = "gpux.plan.targets:onnx_targets"  # (project, provider, inputs) -> the artifacts it needs
    steps: tuple[tuple[str, Any], ...] = ()  # kinds of artifact its runtime adds: (name, gpux.runtimes.Step)
    probe_with: str = ""  # its own probe (name -> Availability) where gpux has none for its runtime
    gpu_resource: str | None = None  # the Kubernetes extended resource of its device

    @property
    def option_model(self) -> Any:
        return resolve_name(self.options if ":" in self.options else f"gpux.providers.options:{self.options}")


def _rocm_device() -> str | None:
    return None if os.path.exists("/dev/kfd") else "no AMD GPU found (/dev/kfd is missing)"


PROVIDERS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider("tensorrt", "onnxruntime", "TensorrtExecutionProvider", "tensorrt", ("linux", "win32"),
                 cuda_device_problem, "NVIDIA GPU", options="TensorRTOptions", fallback=("cuda",),
                 ort_package="onnxruntime-gpu (+ TensorRT libraries)", precisions=("fp32", "fp16", "int8"),
                 targets="gpux.plan.targets:tensorrt_targets", gpu_resource="nvidia.com/gpu"),
        Provider("cuda", "onnxruntime", "CUDAExecutionProvider", "cuda", ("linux", "win32"),
                 cuda_device_problem, "NVIDIA GPU", options="CUDAOptions", ort_package="onnxruntime-gpu",
                 gpu_resource="nvidia.com/gpu",
                 torch=TorchDevice("cuda", "CUDA", "cu128", compiles=True, variants=(
                     ("off", "fp32"), ("default", "fp32"), ("reduce-overhead", "fp32"), ("reduce-overhead", "fp16"),
                     ("default", "bf16")))),
        Provider("rocm", "onnxruntime", "MIGraphXExecutionProvider", "", ("linux",), _rocm_device, "AMD GPU",
                 options="ROCmOptions", also_accepted=("MIGraphXExecutionProvider", "ROCMExecutionProvider"),
                 ort_package="onnxruntime-migraphx or onnxruntime-rocm from AMD's package index (not on PyPI)",
                 gpu_resource="amd.com/gpu",
                 torch=TorchDevice("cuda", "ROCm", "rocm6.4", compiles=True, variants=(
                     ("off", "fp32"), ("default", "fp32"), ("reduce-overhead", "fp16")))),
        Provider("coreml", "onnxruntime", "CoreMLExecutionProvider", "coreml", ("darwin",), None,
                 "Apple Neural Engine / GPU", options="CoreMLOptions", ort_package="onnxruntime (macOS wheel)"),
        Provider("mps", "torch", None, "torch", ("darwin",), None, "Apple GPU (Metal)", options="MPSOptions",
                 torch=TorchDevice("mps", variants=(("off", "fp32"), ("off", "fp16")))),
        Provider("directml", "onnxruntime", "DmlExecutionProvider", "directml", ("win32",), None,
                 "DirectX 12 GPU", options="DirectMLOptions", ort_package="onnxruntime-directml"),
        Provider("openvino", "openvino", None, "openvino", ("linux", "win32", "darwin"), None,
                 "Intel CPU / GPU / NPU", options="OpenVINOOptions", precisions=("fp32", "fp16", "int8"),
                 targets="gpux.plan.targets:openvino_targets"),
        Provider("cpu", "onnxruntime", "CPUExecutionProvider", "cpu", ("linux", "win32", "darwin"), None,
                 "any CPU", builtin=True, last_resort=True, options="CPUOptions", ort_package="onnxruntime",
                 torch=TorchDevice("cpu", index="cpu", variants=(("off", "fp32"), ("default", "fp32"))),
                 precisions=("fp32", "fp16", "int8"), targets="gpux.plan.targets:cpu_targets"),
    )
}  # fmt: skip
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
    if p.builtin:
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
        if "OpenVINOExecutionProvider" in eps:
            return Availability(p.name, "ok", "ONNX Runtime's OpenVINOExecutionProvider (the openvino package "
                                "is not installed: use providers.openvino.runtime: onnxruntime)")
        return Availability(p.name, "not installed", "openvino is not installed", install_hint(p.extra))
    try:
        import openvino

        devices = openvino.Core().available_devices
    except Exception as exc:
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
            return resolve_name(p.probe_with)(name)
        if p.runtime == "torch":
            return probe_torch(name)
        avail = _probe_openvino(p) if p.runtime == "openvino" else _probe_ort(p)
        if avail.ok and p.device is not None and os.environ.get("GPUX_PROBE_DEVICES", "1") != "0":
            why = p.device()
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
    return {**PROVIDERS, **plugin_providers()}


def runtime_of(project: Any, name: str) -> str:
    """The runtime the project's config picks for provider `name` (its block's `runtime`, else the row's)."""
    block = getattr(project.config.providers, name, None)
    row = registry().get(name)
    return str(getattr(block, "runtime", None) or (row.runtime if row else "onnxruntime"))


def probe_for(project: Any, name: str) -> Availability:
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


@cache
def plugin_providers() -> dict[str, Provider]:
    """Third-party providers registered under the `gpux.providers` entry-point group."""
    found: dict[str, Provider] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception:
            continue
        if isinstance(obj, Provider) and obj.name not in PROVIDERS:
            found[obj.name] = obj
    return found


def ort_conflict_warning() -> str | None:
    dists = installed_ort_distributions()
    if len(dists) > 1:
        return (f"several ONNX Runtime distributions are installed ({', '.join(dists)}); they overwrite "
                f"each other's files: keep one (pip uninstall the others, then reinstall it)")
    return None
