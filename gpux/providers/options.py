"""Typed option blocks of gpux.yml's `providers:` section: one pydantic model per provider.

Only pydantic and the standard library are imported here. Each runtime maps these blocks to its own option
names next to its code (gpux.runtimes.onnxruntime_options, gpux.runtimes.openvino_options).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, BeforeValidator, ByteSize, ConfigDict, Field, model_validator

# a provider block's option values as gpux.yml, tune's rows and gpux.lock.json write them: scalars, or a nested
# block's fields (`torch: {compile: default}`), or a list (OpenVINO's ignored scopes)
OptionValue: TypeAlias = "str | int | float | bool | list[OptionValue] | dict[str, OptionValue] | None"
OptionFields: TypeAlias = "dict[str, OptionValue]"  # option field name -> value

DIM_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_DEVICE = r"(?:CPU|GPU(?:\.\d+)?|NPU)"
OPENVINO_DEVICE = rf"^(?:{_DEVICE}|AUTO|(?:AUTO|HETERO|MULTI):{_DEVICE}(?:,{_DEVICE})*)$"
LAYOUT = r"^[NCDHWT?]+$"
# coremltools `ct.target` names -> Core ML specification level (the iOS release it shipped with).
COREML_TARGETS: dict[str, int] = {
    **{f"iOS{v}": v for v in range(13, 19)},
    **{f"tvOS{v}": v for v in range(13, 19)},
    **{f"watchOS{v}": v + 7 for v in range(6, 12)},
    "macOS10_15": 13,
    **{f"macOS{v}": v + 3 for v in range(11, 16)},
}
COREML_BITS = {"palettize": (1, 2, 3, 4, 6, 8), "linear_quantize": (4, 8)}


def yaml_switch(off: str, on: str | None = None) -> BeforeValidator:
    """A mode field's names for YAML 1.1's booleans: `compile: off` (also no, false) reaches pydantic as False,
    `on` (yes, true) as True; they read as the field's `off` mode and its `on` mode, if it has one."""

    def mode(value: Any) -> Any:
        if isinstance(value, bool):
            return off if not value else on if on is not None else value
        return value

    return BeforeValidator(mode)


CoreMLTarget = Annotated[str, Field(json_schema_extra={"enum": list(COREML_TARGETS)})]
Arena = Literal["next_power_of_two", "same_as_requested"]


class Options(BaseModel):
    """Base of every provider block: unknown keys are errors and validated blocks are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def _only_if(self, fields: Sequence[str], allowed: bool, why: str) -> None:
        """Reject `fields` that differ from their defaults unless `allowed` (defaults always round-trip)."""
        defaults = type(self).model_fields
        given = [f for f in fields if getattr(self, f) != defaults[f].get_default(call_default_factory=True)]
        if given and not allowed:
            raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} only valid {why}")


def _field(default: Any, description: str, **kw: Any) -> Any:
    return Field(default, description=description, **kw)


KeepFP32 = (Annotated[int, Field(ge=0, strict=True)] | Annotated[float, Field(gt=0, lt=1, strict=True)]
            | list[Annotated[str, Field(min_length=1)]])
_KEEP_FP32 = ("Mixed precision: layers left in fp32, the rest int8. A count, a fraction of the quantizable layers "
              "(0 < f < 1, rounded up), or layer names (ONNX node names). A count or fraction keeps the layers "
              "int8 hurts most, ranked on the calibration samples (ONNX Runtime's QDQ debugger: signal-to-"
              "quantization-noise lost across each layer); the ranking and the kept layers are recorded in the "
              "artifact's info. 0 = every layer int8.")
_CALIBRATION = "Calibration inputs: a .npz/.npy file, or a folder of them, relative to gpux.yml."
_SAMPLES = "Seeded random calibration samples generated from the inputs when no calibration is given."
_DEVICE_ID = "Index of the GPU to run on."
_MEMORY = "Device memory arena limit, e.g. '4GB', '512MiB' or bytes; unset = no limit."
_ARENA = "Arena growth: next_power_of_two, or same_as_requested (exactly the amount requested)."


_RUNTIME = ("'onnxruntime' runs the ONNX artifact through ONNX Runtime; 'torch' runs a PyTorch source "
            "(TorchScript or .pt2) in PyTorch itself, eager or compiled, per the `torch` block.")


class TorchOptions(Options):
    """PyTorch as the runtime (`runtime: torch`): eager or torch.compile on the provider's device."""

    compile: Annotated[Literal["auto", "off", "default", "reduce-overhead", "max-autotune"],
                       yaml_switch("off", "default")] = _field(
        "auto", "torch.compile mode, or off (eager; on = default). 'auto' = off (eager), the measured faster "
        "default; gpux tune tries each mode.")
    precision: Literal["fp32", "fp16", "bf16"] = _field(
        "fp32", "dtype the model's weights and float inputs are cast to (outputs come back as float32).")
    channels_last: bool = _field(False, "Convert the model and 4-D inputs to the channels_last memory format.")
    cuda_graphs: bool = _field(
        False, "cuda/rocm: replay CUDA graphs with compile: off (captured once per input shape) or with "
        "compile: default; reduce-overhead and max-autotune capture them already.")

    @model_validator(mode="after")
    def _graphs(self) -> TorchOptions:
        if self.cuda_graphs and self.compile in ("reduce-overhead", "max-autotune"):
            raise ValueError(f"cuda_graphs is implied by compile: {self.compile} (it captures CUDA graphs "
                             "already); leave cuda_graphs out")
        return self


def _torch_block(block: Options, runtime: str, t: TorchOptions, gpu: bool) -> None:
    """`torch:` only with runtime torch; CUDA-graph options only where there is CUDA (or HIP)."""
    block._only_if(("torch",), runtime == "torch", "with runtime: torch")
    if not gpu and (t.cuda_graphs or t.compile == "reduce-overhead"):
        raise ValueError("cuda_graphs and compile: reduce-overhead capture CUDA graphs; they are only valid "
                         "on cuda and rocm (use compile: default or max-autotune)")


class CPUOptions(Options):
    """ONNX Runtime on the CPU, and the ONNX Runtime quantization of the model built for it."""

    runtime: Literal["onnxruntime", "torch"] = _field("onnxruntime", _RUNTIME)

    optimization: Annotated[Literal["disabled", "basic", "extended", "all"], yaml_switch("disabled")] = _field(
        "basic", "Graph optimization level the artifact is saved at (off = disabled); 'basic' stays portable, "
        "'extended' and 'all' write ONNX Runtime-specific operators for this kind of machine.")
    online_optimization: Annotated[Literal["disabled", "basic", "extended", "all"], yaml_switch("disabled")] = _field(
        "all", "Graph optimization level a session applies when it opens the artifact, on the machine that runs it "
        "(not part of the artifact); 'all', ONNX Runtime's own default, adds its layout and fused-kernel "
        "optimizations for that machine.")
    precision: Literal["fp32", "fp16", "int8"] = _field("fp32", "Precision of the built model.")
    quantization: Literal["dynamic", "static"] = _field(
        "dynamic", "int8 only: 'dynamic' quantizes activations at run time; 'static' uses calibration data.")
    calibration: str | None = _field(None, _CALIBRATION + " Used by static quantization.", min_length=1)
    calibration_samples: int = _field(16, _SAMPLES, ge=1)
    per_channel: bool = _field(False, "int8 only: quantize weights per channel instead of per tensor.")
    calibration_method: Literal["minmax", "entropy", "percentile"] = _field(
        "minmax", "Static int8 only: how activation ranges are calibrated (ONNX Runtime's CalibrationMethod): "
        "minmax, entropy (KL divergence over 2048-bin histograms; slow) or percentile (99.999 %).")
    keep_fp32: KeepFP32 = _field(0, "Static int8 only. " + _KEEP_FP32)
    torch: TorchOptions = Field(default_factory=TorchOptions,
                                description="runtime: torch only: how PyTorch runs the model on the CPU.")

    @model_validator(mode="after")
    def _int8_fields(self) -> CPUOptions:
        _torch_block(self, self.runtime, self.torch, gpu=False)
        self._only_if(("optimization", "online_optimization", "precision"), self.runtime == "onnxruntime",
                      "with runtime: onnxruntime (with runtime: torch, set torch.precision)")
        self._only_if(("quantization", "per_channel", "calibration", "calibration_samples", "calibration_method",
                       "keep_fp32"), self.precision == "int8", "with precision: int8")
        self._only_if(("calibration", "calibration_samples", "calibration_method", "keep_fp32"),
                      self.quantization == "static",
                      "with quantization: static (dynamic quantization needs no calibration data)")
        return self


class OpenVINOOptions(Options):
    """OpenVINO runtime (native IR) and the OpenVINO execution provider of ONNX Runtime."""

    runtime: Literal["openvino", "onnxruntime"] = _field(
        "openvino", "'openvino' builds an IR and runs it with OpenVINO itself; 'onnxruntime' runs the ONNX "
        "artifact through ONNX Runtime's OpenVINO execution provider (needs the onnxruntime-openvino "
        "distribution instead of onnxruntime).")
    device: str = _field(
        "CPU", "OpenVINO device: CPU, GPU, GPU.0, NPU, AUTO, or a priority list such as AUTO:GPU,CPU "
        "(also HETERO:... and MULTI:...).", pattern=OPENVINO_DEVICE)
    hint: Literal["latency", "throughput", "cumulative_throughput"] = _field(
        "latency", "Performance hint (PERFORMANCE_HINT).")
    precision: Literal["fp32", "fp16", "bf16", "int8"] = _field(
        "fp32", "Precision of the built IR: fp32; fp16 = fp16 weights; bf16 = fp32 weights executed in bf16 "
        "(INFERENCE_PRECISION_HINT=bf16, verified with bf16 tolerances); int8 = NNCF, per int8_mode.")
    int8_mode: Literal["quantize", "weights", "accuracy"] = _field(
        "quantize", "int8 only: 'quantize' = NNCF post-training quantization (uses calibration data), "
        "'weights' = int8 weight compression only, 'accuracy' = post-training quantization that keeps the "
        "declared verify.min_cosine (else the int8 default) on the verification inputs by leaving in fp32 the "
        "layers that break it (NNCF accuracy control; uses calibration data; builds take several times longer).")
    inference_precision: Literal["auto", "f32", "bf16", "f16"] = _field(
        "auto", "Execution precision (INFERENCE_PRECISION_HINT), part of the artifact's identity and verified "
        "as such; 'auto' follows precision: bf16 for precision bf16, else f32 (not the device default, which "
        "is bf16 on CPUs with AMX/AVX512-BF16).")
    num_requests: int | None = _field(
        None, "Parallel requests the hint targets (PERFORMANCE_HINT_NUM_REQUESTS).", ge=1)
    streams: Annotated[int, Field(ge=1)] | Literal["auto"] | None = _field(
        None, "Execution streams (NUM_STREAMS): a count or 'auto'; unset lets the hint decide.")
    threads: int | None = _field(None, "Inference threads (INFERENCE_NUM_THREADS).", ge=1)
    cache: bool = _field(True, "Cache compiled models (CACHE_DIR) in the artifact store.")
    layout: dict[str, Annotated[str, Field(pattern=LAYOUT)]] | None = _field(
        None, "Layout per input name, e.g. {images: NCHW}; letters N, C, D, H, W, T and ?.")
    calibration: str | None = _field(None, _CALIBRATION + " Used by int8_mode: quantize and accuracy.", min_length=1)
    calibration_samples: int = _field(16, _SAMPLES, ge=1)
    preset: Literal["performance", "mixed"] = _field(
        "performance", "int8_mode: quantize only: NNCF's QuantizationPreset: symmetric weights and activations "
        "(performance), or asymmetric activations (mixed).")
    bias_correction: Literal["fast", "full", "off"] = _field(
        "fast", "int8_mode: quantize only: NNCF's bias correction after quantization: fast, full (slower, "
        "statistics per layer) or off.")
    keep_fp32: KeepFP32 = _field(
        0, "int8_mode: quantize only (NNCF's ignored scope). " + _KEEP_FP32 + " Names may also be OpenVINO "
        "operation names.")

    @model_validator(mode="after")
    def _consistent(self) -> OpenVINOOptions:
        if self.streams == "auto" and self.hint == "latency":
            raise ValueError("streams: auto is OpenVINO's throughput stream mode; use it with hint: "
                             "throughput or cumulative_throughput, or give a stream count")
        self._only_if(("int8_mode", "calibration", "calibration_samples", "preset", "bias_correction", "keep_fp32"),
                      self.precision == "int8", "with precision: int8")
        self._only_if(("preset", "bias_correction", "keep_fp32"), self.int8_mode == "quantize",
                      "with int8_mode: quantize")
        self._only_if(("calibration", "calibration_samples"), self.int8_mode != "weights",
                      "with int8_mode: quantize or accuracy (weight compression needs no calibration data)")
        if self.int8_mode == "accuracy" and self.inference_precision in ("bf16", "f16"):
            raise ValueError(f"int8_mode: accuracy measures accuracy at f32 execution; inference_precision "
                             f"{self.inference_precision} would run other numbers than it kept (use auto or f32)")
        return self


class ProfileRange(Options):
    """Range of one dynamic dimension in a TensorRT optimization profile."""

    min: int = _field(..., "Smallest size the engine accepts.", ge=1)
    opt: int = _field(..., "Size the engine is tuned for.", ge=1)
    max: int = _field(..., "Largest size the engine accepts.", ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> ProfileRange:
        if not self.min <= self.opt <= self.max:
            raise ValueError(f"expected min <= opt <= max, got {self.min}, {self.opt}, {self.max}")
        return self


class TensorRTOptions(Options):
    """TensorRT, through the TensorRT execution provider of ONNX Runtime."""

    precision: Literal["fp32", "fp16", "bf16", "int8", "best"] = _field(
        "fp32", "Kernel precisions TensorRT may choose; 'best' allows fp16 and int8. int8 needs a quantized "
        "(QDQ) model or calibration data.")
    workspace: ByteSize | None = _field(None, "Maximum builder workspace, e.g. '4GB'; unset = the default.")
    builder_optimization_level: int = _field(
        3, "Builder optimization level 0-5: lower builds faster, higher may run faster.", ge=0, le=5)
    profiles: dict[Annotated[str, Field(pattern=DIM_NAME)], ProfileRange] = Field(
        default_factory=dict,
        description="Optimization profile per symbolic dimension, e.g. {batch: {min: 1, opt: 8, max: 32}}.")
    timing_cache: bool = _field(True, "Keep the TensorRT timing cache in the artifact store.")
    engine_cache: bool = _field(True, "Keep built TensorRT engines in the artifact store.")
    dla_core: int | None = _field(None, "Run on this DLA core (Jetson/DRIVE); unset = the GPU.", ge=0)
    calibration: str | None = _field(None, _CALIBRATION, min_length=1)
    calibration_samples: int = _field(16, _SAMPLES, ge=1)
    device_id: int = _field(0, _DEVICE_ID, ge=0)

    @model_validator(mode="after")
    def _precision_fields(self) -> TensorRTOptions:
        self._only_if(("calibration", "calibration_samples"), self.precision in ("int8", "best"),
                      "with precision: int8 or best")
        self._only_if(("dla_core",), self.precision in ("fp16", "int8", "best"),
                      "with precision fp16, int8 or best (DLA runs FP16 and INT8 only)")
        return self


class CUDAOptions(Options):
    """ONNX Runtime CUDA execution provider, or PyTorch on CUDA (runtime: torch)."""

    runtime: Literal["onnxruntime", "torch"] = _field("onnxruntime", _RUNTIME)
    device_id: int = _field(0, _DEVICE_ID, ge=0)
    memory: ByteSize | None = _field(None, _MEMORY)
    arena_extend_strategy: Arena = _field("next_power_of_two", _ARENA)
    cudnn_conv_algo_search: Literal["EXHAUSTIVE", "HEURISTIC", "DEFAULT"] = _field(
        "EXHAUSTIVE", "cuDNN convolution algorithm search: full benchmarking, a heuristic, or the default.")
    copy_in_default_stream: bool = _field(True, "Copy on the compute stream (recommended; false may race).")
    tf32: bool = _field(True, "Allow TF32 math for float32 MatMul/Conv on Ampere and newer GPUs.")
    cuda_graph: bool = _field(False, "Capture and replay CUDA graphs (static shapes, whole model on CUDA).")
    io_binding: bool = _field(False, "Keep benchmark inputs and outputs on the GPU, not copied per run.")
    torch: TorchOptions = Field(default_factory=TorchOptions,
                                description="runtime: torch only: how PyTorch runs the model on the GPU.")

    @model_validator(mode="after")
    def _graph_needs_binding(self) -> CUDAOptions:
        _torch_block(self, self.runtime, self.torch, gpu=True)
        if self.cuda_graph and not self.io_binding:
            raise ValueError("cuda_graph requires io_binding: true (CUDA graphs replay on bound buffers)")
        return self


class ROCmOptions(Options):
    """AMD GPUs through ONNX Runtime's MIGraphX execution provider, the older ROCm one, or PyTorch for ROCm."""

    runtime: Literal["onnxruntime", "torch"] = _field("onnxruntime", _RUNTIME)
    execution_provider: Literal["rocm", "migraphx"] = _field(
        "migraphx", "ONNX Runtime execution provider: migraphx, or rocm (removed in ONNX Runtime 1.23).")
    device_id: int = _field(0, _DEVICE_ID, ge=0)
    memory: ByteSize | None = _field(None, _MEMORY)
    arena_extend_strategy: Arena = _field("next_power_of_two", _ARENA)
    migraphx_fp16: bool = _field(False, "MIGraphX only: compile in fp16.")
    migraphx_int8: bool = _field(False, "MIGraphX only: compile in int8.")
    exhaustive_tune: bool = _field(False, "MIGraphX only: exhaustive tuning while compiling.")
    cache: bool = _field(True, "MIGraphX only: keep compiled programs in the artifact store.")
    miopen_conv_exhaustive_search: bool = _field(False, "ROCm EP only: exhaustive MIOpen convolution search.")
    tunable_op: bool = _field(False, "ROCm EP only: TunableOp with online tuning.")
    torch: TorchOptions = Field(default_factory=TorchOptions,
                                description="runtime: torch only: how PyTorch (ROCm build) runs the model.")

    @model_validator(mode="after")
    def _ep_fields(self) -> ROCmOptions:
        _torch_block(self, self.runtime, self.torch, gpu=True)
        migraphx = self.execution_provider == "migraphx"
        self._only_if(("migraphx_fp16", "migraphx_int8", "exhaustive_tune"), migraphx,
                      "with execution_provider: migraphx")
        self._only_if(("miopen_conv_exhaustive_search", "tunable_op"), not migraphx,
                      "with execution_provider: rocm")
        return self


class CoreMLOptions(Options):
    """Core ML: ONNX Runtime's CoreML execution provider, and native packages built from PyTorch."""

    compute_units: Literal["all", "cpu_only", "cpu_and_gpu", "cpu_and_ne"] = _field(
        "all", "Hardware Core ML may use; cpu_and_ne = CPU and Neural Engine.")
    model_format: Literal["mlprogram", "neuralnetwork"] = _field(
        "mlprogram", "Core ML model type: mlprogram (iOS 15/macOS 12+) or neuralnetwork (older devices).")
    static_shapes: bool = _field(False, "Only give Core ML the nodes whose inputs have static shapes.")
    cache: bool = _field(True, "Keep compiled Core ML models in the artifact store.")
    minimum_deployment_target: CoreMLTarget | None = _field(
        None, "Native builds: oldest OS to support, as coremltools names it (iOS16, macOS13, ...).")
    compute_precision: Literal["fp16", "fp32"] = _field("fp16", "Native builds: precision of intermediates.")
    compression: Annotated[Literal["none", "palettize", "linear_quantize", "prune"], yaml_switch("none")] = _field(
        "none", "Native builds: coremltools post-training weight compression (off = none).")
    compression_bits: int | None = _field(
        None, "Bits per weight: palettize 1/2/3/4/6/8, linear_quantize 4/8; unset = coremltools default.")

    @model_validator(mode="after")
    def _native_fields(self) -> CoreMLOptions:
        target = self.minimum_deployment_target
        level = COREML_TARGETS.get(target or "iOS18")
        if level is None:
            raise ValueError(f"unknown minimum_deployment_target {target!r}; expected one of "
                             f"{', '.join(COREML_TARGETS)}")
        if self.model_format == "mlprogram" and level < 15:
            raise ValueError(f"model_format mlprogram needs iOS15/macOS12 or newer, not {target}")
        if self.compression != "none" and (self.model_format != "mlprogram" or level < 16):
            raise ValueError("compression needs model_format: mlprogram and iOS16/macOS13 or newer")
        bits = COREML_BITS.get(self.compression, ())
        if self.compression_bits is not None and self.compression_bits not in bits:
            raise ValueError(f"compression_bits {self.compression_bits} is not valid with compression: "
                             f"{self.compression} (valid: {', '.join(map(str, bits)) or 'none'})")
        return self


class MPSOptions(Options):
    """Apple GPUs through PyTorch's Metal (MPS) backend; PyTorch sources only."""

    runtime: Literal["torch"] = _field("torch", "PyTorch is the only runtime with an MPS device.")
    torch: TorchOptions = Field(default_factory=TorchOptions, description="How PyTorch runs the model.")

    @model_validator(mode="after")
    def _no_graphs(self) -> MPSOptions:
        _torch_block(self, self.runtime, self.torch, gpu=False)
        return self


class DirectMLOptions(Options):
    """ONNX Runtime DirectML execution provider (Windows, DirectX 12)."""

    device_id: int | None = _field(None, "Adapter index (DXGI order); overrides the two options below.", ge=0)
    performance_preference: Literal["default", "high_performance", "minimum_power"] = _field(
        "default", "Adapter preference when device_id is unset.")
    device_filter: Literal["gpu", "npu", "any"] = _field("gpu", "Adapter kinds used when device_id is unset.")

    @model_validator(mode="after")
    def _selection(self) -> DirectMLOptions:
        self._only_if(("performance_preference", "device_filter"), self.device_id is None,
                      "without device_id (an explicit adapter index overrides them)")
        return self

