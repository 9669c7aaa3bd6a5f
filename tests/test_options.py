"""Provider option blocks of gpux.yml and their mapping to the runtimes' documented option names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gpux.providers import BUILTIN_ROWS
from gpux.providers import options as o
from gpux.providers.options import (
    CoreMLOptions,
    CPUOptions,
    CUDAOptions,
    DirectMLOptions,
    OpenVINOOptions,
    ProfileRange,
    ROCmOptions,
    TensorRTOptions,
)
from gpux.runtimes import onnxruntime_options as ortopts
from gpux.runtimes import openvino_options as ovopts
from gpux.runtimes.tensorrt import trt_profile_shapes

OPTIONS = {name: row.option_model for name, row in BUILTIN_ROWS.items()}
MODELS = [*OPTIONS.values(), ProfileRange]
PROFILE = {"min": 1, "opt": 8, "max": 32}


# ---- the models themselves ----


def test_providers_in_priority_order() -> None:
    assert list(OPTIONS) == ["tensorrt", "cuda", "rocm", "coreml", "mps", "directml", "openvino", "cpu"]
    assert all(issubclass(model, o.Options) for model in MODELS)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_defaults_validate(name: str) -> None:
    model = OPTIONS[name]
    assert model.model_validate({}) == model()
    assert model.model_validate(model().model_dump()) == model()


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_unknown_key_is_rejected(model: type[o.Options]) -> None:
    data: dict[str, Any] = dict(PROFILE) if model is ProfileRange else {}
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model.model_validate({**data, "no_such_option": 1})


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_field_has_a_description(model: type[o.Options]) -> None:
    for name, field in model.model_fields.items():
        assert field.description and field.description.strip(), f"{model.__name__}.{name}"
    for name, prop in model.model_json_schema()["properties"].items():
        assert prop.get("description"), f"{model.__name__}.{name} in the JSON Schema"


def test_blocks_are_frozen() -> None:
    with pytest.raises(ValidationError):
        CUDAOptions().device_id = 1  # type: ignore[misc]


@pytest.mark.parametrize(("text", "size"), [("4GB", 4_000_000_000), ("512MiB", 536_870_912), (1024, 1024)])
def test_sizes_parse_with_units(text: Any, size: int) -> None:
    assert CUDAOptions(memory=text).memory == size
    assert TensorRTOptions(workspace=text).workspace == size
    assert ROCmOptions(memory=text).memory == size


def test_bad_size_is_rejected() -> None:
    with pytest.raises(ValidationError):
        CUDAOptions(memory="four gigabytes")


def test_profile_range_must_be_ordered() -> None:
    assert ProfileRange(min=2, opt=2, max=2).opt == 2
    for bad in ({"min": 9, "opt": 8, "max": 32}, {"min": 1, "opt": 33, "max": 32},
                {"min": 0, "opt": 1, "max": 1}):
        with pytest.raises(ValidationError):
            ProfileRange.model_validate(bad)
    with pytest.raises(ValidationError, match="min <= opt <= max"):
        TensorRTOptions.model_validate({"profiles": {"batch": {"min": 8, "opt": 1, "max": 32}}})
    with pytest.raises(ValidationError):
        TensorRTOptions.model_validate({"profiles": {"1batch": PROFILE}})


@pytest.mark.parametrize("device", ["CPU", "GPU", "GPU.0", "GPU.1", "NPU", "AUTO", "AUTO:GPU,CPU",
                                    "AUTO:NPU,GPU.1,CPU", "HETERO:GPU,CPU", "MULTI:GPU.0,GPU.1"])
def test_openvino_device_accepts(device: str) -> None:
    assert OpenVINOOptions(device=device).device == device


@pytest.mark.parametrize("device", ["cpu", "GPU0", "GPU.", "TPU", "AUTO:", "AUTO:GPU,", "AUTO:GPU CPU",
                                    "AUTO:AUTO"])
def test_openvino_device_rejects(device: str) -> None:
    with pytest.raises(ValidationError):
        OpenVINOOptions(device=device)


@pytest.mark.parametrize(
    ("model", "data", "message"),
    [
        (CPUOptions, {"quantization": "static"}, "only valid with precision: int8"),
        (CPUOptions, {"per_channel": True}, "only valid with precision: int8"),
        (CPUOptions, {"precision": "fp16", "calibration": "calib.npz"}, "only valid with precision: int8"),
        (CPUOptions, {"precision": "int8", "calibration": "c.npz"}, "only valid with quantization: static"),
        (OpenVINOOptions, {"int8_mode": "weights"}, "only valid with precision: int8"),
        (OpenVINOOptions, {"precision": "int8", "int8_mode": "weights", "calibration": "c"}, "quantize"),
        (OpenVINOOptions, {"streams": "auto"}, "throughput stream mode"),
        (TensorRTOptions, {"precision": "fp16", "calibration": "calib.npz"}, "precision: int8 or best"),
        (TensorRTOptions, {"dla_core": 0}, "DLA runs FP16 and INT8 only"),
        (CUDAOptions, {"cuda_graph": True}, "cuda_graph requires io_binding"),
        (ROCmOptions, {"execution_provider": "rocm", "migraphx_fp16": True}, "execution_provider: migraphx"),
        (ROCmOptions, {"tunable_op": True}, "execution_provider: rocm"),
        (CoreMLOptions, {"minimum_deployment_target": "iOS12"}, "unknown minimum_deployment_target"),
        (CoreMLOptions, {"minimum_deployment_target": "macOS11"}, "mlprogram needs iOS15/macOS12"),
        (CoreMLOptions, {"model_format": "neuralnetwork", "compression": "prune"}, "compression needs"),
        (CoreMLOptions, {"minimum_deployment_target": "iOS15", "compression": "palettize"}, "iOS16/macOS13"),
        (CoreMLOptions, {"compression": "linear_quantize", "compression_bits": 6}, "valid: 4, 8"),
        (CoreMLOptions, {"compression_bits": 4}, "valid: none"),
        (DirectMLOptions, {"device_id": 1, "device_filter": "npu"}, "without device_id"),
    ],
)
def test_inconsistent_blocks_are_rejected(model: type[o.Options], data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        model.model_validate(data)


def test_consistent_blocks_validate() -> None:
    assert CPUOptions(quantization="dynamic", per_channel=False) == CPUOptions()  # written-out defaults
    CPUOptions(precision="int8", quantization="static", calibration="calib/", per_channel=True)
    CPUOptions(precision="int8", calibration_samples=4, quantization="static")
    OpenVINOOptions(precision="int8", int8_mode="quantize", calibration="calib.npy", calibration_samples=8)
    TensorRTOptions(precision="best", calibration="calib.npz", dla_core=0)
    CUDAOptions(cuda_graph=True, io_binding=True)
    ROCmOptions(execution_provider="rocm", tunable_op=True, miopen_conv_exhaustive_search=True)
    CoreMLOptions(model_format="neuralnetwork", minimum_deployment_target="iOS13")
    CoreMLOptions(minimum_deployment_target="macOS13", compression="palettize", compression_bits=6)
    DirectMLOptions(device_id=0)


# ---- mapping to the runtimes' names ----


@pytest.mark.parametrize(
    ("provider", "opts", "name"),
    [
        ("tensorrt", None, "TensorrtExecutionProvider"),
        ("cuda", None, "CUDAExecutionProvider"),
        ("rocm", ROCmOptions(execution_provider="rocm"), "ROCMExecutionProvider"),
        ("rocm", ROCmOptions(execution_provider="migraphx"), "MIGraphXExecutionProvider"),
        ("rocm", None, "MIGraphXExecutionProvider"),
        ("coreml", None, "CoreMLExecutionProvider"),
        ("directml", None, "DmlExecutionProvider"),
        ("openvino", None, "OpenVINOExecutionProvider"),
        ("cpu", CPUOptions(), "CPUExecutionProvider"),
    ],
)
def test_ort_ep_name(provider: str, opts: o.Options | None, name: str) -> None:
    assert ortopts.ort_ep_name(provider, opts) == name


def test_wrong_provider_or_block_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        ortopts.ort_ep_name("vulkan")
    with pytest.raises(TypeError, match="CUDAOptions"):
        ortopts.ort_provider_options("cuda", CPUOptions())


def test_tensorrt_options() -> None:
    opts = TensorRTOptions(precision="fp16", workspace="2GiB", builder_optimization_level=5, dla_core=1,
                           device_id=1)
    assert ortopts.ort_provider_options("tensorrt", opts, cache_dir="/store/trt") == {
        "device_id": "1",
        "trt_max_workspace_size": "2147483648",
        "trt_builder_optimization_level": "5",
        "trt_dla_enable": "True",
        "trt_dla_core": "1",
        "trt_fp16_enable": "True",
        "trt_int8_enable": "False",
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": "/store/trt",
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": "/store/trt",
    }
    assert ortopts.ort_provider_options("tensorrt", TensorRTOptions(timing_cache=False)) == {
        "device_id": "0",
        "trt_builder_optimization_level": "3",
        "trt_fp16_enable": "False",
        "trt_int8_enable": "False",
        "trt_engine_cache_enable": "False",
        "trt_timing_cache_enable": "False",
    }


@pytest.mark.parametrize(
    ("precision", "flags"),
    [
        ("fp32", {"trt_fp16_enable": "False", "trt_int8_enable": "False"}),
        ("fp16", {"trt_fp16_enable": "True", "trt_int8_enable": "False"}),
        ("bf16", {"trt_fp16_enable": "False", "trt_int8_enable": "False", "trt_bf16_enable": "True"}),
        ("int8", {"trt_fp16_enable": "False", "trt_int8_enable": "True"}),
        ("best", {"trt_fp16_enable": "True", "trt_int8_enable": "True"}),
    ],
)
def test_tensorrt_precision_flags(precision: str, flags: dict[str, str]) -> None:
    out = ortopts.ort_provider_options("tensorrt", TensorRTOptions(precision=precision))  # type: ignore[arg-type]
    assert {k: v for k, v in out.items() if k.endswith(("16_enable", "int8_enable"))} == flags


def test_tensorrt_profile_shapes() -> None:
    seq = {"min": 16, "opt": 128, "max": 512}
    profiles = TensorRTOptions(profiles={"batch": PROFILE, "seq": seq}).profiles
    inputs: dict[str, list[int | str]] = {"ids": ["batch", "seq"], "image": ["batch", 3, 224, 224], "s": [1]}
    assert trt_profile_shapes(profiles, inputs) == {
        "trt_profile_min_shapes": "ids:1x16,image:1x3x224x224",
        "trt_profile_opt_shapes": "ids:8x128,image:8x3x224x224",
        "trt_profile_max_shapes": "ids:32x512,image:32x3x224x224",
    }
    assert trt_profile_shapes(profiles, {"image": [1, 3, 224, 224]}) == {}
    with pytest.raises(ValueError, match=r"input 'ids': dynamic dimension\(s\) seq need min/opt/max"):
        trt_profile_shapes({"batch": ProfileRange(**PROFILE)}, {"ids": ["batch", "seq"]})


def test_cuda_options() -> None:
    opts = CUDAOptions(device_id=1, memory="4GB", arena_extend_strategy="same_as_requested",
                       cudnn_conv_algo_search="HEURISTIC", copy_in_default_stream=False, tf32=False,
                       cuda_graph=True, io_binding=True)  # fmt: skip
    assert ortopts.ort_provider_options("cuda", opts) == {
        "device_id": "1",
        "gpu_mem_limit": "4000000000",
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": "HEURISTIC",
        "do_copy_in_default_stream": "False",
        "use_tf32": "False",
        "enable_cuda_graph": "True",
    }
    assert "gpu_mem_limit" not in ortopts.ort_provider_options("cuda", CUDAOptions())


def test_rocm_options_for_migraphx() -> None:
    opts = ROCmOptions(memory="8GB", migraphx_fp16=True, exhaustive_tune=True)
    assert ortopts.ort_provider_options("rocm", opts, cache_dir="/store/migraphx") == {
        "device_id": "0",
        "migraphx_mem_limit": "8000000000",
        "migraphx_arena_extend_strategy": "kNextPowerOfTwo",
        "migraphx_fp16_enable": "True",
        "migraphx_int8_enable": "False",
        "migraphx_exhaustive_tune": "True",
        "migraphx_model_cache_dir": "/store/migraphx",
    }


def test_rocm_options_for_the_rocm_ep() -> None:
    opts = ROCmOptions(execution_provider="rocm", device_id=2, memory=1024, tunable_op=True)
    assert ortopts.ort_provider_options("rocm", opts, cache_dir="/store/rocm") == {
        "device_id": "2",
        "gpu_mem_limit": "1024",
        "arena_extend_strategy": "kNextPowerOfTwo",
        "miopen_conv_exhaustive_search": "False",
        "tunable_op_enable": "True",
        "tunable_op_tuning_enable": "True",
    }


def test_coreml_options() -> None:
    opts = CoreMLOptions(compute_units="cpu_and_ne", model_format="neuralnetwork", static_shapes=True)
    assert ortopts.ort_provider_options("coreml", opts, cache_dir="/store/coreml") == {
        "ModelFormat": "NeuralNetwork",
        "MLComputeUnits": "CPUAndNeuralEngine",
        "RequireStaticInputShapes": "1",
        "ModelCacheDirectory": "/store/coreml",
    }
    assert ortopts.ort_provider_options("coreml", CoreMLOptions(cache=False), cache_dir="/store/coreml") == {
        "ModelFormat": "MLProgram",
        "MLComputeUnits": "ALL",
        "RequireStaticInputShapes": "0",
    }


def test_directml_options() -> None:
    assert ortopts.ort_provider_options("directml", DirectMLOptions(device_id=1)) == {
        "device_id": "1",
        "performance_preference": "default",
        "device_filter": "gpu",
    }
    opts = DirectMLOptions(performance_preference="minimum_power", device_filter="npu")
    assert ortopts.ort_provider_options("directml", opts) == {
        "performance_preference": "minimum_power",
        "device_filter": "npu",
    }
    assert ortopts.DIRECTML_SESSION_SETTINGS == {"enable_mem_pattern": False, "execution_mode": "ORT_SEQUENTIAL"}


def test_openvino_ep_options() -> None:
    opts = OpenVINOOptions(device="GPU.0", inference_precision="f16", threads=8, streams=2,
                           layout={"images": "NCHW", "mask": "NC"})  # fmt: skip
    assert ortopts.ort_provider_options("openvino", opts, cache_dir="/store/ov") == {
        "device_type": "GPU.0",
        "precision": "FP16",
        "num_of_threads": "8",
        "num_streams": "2",
        "layout": "images[NCHW],mask[NC]",
        "cache_dir": "/store/ov",
    }
    auto = OpenVINOOptions(device="AUTO:GPU,CPU", hint="throughput", streams="auto",
                           inference_precision="bf16", cache=False)
    assert ortopts.ort_provider_options("openvino", auto, cache_dir="/store/ov") == {"device_type": "AUTO:GPU,CPU"}


def test_cpu_has_no_ep_options() -> None:
    assert ortopts.ort_provider_options("cpu", CPUOptions(optimization="all"), cache_dir="/store") == {}


def test_openvino_properties() -> None:
    opts = OpenVINOOptions(hint="throughput", num_requests=4, streams=2, threads=4,
                           inference_precision="bf16")
    assert ovopts.openvino_properties(opts) == {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "PERFORMANCE_HINT_NUM_REQUESTS": "4",
        "NUM_STREAMS": "2",
        "INFERENCE_NUM_THREADS": "4",
        "INFERENCE_PRECISION_HINT": "bf16",
    }
    tput = OpenVINOOptions(hint="throughput", streams="auto")
    assert ovopts.openvino_properties(tput, cache_dir="/store/ov") == {
        "PERFORMANCE_HINT": "THROUGHPUT",
        "NUM_STREAMS": "AUTO",
        "INFERENCE_PRECISION_HINT": "f32",  # declared fp32 executes f32, not the device default
        "CACHE_DIR": "/store/ov",
    }
    assert "CACHE_DIR" not in ovopts.openvino_properties(OpenVINOOptions(cache=False), cache_dir="/store/ov")
    assert ovopts.openvino_properties(OpenVINOOptions(hint="cumulative_throughput")) == {
        "PERFORMANCE_HINT": "CUMULATIVE_THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"
    }
    assert ovopts.openvino_properties(OpenVINOOptions(precision="bf16"))["INFERENCE_PRECISION_HINT"] == "bf16"


def test_module_imports_no_runtime() -> None:
    code = ("import sys, gpux.providers.options, gpux.runtimes.onnxruntime_options, gpux.runtimes.openvino_options; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'onnxruntime', 'openvino', 'numpy', 'onnx'}))")
    root = Path(o.__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"


# ---- against the installed runtimes (real sessions, no mocks) ----


@pytest.fixture(scope="module")
def relu_model() -> bytes:
    onnx = pytest.importorskip("onnx")
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
    )
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _sample() -> Any:
    np = pytest.importorskip("numpy")
    return np.linspace(-1.0, 1.0, 48, dtype=np.float32).reshape(1, 3, 4, 4)


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_cpu_options_accepted_by_onnxruntime(relu_model: bytes, level: str) -> None:
    ort = pytest.importorskip("onnxruntime")
    from gpux.runtimes.onnxruntime import session_options

    opts = CPUOptions(optimization=level)  # type: ignore[arg-type]
    so = session_options(opts.optimization)
    names = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
             "all": "ORT_ENABLE_ALL"}
    assert so.graph_optimization_level == getattr(ort.GraphOptimizationLevel, names[level])
    providers = [(ortopts.ort_ep_name("cpu", opts), ortopts.ort_provider_options("cpu", opts))]
    session = ort.InferenceSession(relu_model, sess_options=so, providers=providers)
    assert session.get_providers() == ["CPUExecutionProvider"]
    x = _sample()
    (y,) = session.run(None, {"x": x})
    assert (y == x.clip(min=0)).all()


def test_directml_session_settings_apply_to_onnxruntime(relu_model: bytes) -> None:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.enable_mem_pattern = True
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    for attr, value in ortopts.DIRECTML_SESSION_SETTINGS.items():
        setattr(so, attr, getattr(ort.ExecutionMode, value) if attr == "execution_mode" else value)
    assert so.enable_mem_pattern is False and so.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    ort.InferenceSession(relu_model, sess_options=so, providers=["CPUExecutionProvider"])


def test_ep_names_are_known_to_onnxruntime() -> None:
    ort = pytest.importorskip("onnxruntime")
    named = {ep for row in BUILTIN_ROWS.values() for ep in (row.ep, *row.also_accepted) if ep}
    current = named - {"ROCMExecutionProvider"}  # the ROCm EP left ONNX Runtime in 1.23
    assert current <= set(ort.get_all_providers())


@pytest.mark.parametrize(
    ("device", "opts"),
    [
        ("CPU", OpenVINOOptions()),
        ("CPU", OpenVINOOptions(hint="throughput", num_requests=2, streams=2, threads=2)),
        ("CPU", OpenVINOOptions(hint="throughput", streams="auto", inference_precision="bf16")),
        ("CPU", OpenVINOOptions(inference_precision="f16")),
        ("AUTO:CPU", OpenVINOOptions(device="AUTO:CPU", hint="cumulative_throughput")),
        ("HETERO:CPU", OpenVINOOptions(device="HETERO:CPU")),
    ],
)
def test_openvino_properties_accepted_by_openvino(
    relu_model: bytes, tmp_path: Any, device: str, opts: OpenVINOOptions
) -> None:
    ov = pytest.importorskip("openvino")
    path = tmp_path / "model.onnx"
    path.write_bytes(relu_model)
    props = ovopts.openvino_properties(opts, cache_dir=str(tmp_path / "cache"))
    compiled = ov.Core().compile_model(str(path), opts.device, props)
    assert opts.device == device
    if device == "CPU":
        assert compiled.get_property("PERFORMANCE_HINT") == props["PERFORMANCE_HINT"]
        bf16 = "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")  # else the CPU runs f32
        expected = {"auto": ov.Type.f32, "f32": ov.Type.f32,
                    "bf16": ov.Type.bf16 if bf16 else ov.Type.f32}.get(opts.inference_precision)
        if expected is not None:
            assert compiled.get_property("INFERENCE_PRECISION_HINT") == expected
    x = _sample()
    y = compiled({"x": x})[compiled.output(0)]
    exact = opts.inference_precision in ("auto", "f32")
    assert abs(y - x.clip(min=0)).max() <= (0.0 if exact else 1e-2)  # f16/bf16 execution rounds


def test_layouts_parse_as_openvino_layouts() -> None:
    ov = pytest.importorskip("openvino")
    opts = OpenVINOOptions(layout={"a": "NCHW", "b": "NHWC", "c": "N?", "d": "NCDHW", "e": "NTC"})
    for text in (opts.layout or {}).values():
        assert str(ov.Layout(text)) == "[" + ",".join(text) + "]"
    with pytest.raises(ValidationError):
        OpenVINOOptions(layout={"a": "nchw"})
