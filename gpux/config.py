"""Pydantic models of gpux.yml as written, `load_config(path)`, and errors located to file:line:col."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema

from gpux import options as opts
from gpux.errors import ConfigError, Problem

CONFIG_NAMES = ("gpux.yml", "gpux.yaml")
PROVIDERS = tuple(opts.OPTIONS)  # priority order: tensorrt, cuda, rocm, coreml, directml, openvino, cpu
DTYPES = (
    "float32", "float16", "bfloat16", "float64",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "string",
)  # fmt: skip
DType = Literal[
    "float32", "float16", "bfloat16", "float64",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "bool", "string",
]  # fmt: skip
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
DIM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _provider_name(value: Any, allow_auto: bool = False) -> str:
    names = (*PROVIDERS, "auto") if allow_auto else PROVIDERS
    if not isinstance(value, str) or value not in names:
        hint = did_you_mean(value, names) if isinstance(value, str) else ""
        raise ValueError(f"unknown provider {value!r}{hint}; expected one of {', '.join(names)}")
    return value


def _backend(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (_provider_name(value, allow_auto=True),)
    if isinstance(value, list) and value:
        names = tuple(_provider_name(v) for v in value)
        if len(set(names)) != len(names):
            raise ValueError("a provider is listed twice")
        return names
    raise ValueError("expected 'auto', a provider name, or a non-empty list of provider names")


def _providers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError("expected a non-empty list of provider names")
    return tuple(_provider_name(v) for v in value)


def _dim(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected a list of ints or names, got {value!r}")
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"dimension {value} must be >= 1 (use a name such as 'batch' for a dynamic dim)")
        return value
    if value.isdigit():
        return int(value)
    if not DIM_RE.match(value):
        raise ValueError(f"expected a list of ints or names, got {value!r}")
    return value


def _shape(value: Any) -> tuple[int | str, ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of ints or names, got {value!r}")
    return tuple(_dim(v) for v in value)


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
Version = Annotated[str, BeforeValidator(_to_str)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSource(Strict):
    source: str = Field(description="Model file, relative to gpux.yml (ONNX, with external data beside it).")
    format: Literal["onnx", "torchscript", "torch_export"] | None = Field(
        None, description="Source format; inferred from the file when omitted."
    )


class TensorSpec(Strict):
    dtype: DType = Field(description="Element type, e.g. float32, int64.")
    shape: Shape | None = Field(
        None, description="Dimensions: ints for static dims, names (e.g. batch) for dynamic ones."
    )
    labels: list[str] | str | None = Field(
        None, description="Class labels for the last axis: a list, or a text file (one per line)."
    )
    range: tuple[float, float] | None = Field(
        None, description="[low, high) of values for synthetic inputs (integer inputs: token ids, classes)."
    )
    description: str | None = Field(None, description="What this tensor holds.")


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


class Providers(Strict):
    tensorrt: opts.TensorRTOptions = Field(default_factory=opts.TensorRTOptions, description="TensorRT.")
    cuda: opts.CUDAOptions = Field(default_factory=opts.CUDAOptions, description="ONNX Runtime CUDA EP.")
    rocm: opts.ROCmOptions = Field(default_factory=opts.ROCmOptions, description="ROCm / MIGraphX EP.")
    coreml: opts.CoreMLOptions = Field(default_factory=opts.CoreMLOptions, description="Core ML.")
    directml: opts.DirectMLOptions = Field(default_factory=opts.DirectMLOptions, description="DirectML EP.")
    openvino: opts.OpenVINOOptions = Field(default_factory=opts.OpenVINOOptions, description="OpenVINO.")
    cpu: opts.CPUOptions = Field(default_factory=opts.CPUOptions, description="ONNX Runtime CPU.")


class Verify(Strict):
    enabled: bool = Field(True, description="Compare every built artifact with the FP32 reference.")
    samples: int = Field(4, ge=1, description="Seeded random input sets to compare on.")
    seed: int = Field(0, description="Seed of the random inputs.")
    data: str | None = Field(None, description="Sample inputs (.npz with one array per input) instead.")
    atol: float | None = Field(None, ge=0, description="Absolute tolerance; default depends on precision.")
    rtol: float | None = Field(None, ge=0, description="Relative tolerance; default depends on precision.")
    min_cosine: float | None = Field(
        None, ge=-1, le=1, description="Least cosine similarity of each output with the reference."
    )
    min_top1: float | None = Field(
        None, ge=0, le=1, description="Least top-1 agreement on outputs that look like class scores."
    )


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


class Package(Strict):
    base_image: str | None = Field(None, description="Base image of the container; default per provider.")
    packages: list[str] = Field(default_factory=list, description="Extra pip packages for the image.")
    system_packages: list[str] = Field(default_factory=list, description="Extra apt packages for the image.")


class GpuxConfig(Strict):
    schema_version: Literal[1] = Field(1, description="Version of the gpux.yml format.")
    name: str = Field(pattern=NAME_RE, description="Model name used by `gpux run NAME`.")
    version: Version = Field("0.0.0", description="The model's version, e.g. 1.0.0.")
    description: str | None = Field(None, description="What the model does.")
    model: ModelSource = Field(description="Where the model comes from.")
    inputs: dict[str, TensorSpec] | None = Field(None, description="Inputs; read from the model when omitted.")
    outputs: dict[str, TensorSpec] | None = Field(None, description="Outputs; read from the model when omitted.")
    runtime: Runtime = Field(default_factory=Runtime, description="Provider selection and fallback.")
    providers: Providers = Field(default_factory=Providers, description="Options per provider.")
    verify: Verify = Field(default_factory=Verify, description="Accuracy checks of built artifacts.")
    benchmark: Benchmark = Field(default_factory=Benchmark, description="Defaults of `gpux run --benchmark`.")
    package: Package = Field(default_factory=Package, description="Container image settings.")


@dataclass
class Project:
    """A loaded gpux.yml: the validated config plus where it lives."""

    path: Path
    config: GpuxConfig
    marks: dict[tuple[str, ...], tuple[int, int]] = field(default_factory=dict, repr=False)
    warnings: list[str] = field(default_factory=list)

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def source(self) -> Path:
        return (self.root / self.config.model.source).resolve()

    def problem(self, loc: tuple[str, ...], message: str, key: bool = False) -> Problem:
        line, col = locate(self.marks, loc, key)
        return Problem(str(self.path), line, col, ".".join(loc), message)


def find_config(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        for name in CONFIG_NAMES:
            if (p / name).is_file():
                return p / name
        raise ConfigError([Problem(str(p), 0, 0, "", "no gpux.yml here; create one (see docs/config.md)")])
    if not p.is_file():
        raise ConfigError([Problem(str(p), 0, 0, "", "file not found")])
    return p


def load_config(path: str | Path) -> Project:
    """Read, migrate and validate a gpux.yml; raise ConfigError listing every problem at once."""
    from gpux import legacy

    file = find_config(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(str(file), 0, 0, "", f"cannot read: {exc}")]) from None
    data, marks, problems = parse_yaml(text, str(file))
    if problems:
        raise ConfigError(problems)
    if not isinstance(data, dict):
        raise ConfigError([Problem(str(file), 1, 1, "", "expected a mapping of keys (name:, model:, ...)")])
    data, notes = legacy.migrate(data)
    project = Project(path=file, config=None, marks=marks)  # type: ignore[arg-type]
    warnings = [str(project.problem(loc, msg)) for loc, msg in notes]
    try:
        config = GpuxConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([project.problem(*_describe(e)) for e in exc.errors()]) from None
    project.config = config
    project.warnings = warnings
    problems = check_files(project)
    if problems:
        raise ConfigError(problems)
    return project


def check_files(project: Project) -> list[Problem]:
    """Files named by the config exist (cheap: no model parsing)."""
    cfg, out = project.config, []
    if not project.source.exists():
        out.append(project.problem(("model", "source"), f"file not found: {project.source}"))
    for kind, specs in (("inputs", cfg.inputs), ("outputs", cfg.outputs)):
        for name, spec in (specs or {}).items():
            if isinstance(spec.labels, str) and not (project.root / spec.labels).is_file():
                out.append(project.problem((kind, name, "labels"), f"labels file not found: {spec.labels}"))
    if cfg.verify.data and not (project.root / cfg.verify.data).is_file():
        out.append(project.problem(("verify", "data"), f"file not found: {cfg.verify.data}"))
    return out


def parse_yaml(text: str, file: str) -> tuple[Any, dict[tuple[str, ...], tuple[int, int]], list[Problem]]:
    """Safe-load YAML and map each key path to (line, col); duplicate keys are problems."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        msg = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        if "python/" in msg or "could not determine a constructor" in msg:
            msg = "tags such as !!python/... are not allowed (YAML is loaded safely)"
        return None, {}, [Problem(file, line, col, "", f"YAML syntax: {msg}")]
    except yaml.YAMLError as exc:
        return None, {}, [Problem(file, 0, 0, "", f"YAML syntax: {exc}")]
    marks: dict[tuple[str, ...], tuple[int, int]] = {}
    problems: list[Problem] = []

    def walk(n: yaml.Node, loc: tuple[str, ...]) -> None:
        marks.setdefault(loc, (n.start_mark.line + 1, n.start_mark.column + 1))
        if isinstance(n, yaml.MappingNode):
            seen: set[str] = set()
            for k, v in n.value:
                key = str(k.value)
                if key in seen:
                    line, col = k.start_mark.line + 1, k.start_mark.column + 1
                    problems.append(Problem(file, line, col, ".".join((*loc, key)), "duplicate key"))
                seen.add(key)
                marks[(*loc, key)] = (k.start_mark.line + 1, k.start_mark.column + 1)
                marks[(*loc, key, "=")] = (v.start_mark.line + 1, v.start_mark.column + 1)
                walk(v, (*loc, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, (*loc, str(i)))

    if node is not None:
        walk(node, ())
    return data, marks, problems


def locate(
    marks: dict[tuple[str, ...], tuple[int, int]], loc: tuple[str, ...], key: bool = False
) -> tuple[int, int]:
    """Line and column of the value (or the key) at `loc`, else of its nearest written ancestor's key."""
    if not key and (*loc, "=") in marks:
        return marks[(*loc, "=")]
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return (1, 1)


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc` (for did-you-mean)."""
    import typing

    current: Any = GpuxConfig
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            args = [a for a in typing.get_args(current) if a is not type(None)]
            current = args[-1] if args else None
            if current is None:
                return None
            continue
        info = current.model_fields.get(part)
        if info is None:
            return None
        current = info.annotation
        while not (isinstance(current, type) and issubclass(current, BaseModel)):
            args = [a for a in typing.get_args(current) if a is not type(None)]
            if not args:
                break
            if typing.get_origin(current) is dict:
                break
            current = args[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _describe(err: Any) -> tuple[tuple[str, ...], str, bool]:
    loc = tuple(str(p) for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p in _TYPE_TAGS)))
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        names = list(model.model_fields) if model else []
        return loc, f"unknown field{did_you_mean(loc[-1], names)}", True
    if kind == "missing":
        return loc, "required field is missing", True
    if kind == "literal_error":
        got = err.get("input")
        expected = err.get("ctx", {}).get("expected", "")
        choices = re.findall(r"'([^']*)'", expected)
        hint = did_you_mean(got, choices) if isinstance(got, str) else ""
        return loc, f"{got!r} is not one of {expected}{hint}", False
    if kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    if kind == "string_pattern_mismatch" and loc == ("name",):
        msg = "use letters, digits, '.', '_' or '-', starting with a letter or digit"
    return loc, (msg[0].lower() + msg[1:]) if msg else msg, False


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before", "literal"}
