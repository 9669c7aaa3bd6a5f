"""The eight built-in rows of the registry, in priority order: every fact gpux keeps about each provider."""

from __future__ import annotations

import os

from gpux.machine import cuda_device_problem
from gpux.providers.row import Flavor, ImageRow, Provider, Refinements, TorchDevice, TuneRows

CUDA_BASE = "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04"  # Ubuntu 24.04: Python 3.12 from apt (22.04 has 3.10)
SLIM = "python:3.11-slim"
CUDA_APT = ("python3", "python3-venv")
AMD_DEVICES = ("/dev/kfd", "/dev/dri")
COMPILED_ON_FIRST_RUN = ("PyTorch compiles for the GPU it runs on: the first run builds the artifact (and its "
                         "Inductor cache) in the container; mount a volume at {store} to keep it")
ORT_ONNX = "onnxruntime_onnx"  # Triton's platform for ONNX Runtime
ONNX = ("model.onnx",)
ACCURACY_CONTROL_COST = 10  # NNCF's accuracy control validates a model per layer it gives back: ~this many builds

# `gpux tune`'s rows. int8 builds at the level where ONNX Runtime fuses Q/DQ pairs into int8 kernels (extended
# and above; at basic a QDQ model runs its float operators between them). Refinements are tried in order while
# the budget covers their cost; entropy calibration comes last: its KL search over 2048-bin histograms runs in
# Python (MobileNetV2, 33 samples: 65-75 s against 6 s for minmax)
CPU_TUNE: TuneRows = (("fp32", {"precision": "fp32", "optimization": "basic"}),
            ("fp32", {"precision": "fp32", "optimization": "all"}),
            ("fp16", {"precision": "fp16", "optimization": "basic"}),
            ("int8", {"precision": "int8", "quantization": "dynamic", "optimization": "all"}),
            ("int8", {"precision": "int8", "quantization": "static", "optimization": "all"}))
CPU_REFINE: Refinements = ({"quantization": "static"},
              (({"calibration_method": "percentile"}, 4), ({"keep_fp32": 0.05}, 3), ({"keep_fp32": 0.15}, 1.5),
               ({"keep_fp32": 0.3}, 1.5), ({"calibration_method": "entropy"}, 3)))
OPENVINO_TUNE: TuneRows = (("fp32", {"precision": "fp32", "inference_precision": "f32", "hint": "latency"}),
                 ("fp32", {"precision": "fp32", "inference_precision": "f32", "hint": "throughput"}),
                 ("bf16", {"precision": "fp32", "inference_precision": "bf16", "hint": "latency"}),
                 ("fp16", {"precision": "fp16", "inference_precision": "f32", "hint": "latency"}),
                 ("int8", {"precision": "int8", "int8_mode": "quantize", "hint": "latency"}),
                 ("int8", {"precision": "int8", "int8_mode": "quantize", "hint": "throughput"}))
OPENVINO_REFINE: Refinements = ({"int8_mode": "quantize", "hint": "latency"},  # one artifact: refined once
                   (({"preset": "mixed"}, 1.5), ({"bias_correction": "full"}, 4), ({"keep_fp32": 0.05}, 3),
                    ({"keep_fp32": 0.15}, 1.5), ({"keep_fp32": 0.3}, 1.5),
                    ({"int8_mode": "accuracy"}, ACCURACY_CONTROL_COST)))
TENSORRT_TUNE: TuneRows = (("fp32", {"precision": "fp32"}), ("fp16", {"precision": "fp16"}),
                           ("int8", {"precision": "int8"}))


def _rocm_device_problem() -> str | None:
    return None if os.path.exists("/dev/kfd") else "no AMD GPU found (/dev/kfd is missing)"


BUILTIN_ROWS: dict[str, Provider] = {
    p.name: p
    for p in (
        Provider(name="tensorrt", runtime="onnxruntime", ep="TensorrtExecutionProvider", extra="tensorrt",
                 platforms=("linux", "win32"), device_problem=cuda_device_problem, hardware="NVIDIA GPU",
                 options="TensorRTOptions", fallback=("cuda",),
                 ort_package="onnxruntime-gpu (+ TensorRT libraries)", precisions=("fp32", "fp16", "int8"),
                 targets="gpux.runtimes.tensorrt:tensorrt_targets", gpu_resource="nvidia.com/gpu", title="TensorRT.",
                 tune=TENSORRT_TUNE,
                 image=ImageRow(base_image=CUDA_BASE, pip=("onnxruntime-gpu", "tensorrt"), apt=CUDA_APT, gpus=True,
                                host_build="cuda", image_build="cuda", no_device_probe=True,
                                note="the TensorRT engine is keyed by the GPU: it is built on the first run; mount "
                                     "a volume at {store} to keep it"),
                 triton=(("onnxruntime", Flavor(platform=ORT_ONNX, backend=None, kind="KIND_GPU", files=ONNX,
                                                accelerator="tensorrt",
                                                accelerator_parameters="gpux.runtimes.tensorrt:triton_accelerator")),)),
        Provider(name="cuda", runtime="onnxruntime", ep="CUDAExecutionProvider", extra="cuda",
                 platforms=("linux", "win32"), device_problem=cuda_device_problem, hardware="NVIDIA GPU",
                 options="CUDAOptions", ort_package="onnxruntime-gpu", gpu_resource="nvidia.com/gpu",
                 title="ONNX Runtime CUDA EP.",
                 torch=TorchDevice(type="cuda", build="CUDA", index="cu128", variants=(
                     ("off", "fp32"), ("default", "fp32"), ("reduce-overhead", "fp32"), ("reduce-overhead", "fp16"),
                     ("default", "bf16")), image=ImageRow(base_image=SLIM, pip=(), gpus=True,
                                                          note=COMPILED_ON_FIRST_RUN)),
                 image=ImageRow(base_image=CUDA_BASE, pip=("onnxruntime-gpu",), apt=CUDA_APT, gpus=True,
                                host_build="cuda", image_build="cuda", no_device_probe=True),
                 triton=(("onnxruntime", Flavor(platform=ORT_ONNX, backend=None, kind="KIND_GPU", files=ONNX)),)),
        Provider(name="rocm", runtime="onnxruntime", ep="MIGraphXExecutionProvider", extra="", platforms=("linux",),
                 device_problem=_rocm_device_problem, hardware="AMD GPU",
                 options="ROCmOptions", also_accepted=("MIGraphXExecutionProvider", "ROCMExecutionProvider"),
                 ort_package="onnxruntime-migraphx or onnxruntime-rocm from AMD's package index (not on PyPI)",
                 gpu_resource="amd.com/gpu", title="ROCm / MIGraphX EP.",
                 torch=TorchDevice(type="cuda", build="ROCm", index="rocm6.4", variants=(
                     ("off", "fp32"), ("default", "fp32"), ("reduce-overhead", "fp16")),
                     image=ImageRow(base_image=SLIM, pip=(), devices=AMD_DEVICES, note=COMPILED_ON_FIRST_RUN)),
                 image=ImageRow(base_image=None, pip=(), devices=AMD_DEVICES, host_build="rocm", image_build="rocm",
                                no_device_probe=True,
                                note="ONNX Runtime for ROCm is not on PyPI: the base image must provide it")),
        Provider(name="coreml", runtime="onnxruntime", ep="CoreMLExecutionProvider", extra="coreml",
                 platforms=("darwin",),
                 hardware="Apple Neural Engine / GPU", options="CoreMLOptions", ort_package="onnxruntime (macOS wheel)",
                 torch_targets="gpux.runtimes.coreml:package_targets", title="Core ML.",
                 no_container="Core ML runs on macOS only; a Linux container cannot reach the Apple Neural Engine "
                              "or GPU"),
        Provider(name="mps", runtime="torch", ep=None, extra="torch", platforms=("darwin",),
                 hardware="Apple GPU (Metal)", options="MPSOptions",
                 torch=TorchDevice(type="mps", variants=(("off", "fp32"), ("off", "fp16"))),
                 title="PyTorch on Apple Metal (MPS).",
                 no_container="Metal (MPS) runs on macOS only; a Linux container cannot reach the Apple GPU"),
        Provider(name="directml", runtime="onnxruntime", ep="DmlExecutionProvider", extra="directml",
                 platforms=("win32",), hardware="DirectX 12 GPU", options="DirectMLOptions",
                 ort_package="onnxruntime-directml", title="DirectML EP.",
                 no_container="DirectML needs Windows and DirectX 12; a Linux container cannot use it"),
        Provider(name="openvino", runtime="openvino", ep="OpenVINOExecutionProvider", extra="openvino",
                 platforms=("linux", "win32", "darwin"), hardware="Intel CPU / GPU / NPU",
                 options="OpenVINOOptions", precisions=("fp32", "fp16", "int8"),
                 targets="gpux.runtimes.openvino_options:openvino_targets", title="OpenVINO.",
                 tune=OPENVINO_TUNE, refine=OPENVINO_REFINE,
                 image=ImageRow(base_image=SLIM, pip=("openvino", "nncf", "onnxruntime"), host_build="openvino",
                                image_build="openvino"),
                 triton=(("openvino", Flavor(platform=None, backend="openvino", kind="KIND_CPU",
                                             files=("model.xml", "model.bin"), builder="openvino",
                                             parameters="gpux.runtimes.openvino_options:triton_parameters")),
                         ("onnxruntime", Flavor(platform=ORT_ONNX, backend=None, kind="KIND_CPU", files=ONNX,
                                                accelerator="openvino")))),
        Provider(name="cpu", runtime="onnxruntime", ep="CPUExecutionProvider", extra="cpu",
                 platforms=("linux", "win32", "darwin"), hardware="any CPU", in_every_build=True, last_resort=True,
                 options="CPUOptions", ort_package="onnxruntime",
                 torch=TorchDevice(type="cpu", index="cpu", variants=(("off", "fp32"), ("default", "fp32")),
                                   image=ImageRow(base_image=SLIM, pip=(), host_build="cpu", image_build="cpu")),
                 precisions=("fp32", "fp16", "int8"), targets="gpux.runtimes.onnxruntime_plan:cpu_targets",
                 title="ONNX Runtime CPU.", tune=CPU_TUNE, refine=CPU_REFINE,
                 image=ImageRow(base_image=SLIM, pip=("onnxruntime",), host_build="cpu", image_build="cpu"),
                 triton=(("onnxruntime", Flavor(platform=ORT_ONNX, backend=None, kind="KIND_CPU", files=ONNX)),)),
    )
}  # fmt: skip
