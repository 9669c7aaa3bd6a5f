"""The pydantic models of gpux.yml as written: one per section, `GpuxConfig` for the whole file.

Validators raise messages located deeper than their field (the bad list item); loading lives in gpux.config.load."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model, model_validator
from pydantic_core import PydanticCustomError

from gpux.config.inputs import Preprocess, check_preprocess, check_routes
from gpux.config.problems import NAME_RE, did_you_mean, show_value
from gpux.config.steps import Postprocess, check_labels
from gpux.config.thresholds import Verify
from gpux.formats import ONNX_DTYPE_NAMES
from gpux.providers import options as opts
from gpux.providers import registry
from gpux.sources.ref import TASKS, is_hub, parse_hub

ROWS = registry()  # gpux.yml's provider blocks, in priority order: the registry's rows, plugins' included
PROVIDERS = tuple(ROWS)
# gpux/formats.py's element types; ONNX's own names for two of them (TensorProto FLOAT, DOUBLE, in
# ONNX_DTYPE_NAMES) are accepted and read as the gpux name
DType = Annotated[Literal[
    "float32", "float16", "bfloat16", "float64",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "string",
], BeforeValidator(lambda v: ONNX_DTYPE_NAMES.get(v, v) if isinstance(v, str) else v)]  # fmt: skip
DIM_RE = re.compile(opts.DIM_NAME)  # a dynamic dim's name, e.g. batch


def _fail(message: str, *at: str | int) -> PydanticCustomError:
    """A validation error whose location goes `at` deeper than the field (e.g. the bad item of a list)."""
    return PydanticCustomError("gpux", "{message}", {"message": message, "at": tuple(str(a) for a in at)})


def _provider_name(value: Any, index: int | None, allow_auto: bool = False) -> str:
    names = (*PROVIDERS, "auto") if allow_auto else PROVIDERS
    at = () if index is None else (index,)
    if value == "auto" and not allow_auto:
        raise _fail("'auto' stands alone (backend: auto); a list names providers to try in order", *at)
    if not isinstance(value, str) or value not in names:
        from gpux.providers import broken_plugin

        broken = broken_plugin(value) if isinstance(value, str) else ""
        raise _fail(f"unknown provider {show_value(value)}{did_you_mean(value, names)}{broken}; "
                    f"expected one of {', '.join(names)}", *at)
    return value


def _provider_list(value: list[Any]) -> tuple[str, ...]:
    names = tuple(_provider_name(v, i) for i, v in enumerate(value))
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _fail(f"{name!r} is listed twice", i)
    return names


def _backend(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (_provider_name(value, None, allow_auto=True),)
    if isinstance(value, list | tuple) and value:
        return _provider_list(list(value))
    raise _fail(f"expected 'auto', a provider name, or a non-empty list of provider names, got {show_value(value)}")


def _providers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise _fail(f"expected a non-empty list of provider names, got {show_value(value)}")
    return _provider_list(list(value))


def _dim(value: Any, i: int) -> int | str:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise _fail(f"dim {i} is {value}: static dims are >= 1; name a dynamic dim instead (e.g. batch)", i)
        return value
    if isinstance(value, str) and DIM_RE.match(value):
        return value
    raise _fail(f"dim {i}: expected an int >= 1 or a name such as batch, got {show_value(value)}", i)


def _shape(value: Any) -> tuple[int | str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(f"expected a list of ints or names, got {show_value(value)}")
    return tuple(_dim(v, i) for i, v in enumerate(value))


def _range(value: Any) -> tuple[float, float]:
    pair = isinstance(value, list | tuple) and len(value) == 2
    if not pair or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
        raise _fail(f"expected [low, high] (two numbers), got {show_value(value)}")
    if not value[0] < value[1]:
        raise _fail(f"expected low < high, got {show_value(value)}")
    return float(value[0]), float(value[1])


def _to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


_provider_list_schema = {"type": "array", "items": {"enum": list(PROVIDERS)}, "minItems": 1}
Backend = Annotated[
    tuple[str, ...],
    BeforeValidator(_backend),
    WithJsonSchema({"anyOf": [{"enum": ["auto", *PROVIDERS]}, _provider_list_schema]}),
]
ProviderList = Annotated[tuple[str, ...], BeforeValidator(_providers), WithJsonSchema(_provider_list_schema)]
Shape = Annotated[
    tuple[int | str, ...],
    BeforeValidator(_shape),
    WithJsonSchema(
        {"type": "array", "items": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string"}]}}
    ),
]
Range = Annotated[
    tuple[float, float],
    BeforeValidator(_range),
    WithJsonSchema({"maxItems": 2, "minItems": 2, "prefixItems": [{"type": "number"}, {"type": "number"}],
                    "type": "array"}),
]
Version = Annotated[str, BeforeValidator(_to_str)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSource(Strict):
    source: str = Field(description="Model file, relative to gpux.yml (ONNX, with external data beside it), or a "
                        "hub id hf://ORG/NAME[@REVISION][/PATH] (docs/hub.md).")
    format: Literal["onnx", "torchscript", "torch_export"] | None = Field(
        None, description="Source format; inferred from the file when omitted."
    )
    task: Literal[TASKS] | None = Field(  # type: ignore[valid-type]
        None, description="A transformers checkpoint exported to ONNX for this task (docs/hub.md).")
    origin: dict[str, str] | None = Field(
        None, description="Where the file came from (repo, commit, task), as `gpux package` writes it for a hub id "
        "or a checkpoint; a part of every artifact's key.")

    @model_validator(mode="after")
    def _hub(self) -> ModelSource:
        ref = parse_hub(self.source) if is_hub(self.source) else None
        if is_hub(self.source) and ref is None:
            raise _fail(f"{self.source!r} is not a hub id; write hf://ORG/NAME[@REVISION][/PATH/IN/REPO]", "source")
        if ref is not None and not ref.is_onnx and self.task is None:
            raise _fail(f"{ref} names a checkpoint, not an .onnx file: add task ({' | '.join(TASKS)}) to export it, "
                        f"or name the file (hf://{ref.repo}/onnx/model.onnx)", "source")
        if self.task is not None and (self.format not in (None, "onnx") or self.source.lower().endswith(".onnx")):
            raise _fail("task exports a transformers checkpoint; an ONNX or PyTorch file is taken as it is (drop "
                        "task)", "task")
        return self


class TensorSpec(Strict):
    dtype: DType = Field(description="Element type, e.g. float32, int64.")
    shape: Shape | None = Field(
        None, description="Dimensions: ints for static dims, names (e.g. batch) for dynamic ones."
    )
    labels: list[str] | str | None = Field(
        None, description="Class labels for the last axis: a list, or a text file (one per line)."
    )
    range: Range | None = Field(
        None, description="[low, high) of values for synthetic inputs (integer inputs: token ids, classes)."
    )
    description: str | None = Field(None, description="What this tensor holds.")


class InputSpec(TensorSpec):
    preprocess: Preprocess | None = Field(
        None, description="How a file (an image, raw bytes, audio, text) becomes this tensor, for `gpux run NAME "
        "FILE` and Session.predict (docs/answers.md).")

    @model_validator(mode="after")
    def _fits_shape(self) -> InputSpec:
        wrong = check_preprocess(self.preprocess, self.shape, self.dtype) if self.preprocess else None
        if wrong:
            raise _fail(wrong[0], "preprocess", *wrong[1])
        return self


class OutputSpec(TensorSpec):
    postprocess: Postprocess | None = Field(
        None, description="How this output becomes answers (classes with scores, boxes); none: the tensor as is "
        "(docs/answers.md).")

    @model_validator(mode="after")
    def _labels_fit(self) -> OutputSpec:
        wrong = check_labels(self.labels, self.shape, self.postprocess)
        if wrong:
            raise _fail(wrong[0], *wrong[1])
        return self


class Threads(Strict):
    intra_op: int = Field(0, ge=0, description="Threads inside one operator; 0 = the runtime's default.")
    inter_op: int = Field(0, ge=0, description="Threads across operators; 0 = the runtime's default.")


class Runtime(Strict):
    backend: Backend = Field(
        ("auto",), description="'auto' (best available), one provider, or an ordered list to try."
    )
    fallback: bool = Field(
        True, description="Fall back to the next provider when one is unavailable or fails; false = strict."
    )
    supported: ProviderList | None = Field(
        None, description="Providers this model is known to work on; others are rejected."
    )
    threads: Threads = Field(default_factory=Threads, description="Thread pools of the runtime.")
    min_coverage: float | None = Field(
        None, ge=0, le=1, description="Least fraction of graph nodes the chosen accelerator must take."
    )
    build_on_run: bool = Field(
        True, description="run/serve build a missing or stale artifact (TensorRT engines too) on first use; "
        "false pins the built artifacts: a missing one is refused with the `gpux build` to run."
    )

    @model_validator(mode="after")
    def _backend_supported(self) -> Runtime:
        if self.supported is None or self.backend == ("auto",):
            return self
        bad = [i for i, name in enumerate(self.backend) if name not in self.supported]
        if bad:
            names = ", ".join(self.backend[i] for i in bad)
            raise _fail(f"{names} {'is' if len(bad) == 1 else 'are'} not in runtime.supported "
                        f"({', '.join(self.supported)}); add {'it' if len(bad) == 1 else 'them'} there "
                        "or leave it out of backend", "backend", bad[0])
        return self


# one block per registry row, typed by the row's option model (`providers.<name>` in gpux.yml)
Providers: type[Strict] = create_model(  # type: ignore[call-overload]  # field definitions built from the rows
    "Providers", __base__=Strict, __module__=__name__,
    **{name: (row.option_model, Field(default_factory=row.option_model, description=row.title or
                                      f"{name}: {row.hardware or 'a plugin provider'}."))
       for name, row in ROWS.items()})


class Benchmark(Strict):
    warmup: int = Field(10, ge=0, description="Least warm-up runs.")
    warmup_seconds: float = Field(0.2, ge=0, description="Least warm-up time in seconds.")
    runs: int = Field(100, ge=1, description="Least measured runs.")
    seconds: float = Field(3.0, ge=0, description="Least measured time in seconds.")
    batch: int | None = Field(None, ge=1, description="Batch size for the 'batch' dim of synthetic inputs.")
    concurrency: int = Field(1, ge=1, description="Parallel requests.")
    shapes: dict[str, int] = Field(
        default_factory=dict, description="Values for symbolic dims of synthetic inputs, e.g. {seq: 128}."
    )


ProviderKey = Literal[PROVIDERS]  # type: ignore[valid-type]  # a provider's name (the registry's rows)


class Package(Strict):
    base_image: str | None = Field(None, description="Base image of the container for every provider; "
                                   "default per provider.")
    base_images: dict[ProviderKey, str] = Field(
        default_factory=dict,
        description="Base image per provider, e.g. {cuda: my/cuda-base:12}; wins over base_image.")
    packages: list[str] = Field(default_factory=list, description="Extra pip packages for the image.")
    system_packages: list[str] = Field(default_factory=list, description="Extra apt packages for the image.")
    ca_bundle: str | None = Field(
        None, description="A CA bundle (PEM, relative to this file) that pip inside the image trusts, for a "
        "package index behind a private CA; images trust only their base image's CAs without it.")


class Serve(Strict):
    host: str = Field("127.0.0.1", description="Address `gpux serve` binds; loopback unless another is asked for.")
    http_port: int = Field(8000, ge=0, le=65535, description="REST port (Open Inference Protocol); 0 = any free.")
    grpc_port: int | None = Field(
        8001, ge=0, le=65535, description="gRPC port (inference.GRPCInferenceService); null = no gRPC.")
    max_batch_size: int = Field(
        0, ge=0, description="Dynamic batching: merge requests along the batch dim up to this many rows "
        "(also the largest batch one request may send); 0 = off.")
    max_queue_delay_us: int = Field(
        0, ge=0, description="How long a batch may wait for more requests, in microseconds (0 = no wait).")
    instances: int = Field(1, ge=1, description="Sessions of this model running requests in parallel.")
    max_body_bytes: int = Field(64 * 2**20, ge=1024, description="Largest request body in bytes (413 above).")
    max_tensor_elements: int = Field(
        16 * 2**20, ge=1, description="Most elements one input tensor may hold (400 above).")
    request_timeout_s: float = Field(
        30.0, gt=0, description="Longest a request may wait and run before it is answered 408.")
    header_timeout_s: float = Field(
        10.0, gt=0, description="Longest a client may take to send a request's line and headers (from connecting, "
        "or from the first byte of a later request on the connection); slower ones get 408 and are closed.")
    body_timeout_s: float = Field(
        30.0, gt=0, description="Longest a client may take to send a request's body once its headers are in; "
        "slower ones get 408 and are closed.")
    keep_alive_s: int = Field(
        5, ge=1, description="How long an idle keep-alive connection stays open between requests.")
    max_connections: int = Field(
        512, ge=1, description="Most connections open at once on the REST port; one more is answered 503 and "
        "closed.")
    max_header_bytes: int = Field(
        64 * 2**10, ge=1024, description="Largest request line and headers together, in bytes (431 above, and the "
        "connection is closed).")
    max_files: int = Field(
        64, ge=1, description="Most encoded files (images, audio, texts) one request may send, batching on or off "
        "(413 above).")
    max_image_pixels: int = Field(
        25_000_000, ge=1, description="Most pixels one image file may have (width x height, read from its header "
        "before it is decoded; 413 above).")
    max_decoded_bytes: int = Field(
        256 * 2**20, ge=2**20, description="Most memory the images being decoded may take at once, across requests "
        "(width x height x 4 bytes, from their headers; a request's files are decoded one after the other, so it "
        "holds its largest): an image above it alone is 413, other requests wait their turn.")


class RayAutoscaling(Strict):
    min_replicas: int = Field(1, ge=0, description="Fewest replicas (0 lets the model scale to zero).")
    max_replicas: int = Field(4, ge=1, description="Most replicas.")
    target_ongoing_requests: float = Field(2.0, gt=0, description="Requests per replica the autoscaler aims at.")


class RayBatch(Strict):
    concurrency: int | None = Field(
        None, ge=1, description="Actors answering files at once, each with the model open once (default: as many "
        "as the cluster's CPUs, or GPUs for a GPU provider, hold).")
    files_per_call: int = Field(32, ge=1, description="Files Ray Data hands an actor per call (its batch_size).")
    num_cpus: float | None = Field(None, ge=0, description="CPUs per actor (default 1: decoding runs there).")
    num_gpus: float | None = Field(None, ge=0, description="GPUs per actor (default 1 for GPU providers, else 0).")


class RayDeploy(Strict):
    num_replicas: int = Field(1, ge=1, description="Replicas of the model (ignored with autoscaling).")
    autoscaling: RayAutoscaling | None = Field(None, description="Scale replicas with load instead.")
    max_ongoing_requests: int = Field(
        32, ge=1, description="Requests one replica holds at once (Ray's default of 5 is below a typical batch).")
    ray_actor_options: dict[str, Any] = Field(
        default_factory=dict, description="Ray actor options per replica (num_cpus, num_gpus, memory, ...); "
        "default: num_gpus: 1 for GPU providers, num_cpus: 1 otherwise.")
    batch: RayBatch = Field(default_factory=RayBatch, description="`gpux run NAME SOURCE --on ray`: batch inference "
                            "on Ray Data.")


class Deploy(Strict):
    ray: RayDeploy = Field(default_factory=RayDeploy, description="`gpux deploy ray`: Ray Serve deployment.")


class GpuxConfig(Strict):
    schema_version: Literal[1] = Field(1, description="Version of the gpux.yml format.")
    name: str = Field(pattern=NAME_RE, description="Model name used by `gpux run NAME`.")
    version: Version = Field("0.0.0", description="The model's version, e.g. 1.0.0.")
    description: str | None = Field(None, description="What the model does.")
    model: ModelSource = Field(description="Where the model comes from.")
    inputs: dict[str, InputSpec] | None = Field(None, description="Inputs; read from the model when omitted.")
    outputs: dict[str, OutputSpec] | None = Field(None, description="Outputs; read from the model when omitted.")
    shapes: dict[Annotated[str, Field(pattern=opts.DIM_NAME)], Annotated[int, Field(ge=0)] | opts.ProfileRange] = \
        Field(default_factory=dict, description=(
            "Sizes of symbolic dims, declared once: an int, or {min, opt, max}. Verification, calibration and "
            "benchmark data use the size (opt); OpenVINO keeps min..max dynamic; TensorRT profiles use all "
            "three. --shape NAME=SIZE overrides."))
    runtime: Runtime = Field(default_factory=Runtime, description="Provider selection and fallback.")
    providers: Providers = Field(default_factory=Providers, description="Options per provider.")
    verify: Verify = Field(default_factory=Verify, description="Accuracy checks of built artifacts.")
    benchmark: Benchmark = Field(default_factory=Benchmark, description="Defaults of `gpux run --benchmark`.")
    package: Package = Field(default_factory=Package, description="Container image settings.")
    serve: Serve = Field(default_factory=Serve, description="Settings of `gpux serve`.")
    deploy: Deploy = Field(default_factory=Deploy, description="Scale-out on other engines (Ray Serve).")

    @model_validator(mode="after")
    def _verify_names_outputs(self) -> GpuxConfig:
        if self.outputs is None:
            return self
        named = [("outputs", n) for n in self.verify.outputs] + \
            [("classifications", i) for i in range(len(self.verify.classifications or ()))]
        for where, key in named:
            name = key if isinstance(key, str) else (self.verify.classifications or [])[key]
            if name not in self.outputs:
                raise _fail(f"{name!r} is not an output (outputs: {', '.join(self.outputs)})", "verify", where, key)
        return self

    @model_validator(mode="after")
    def _boxes_name_an_image(self) -> GpuxConfig:
        images = [n for n, s in (self.inputs or {}).items() if s.preprocess and s.preprocess.image]
        for name, spec in (self.outputs or {}).items():
            boxes = spec.postprocess.boxes if spec.postprocess else None
            if boxes is None or (boxes.image in images if boxes.image else len(images) <= 1):
                continue
            where = ("outputs", name, "postprocess", "boxes") + (("image",) if boxes.image else ())
            raise _fail(f"{boxes.image!r} is not an image input (inputs with preprocess: {', '.join(images) or 'none'})"
                        if boxes.image else f"several image inputs ({', '.join(images)}): name one as image:", *where)
        return self

    @model_validator(mode="after")
    def _routes_name_inputs(self) -> GpuxConfig:
        wrong = check_routes({n: (s.preprocess, s.dtype) for n, s in (self.inputs or {}).items()})
        if wrong:
            raise _fail(wrong[0], *wrong[1])
        return self
