"""Facts about this machine that key artifacts and records: the CPU model and the NVIDIA GPU, read once."""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, TypedDict

CUDA_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")
# The instruction sets ONNX Runtime's and OpenVINO's kernels choose between (x86 flags, then ARM features).
CPU_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "avx_vnni",
             "avx2", "fma", "asimd", "asimddp", "sve")


@cache
def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (Linux; {} elsewhere), read once."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                if fields:
                    break  # the first processor's block ended
                continue
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else what the platform module says)."""
    return cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> tuple[str, ...]:
    """The flags of CPU_FLAGS this CPU has (/proc/cpuinfo's `flags`, or `Features` on ARM), in CPU_FLAGS' order:
    one CPU model name can cover parts with and without AMX or AVX-512 enabled, and the kernels follow the flags."""
    info = cpuinfo()
    have = set((info.get("flags") or info.get("Features") or "").split())
    return tuple(f for f in CPU_FLAGS if f in have)


def cpu_identity() -> dict[str, str]:
    """What keys an artifact compiled for this CPU: its model and architecture."""
    return {"cpu": cpu_model(), "machine": platform.machine()}


@cache
def cuda_driver() -> Any | None:
    """The CUDA driver library (no CUDA toolkit needed), or None when this machine has none."""
    for lib in CUDA_LIBRARIES:
        try:
            return ctypes.CDLL(lib)
        except OSError:
            continue
    return None


def cuda_device_problem() -> str | None:
    """None when the CUDA driver sees at least one GPU, else why not (for the cuda and tensorrt probes)."""
    cuda = cuda_driver()
    if cuda is None:
        return "no NVIDIA driver (libcuda) found: this machine has no usable NVIDIA GPU"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the NVIDIA driver is present but CUDA cannot initialise a device"
    return None if count.value > 0 else "no NVIDIA GPU found"


class GpuIdentity(TypedDict, total=False):
    """An NVIDIA GPU as the CUDA driver names it (what keys a GPU artifact), or why none is found."""

    gpu: str | None
    reason: str
    compute_capability: str
    cuda_driver: str


class HostFacts(TypedDict):
    """Cheap facts about the host (benchmark documents, the tune lock)."""

    os: str
    os_release: str
    platform: str
    machine: str
    python: str
    python_implementation: str
    cpu_model: str
    logical_cores: int | None
    available_cpus: int | None


class InstalledState(TypedDict):
    """What a record of an earlier command holds of the machine (`installed_state`)."""

    gpux: str
    python: str
    platform: str
    installed: list[str]
    processor: str
    devices: list[str]
    gpu: GpuIdentity | None


@cache
def gpu_identity(device_id: int = 0) -> GpuIdentity:
    """Name and compute capability of an NVIDIA GPU, from the CUDA driver API."""
    cuda = cuda_driver()
    if cuda is None:
        return {"gpu": None, "reason": "no NVIDIA driver"}
    if cuda.cuInit(0) != 0:
        return {"gpu": None, "reason": "CUDA driver cannot initialise"}
    dev = ctypes.c_int()
    if cuda.cuDeviceGet(ctypes.byref(dev), device_id) != 0:
        return {"gpu": None, "reason": f"no CUDA device {device_id}"}
    name = ctypes.create_string_buffer(256)
    cuda.cuDeviceGetName(name, 256, dev)
    major, minor = ctypes.c_int(), ctypes.c_int()
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)  # COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)  # COMPUTE_CAPABILITY_MINOR
    version = ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(version))
    return {"gpu": name.value.decode(errors="replace"), "compute_capability": f"{major.value}.{minor.value}",
            "cuda_driver": f"{version.value // 1000}.{version.value % 1000 // 10}"}


def device_identity(device: str, options: Mapping[str, object]) -> GpuIdentity | dict[str, str]:
    """What keys an artifact to this machine's device (`device`: an artifact kind's, gpux.runtimes.ArtifactKind):
    nothing ("none", or "cpu-if-level" at an optimization level that fuses nothing machine-specific), the GPU
    the options name ("gpu"), else the CPU."""
    if device == "none" or (device == "cpu-if-level" and options.get("optimization") in (None, "disabled", "basic")):
        return {}
    if device == "gpu":
        return gpu_identity(int(str(options.get("device_id") or 0)))
    return cpu_identity()


def environment_facts() -> HostFacts:
    """Cheap facts about the host, from the standard library only (benchmark documents, the tune lock)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return {
        "os": platform.system(), "os_release": platform.release(), "platform": platform.platform(),
        "machine": platform.machine(), "python": platform.python_version(),
        "python_implementation": platform.python_implementation(), "cpu_model": cpu_model(),
        "logical_cores": os.cpu_count(), "available_cpus": len(affinity(0)) if affinity else None,
    }


DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dri", "/dev/accel")  # accelerator device nodes


def installed_state() -> InstalledState:
    """What a record of an earlier command (an unchanged build, a server's start) holds of the machine: gpux, Python,
    every distribution installed where Python imports from (a dist-info or egg-info folder names its version: one
    added, removed or upgraded, a provider plugin included, changes this), the CPU and the accelerator devices.
    Where: the site-packages folders on sys.path and the PYTHONPATH folders (`pip install --target`), not the
    folder of the script or of the current directory, which differ by how gpux is started. Read from the folders,
    not importlib.metadata (cheaper, and without the caches a long-running server would keep); a folder that
    cannot be listed is left out."""
    from gpux.version import __version__

    named = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    folders = [p for p in sys.path
               if p.endswith(("site-packages", "dist-packages", ".egg")) or (p and os.path.abspath(p) in named)]
    installed = sorted(name for p in folders for name in _distributions(p))
    devices = [d for d in DEVICES if os.path.exists(d)]
    return {"gpux": __version__, "python": sys.version, "platform": sys.platform, "installed": installed,
            "processor": cpu_model(), "devices": devices,
            "gpu": gpu_identity() if any("nvidia" in d for d in devices) else None}


def _distributions(folder: str) -> list[str]:
    """The distributions installed in one sys.path entry (an .egg entry is one itself), by folder name."""
    if folder.endswith(".egg"):
        return [os.path.basename(folder)]
    try:
        with os.scandir(folder) as entries:
            return [f"{folder}/{e.name}" for e in entries if e.name.endswith((".dist-info", ".egg-info", ".egg"))]
    except OSError:  # not a folder (a zip), gone, or not readable
        return []
