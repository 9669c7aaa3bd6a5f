"""ONNX Runtime's names for gpux.yml's provider blocks: execution-provider names, their provider_options
(all strings), and the session settings and graph optimization levels the blocks choose.

Tables map each block's snake_case fields to the option names ONNX Runtime documents; nothing here imports
onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpux.providers import registry
from gpux.providers.options import Options, ROCmOptions, TensorRTOptions

# onnxruntime.SessionOptions attribute -> value DirectML requires (execution_mode: ExecutionMode member name).
DIRECTML_SESSION_SETTINGS: dict[str, bool | str] = {"enable_mem_pattern": False, "execution_mode": "ORT_SEQUENTIAL"}
# provider -> onnxruntime.SessionOptions settings its EP requires
SESSION_SETTINGS: dict[str, dict[str, bool | str]] = {"directml": DIRECTML_SESSION_SETTINGS}

# ---- converters: the runtime's string for a value, or None to leave the option out ----
Convert = Callable[[Any], str | None]


def _text(value: Any) -> str | None:
    return None if value is None else str(int(value) if isinstance(value, int) else value)


def _flag(on: str, off: str) -> Callable[[Any], str]:
    return lambda value: on if value else off


_true_false = _flag("True", "False")  # what ORT's TensorRT/CUDA/ROCm/MIGraphX/DirectML parsers accept
_one_zero = _flag("1", "0")  # the CoreML EP reads its flags as "1"/"0"


def _pick(mapping: Mapping[Any, str]) -> Convert:
    return lambda value: mapping.get(value)


_ARENA_NAMES = _pick({"next_power_of_two": "kNextPowerOfTwo", "same_as_requested": "kSameAsRequested"})
_COREML_UNITS = {"all": "ALL", "cpu_only": "CPUOnly", "cpu_and_gpu": "CPUAndGPU",
                 "cpu_and_ne": "CPUAndNeuralEngine"}

# EP key -> rows of (field, ONNX Runtime option name, converter).
ORT_TABLES: dict[str, tuple[tuple[str, str, Convert], ...]] = {
    "tensorrt": (
        ("device_id", "device_id", _text),
        ("workspace", "trt_max_workspace_size", _text),
        ("builder_optimization_level", "trt_builder_optimization_level", _text),
        ("dla_core", "trt_dla_enable", lambda v: None if v is None else "True"),
        ("dla_core", "trt_dla_core", _text),
    ),
    "cuda": (
        ("device_id", "device_id", _text),
        ("memory", "gpu_mem_limit", _text),
        ("arena_extend_strategy", "arena_extend_strategy", _ARENA_NAMES),
        ("cudnn_conv_algo_search", "cudnn_conv_algo_search", _text),
        ("copy_in_default_stream", "do_copy_in_default_stream", _true_false),
        ("tf32", "use_tf32", _true_false),
        ("cuda_graph", "enable_cuda_graph", _true_false),
    ),
    "rocm": (
        ("device_id", "device_id", _text),
        ("memory", "gpu_mem_limit", _text),
        ("arena_extend_strategy", "arena_extend_strategy", _ARENA_NAMES),
        ("miopen_conv_exhaustive_search", "miopen_conv_exhaustive_search", _true_false),
        ("tunable_op", "tunable_op_enable", _true_false),
        ("tunable_op", "tunable_op_tuning_enable", _true_false),
    ),
    "migraphx": (
        ("device_id", "device_id", _text),
        ("memory", "migraphx_mem_limit", _text),
        ("arena_extend_strategy", "migraphx_arena_extend_strategy", _ARENA_NAMES),
        ("migraphx_fp16", "migraphx_fp16_enable", _true_false),
        ("migraphx_int8", "migraphx_int8_enable", _true_false),
        ("exhaustive_tune", "migraphx_exhaustive_tune", _true_false),
    ),
    "coreml": (
        ("model_format", "ModelFormat", _pick({"mlprogram": "MLProgram", "neuralnetwork": "NeuralNetwork"})),
        ("compute_units", "MLComputeUnits", _pick(_COREML_UNITS)),
        ("static_shapes", "RequireStaticInputShapes", _one_zero),
    ),
    "directml": (
        ("device_id", "device_id", _text),
        ("performance_preference", "performance_preference", _text),
        ("device_filter", "device_filter", _text),
    ),
    "openvino": (
        ("device", "device_type", _text),
        ("inference_precision", "precision", _pick({"f32": "FP32", "f16": "FP16"})),
        ("threads", "num_of_threads", _text),
        ("streams", "num_streams", lambda v: str(v) if isinstance(v, int) else None),
        ("layout", "layout", lambda v: ",".join(f"{k}[{x}]" for k, x in v.items()) if v else None),
    ),
    "cpu": (),
}
# TensorRT precision -> flags (trt_bf16_enable only when asked for: older builds reject the key).
TRT_PRECISION: dict[str, dict[str, str]] = {
    "fp32": {"trt_fp16_enable": "False", "trt_int8_enable": "False"},
    "fp16": {"trt_fp16_enable": "True", "trt_int8_enable": "False"},
    "bf16": {"trt_fp16_enable": "False", "trt_int8_enable": "False", "trt_bf16_enable": "True"},
    "int8": {"trt_fp16_enable": "False", "trt_int8_enable": "True"},
    "best": {"trt_fp16_enable": "True", "trt_int8_enable": "True"},
}
# EP key -> (cache field, option switching it on or None, option naming its directory).
ORT_CACHES: dict[str, tuple[tuple[str, str | None, str], ...]] = {
    "tensorrt": (("engine_cache", "trt_engine_cache_enable", "trt_engine_cache_path"),
                 ("timing_cache", "trt_timing_cache_enable", "trt_timing_cache_path")),
    "migraphx": (("cache", None, "migraphx_model_cache_dir"),),
    "coreml": (("cache", None, "ModelCacheDirectory"),),
    "openvino": (("cache", None, "cache_dir"),),
}


def _check(provider: str, opts: Options | None) -> Options:
    rows = registry()
    if provider not in rows:
        raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(rows)}")
    model = rows[provider].option_model
    if opts is not None and not isinstance(opts, model):
        raise TypeError(f"provider {provider} takes {model.__name__}, not {type(opts).__name__}")
    return model() if opts is None else opts


# rocm's `execution_provider` choices -> ONNX Runtime's name (every other EP is its row's `ep`)
EP_CHOICES = {"migraphx": "MIGraphXExecutionProvider", "rocm": "ROCMExecutionProvider"}


def _ep_key(provider: str, opts: Options) -> str:
    return "migraphx" if isinstance(opts, ROCmOptions) and opts.execution_provider == "migraphx" else provider


def ort_ep_name(provider: str, opts: Options | None = None) -> str:
    """Exact ONNX Runtime execution-provider name for a gpux provider (for rocm: the EP `opts` choose; for a
    plugin's row: the EP the row names)."""
    key = _ep_key(provider, _check(provider, opts))
    return EP_CHOICES.get(key) or str(registry()[provider].ep)


def ort_provider_options(provider: str, opts: Options, cache_dir: str | None = None) -> dict[str, str]:
    """ONNX Runtime provider_options (all strings) for `ort_ep_name(provider, opts)`; cpu has none.

    `cache_dir` is the artifact-store directory for engine/program caches: without it caches stay off.
    TensorRT optimization profiles need concrete input shapes: merge in `runtimes.tensorrt.trt_profile_shapes`.
    """
    opts = _check(provider, opts)
    key = _ep_key(provider, opts)
    out = {name: value for field, name, convert in ORT_TABLES.get(key, ())  # a plugin's EP: no known options
           if (value := convert(getattr(opts, field))) is not None}
    if isinstance(opts, TensorRTOptions):
        out.update(TRT_PRECISION[opts.precision])
    for field, switch, path in ORT_CACHES.get(key, ()):
        enabled = bool(getattr(opts, field)) and cache_dir is not None
        if switch is not None:
            out[switch] = _true_false(enabled)
        if enabled:
            out[path] = str(cache_dir)
    return out
