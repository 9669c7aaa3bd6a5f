"""TensorRT: the GPU identity that keys engines, and engines built through ONNX Runtime's TensorRT EP."""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any


@cache
def gpu_identity(device_id: int = 0) -> dict[str, Any]:
    """Name and compute capability of the GPU from the CUDA driver API (no CUDA toolkit needed)."""
    for lib in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            cuda = ctypes.CDLL(lib)
        except OSError:
            continue
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
    return {"gpu": None, "reason": "no NVIDIA driver"}
