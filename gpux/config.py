"""Pydantic models of gpux.yml as written, `load_config(path)`, and errors located to file:line:col."""

from __future__ import annotations

import datetime
import difflib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gpux import options as opts
from gpux.errors import ConfigError, Problem

CONFIG_NAMES = ("gpux.yml", "gpux.yaml")
SCHEMA_VERSIONS = (1,)  # gpux.yml formats this gpux reads
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
# names other tools use for a dtype -> the gpux name (for did-you-mean only; they are not accepted)
DTYPE_ALIASES = {"float": "float32", "fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "double": "float64", "fp64": "float64", "int": "int64", "long": "int64", "str": "string"}
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
DIM_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Loc = tuple[str, ...]


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the closest choice (case-insensitive), or ''."""
    if not isinstance(word, str) or not choices:
        return ""
    lowered = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean '{lowered[close[0]]}'?)" if close else ""


def _fail(message: str, *at: str | int) -> PydanticCustomError:
    """A validation error whose location goes `at` deeper than the field (e.g. the bad item of a list)."""
    return PydanticCustomError("gpux", "{message}", {"message": message, "at": tuple(str(a) for a in at)})


def _provider_name(value: Any, index: int | None, allow_auto: bool = False) -> str:
    names = (*PROVIDERS, "auto") if allow_auto else PROVIDERS
    at = () if index is None else (index,)
    if value == "auto" and not allow_auto:
        raise _fail("'auto' stands alone (backend: auto); a list names providers to try in order", *at)
    if not isinstance(value, str) or value not in names:
        raise _fail(f"unknown provider {_got(value)}{did_you_mean(value, names)}; "
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
    raise _fail(f"expected 'auto', a provider name, or a non-empty list of provider names, got {_got(value)}")


def _providers(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise _fail(f"expected a non-empty list of provider names, got {_got(value)}")
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
    raise _fail(f"dim {i}: expected an int >= 1 or a name such as batch, got {_got(value)}", i)


def _shape(value: Any) -> tuple[int | str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(f"expected a list of ints or names, got {_got(value)}")
    return tuple(_dim(v, i) for i, v in enumerate(value))


def _range(value: Any) -> tuple[float, float]:
    pair = isinstance(value, list | tuple) and len(value) == 2
    if not pair or any(isinstance(v, bool) or not isinstance(v, int | float) for v in value):
        raise _fail(f"expected [low, high] (two numbers), got {_got(value)}")
    if not value[0] < value[1]:
        raise _fail(f"expected low < high, got {_got(value)}")
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
    range: Range | None = Field(
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
    marks: dict[Loc, tuple[int, int]] = field(default_factory=dict, repr=False)
    warnings: list[str] = field(default_factory=list)
    # where v1 fields that an earlier-format file was mapped to are written in that file (see legacy.py)
    aliases: dict[Loc, Loc] = field(default_factory=dict, repr=False)
    notes: list[Problem] = field(default_factory=list, repr=False)  # the warnings, located

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def source(self) -> Path:
        return (self.root / self.config.model.source).resolve()

    def problem(self, loc: tuple[str, ...], message: str, key: bool = False, as_written: bool = False) -> Problem:
        """A Problem at the v1 field `loc` (or at `loc` as the file writes it), named and located as written."""
        loc = tuple(str(p) for p in loc)
        loc = loc if as_written else relocate(loc, self.aliases)
        line, col = locate(self.marks, loc, key)
        return Problem(str(self.path), line, col, ".".join(loc), message)

    def warn(self, loc: tuple[str, ...], message: str, key: bool = True, as_written: bool = False) -> None:
        note = self.problem(loc, message, key, as_written)
        self.notes.append(note)
        self.warnings.append(str(note))


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


def load_config(path: str | Path, *, require_model: bool = True) -> Project:
    """Read, migrate and validate a gpux.yml; raise ConfigError listing every problem at once.

    With `require_model=False` (plain `gpux validate`) a missing model file is a warning, not an error:
    models are often generated or fetched after checkout, and the config can be checked without them.
    """
    from gpux import legacy

    file = find_config(path)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(str(file), 0, 0, "", f"cannot read: {exc}")]) from None
    data, marks, problems = parse_yaml(text, str(file))
    if problems and data is None:
        raise ConfigError(problems)
    if not isinstance(data, dict):
        line, col = marks.get((), (1, 1))
        msg = "no settings in this file; a gpux.yml needs at least name: and model: {source: ...}" \
            if data is None else f"expected a mapping of keys (name:, model:, ...), got {_got(data)}"
        raise ConfigError([Problem(str(file), line, col, "", msg)])
    moved = legacy.migrate(data)
    project = Project(path=file, config=None, marks=marks, aliases=moved.aliases)  # type: ignore[arg-type]
    for loc, msg in moved.notes:
        project.warn(loc, msg, as_written=True)
    problems += [project.problem(loc, msg, key=True, as_written=True) for loc, msg in moved.errors]
    config = None
    try:
        config = GpuxConfig.model_validate(moved.data)
    except ValidationError as exc:
        problems += describe_errors(project, exc.errors(), moved.data)
    problems += check_files(project, moved.data, require_model)
    if problems:
        raise ConfigError(sorted(dict.fromkeys(problems), key=lambda p: (p.line, p.col)))
    project.config = config  # type: ignore[assignment]
    project.notes.sort(key=lambda p: (p.line, p.col))
    project.warnings = [str(n) for n in project.notes]
    return project


def check_files(project: Project, data: dict[str, Any], require_model: bool = True) -> list[Problem]:
    """Files named by the config exist (cheap: nothing is parsed). Reads the raw mapping, so these are
    reported together with validation problems."""
    out: list[Problem] = []
    model = data.get("model")
    source = model.get("source") if isinstance(model, dict) else None
    if isinstance(source, str) and not (project.root / source).is_file():
        where = (project.root / source).resolve()
        msg = f"file not found: {source} (looked for {where}; paths are relative to gpux.yml)"
        if not source or where.is_dir():
            msg = f"expected a model file, got {'an empty path' if not source else 'a folder'}: {where}"
        if require_model or not source or where.is_dir():
            out.append(project.problem(("model", "source"), msg))
        else:
            project.warn(("model", "source"), f"{msg}; build, run and validate --check-model need it", key=False)
    for kind in ("inputs", "outputs"):
        specs = data.get(kind)
        for name, spec in (specs.items() if isinstance(specs, dict) else ()):
            labels = spec.get("labels") if isinstance(spec, dict) else None
            if isinstance(labels, str) and labels and not (project.root / labels).is_file():
                out.append(project.problem((kind, str(name), "labels"), f"labels file not found: {labels}"))
    verify = data.get("verify")
    sample = verify.get("data") if isinstance(verify, dict) else None
    if isinstance(sample, str) and sample and not (project.root / sample).is_file():
        out.append(project.problem(("verify", "data"), f"file not found: {sample}"))
    return out


def parse_yaml(text: str, file: str) -> tuple[Any, dict[Loc, tuple[int, int]], list[Problem]]:
    """Safe-load YAML and map each key path to (line, col) of its key, and `(*path, '=')` to its value.

    Duplicate keys are problems (the data keeps the last one, so validation still runs). A `version:`
    that YAML reads as a number or date keeps its source text (1.10 stays "1.10").
    """
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        return None, {}, [_yaml_problem(exc, file)]
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        return None, {}, [Problem(file, line, col, "", f"YAML: character U+{exc.character:04X} is not allowed "
                                                       "in a YAML file; remove it")]
    except yaml.YAMLError as exc:
        return None, {}, [Problem(file, 0, 0, "", f"YAML syntax: {' '.join(str(exc).split())}")]
    except RecursionError:
        return None, {}, [Problem(file, 0, 0, "", "YAML syntax: nested too deeply")]
    finally:
        if loader is not None:
            loader.dispose()
    marks: dict[Loc, tuple[int, int]] = {}
    raw: dict[Loc, str] = {}
    problems: list[Problem] = []
    seen: set[int] = set()

    def at(n: yaml.Node) -> tuple[int, int]:
        return n.start_mark.line + 1, n.start_mark.column + 1

    def walk(n: yaml.Node, loc: Loc) -> None:
        if id(n) in seen:  # an alias: located at its key; walked once, where its anchor is (no blow-up)
            return
        seen.add(id(n))
        marks.setdefault((*loc, "="), at(n))
        if isinstance(n, yaml.ScalarNode):
            raw[loc] = n.value
        elif isinstance(n, yaml.MappingNode):
            first: dict[str, tuple[int, int]] = {}
            for k, v in n.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"<{k.id}>"
                if key in first:
                    problems.append(Problem(file, *at(k), ".".join((*loc, key)),
                                            f"duplicate key (first at line {first[key][0]}); remove one"))
                first.setdefault(key, at(k))
                marks[(*loc, key)] = at(k)
                walk(v, (*loc, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                marks.setdefault((*loc, str(i)), at(v))
                walk(v, (*loc, str(i)))

    if node is not None:
        walk(node, ())
        marks[()] = at(node)
    if isinstance(data, dict):
        for mapping, loc in ((data, ("version",)), (data.get("model"), ("model", "version"))):
            value = mapping.get("version") if isinstance(mapping, dict) else None
            if isinstance(value, int | float | datetime.date) and not isinstance(value, bool):
                mapping["version"] = raw.get(loc, value)  # type: ignore[index]  # as written: 1.10 stays "1.10"
    return data, marks, problems


def _yaml_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    problem = str(exc.problem or "")
    tag = re.search(r"tag '([^']*)'", problem)
    if tag and "constructor" in problem:
        name = tag.group(1).replace("tag:yaml.org,2002:", "!!")
        return Problem(file, line, col, "", f"YAML: tag {name} is not allowed (gpux.yml is loaded safely: "
                                            "plain mappings, lists, strings and numbers only)")
    if "'\\t'" in problem:
        return Problem(file, line, col, "", "YAML syntax: tab character; indent with spaces")
    char = re.search(r"found character (.*) that cannot start any token", problem)
    if char:
        return Problem(file, line, col, "", f"YAML syntax: {char.group(1)} cannot start a plain value; quote the "
                                            "value")
    msg = _YAML_WORDS.get(problem, problem)
    for token, words in _YAML_TOKENS.items():
        msg = msg.replace(token, words)
    context = str(exc.context or "")
    if "single document" in context:
        return Problem(file, line, col, "", "YAML syntax: a second document ('---'); a gpux.yml holds one")
    if context.startswith("while ") and exc.context_mark:
        msg += f" ({context.removeprefix('while ')} started at line {exc.context_mark.line + 1})"
    elif context:
        msg = f"{context}: {msg}"
    if "mapping values are not allowed" in problem:
        msg += "; check the indentation, or quote a value that contains ': '"
    return Problem(file, line, col, "", f"YAML syntax: {msg}")


_YAML_WORDS = {
    "expected <block end>, but found '<block mapping start>'": "this key is indented unlike the keys above it",
    "expected <block end>, but found '-'": "a list item where a key was expected; check the indentation",
    "expected <block end>, but found '<scalar>'": "a value where a key was expected; check the indentation",
}
_YAML_TOKENS = {"'<stream end>'": "the end of the file", "<block end>": "the end of the block",
                "'<scalar>'": "a value", "'<block mapping start>'": "a key", "'<document start>'": "'---'"}


def relocate(loc: Loc, aliases: dict[Loc, Loc]) -> Loc:
    """The path a v1 field `loc` has in the file as written (earlier-format files move some fields)."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in aliases:
            return aliases[loc[:n]] + loc[n:]
    return loc


def locate(marks: dict[Loc, tuple[int, int]], loc: Loc, key: bool = False) -> tuple[int, int]:
    """Line and column of the value (or the key) at `loc`, else of its nearest written ancestor's key."""
    if not key and (*loc, "=") in marks:
        return marks[(*loc, "=")]
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return marks.get((), (1, 1))


def _unwrap(tp: Any) -> list[Any]:
    """The member types of an annotation, without Annotated, Optional and unions."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) if a is not type(None) for m in _unwrap(a)]
    return [tp]


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc` (for did-you-mean and descriptions)."""
    current: list[Any] = [GpuxConfig]
    for part in loc:
        nxt: list[Any] = []
        for tp in current:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                info = tp.model_fields.get(part)
                nxt += _unwrap(info.annotation) if info else []
            elif typing.get_origin(tp) is dict:
                nxt += _unwrap(typing.get_args(tp)[1])
            elif typing.get_origin(tp) in (list, tuple):
                nxt += _unwrap(typing.get_args(tp)[0])
        current = nxt
    models = [tp for tp in current if isinstance(tp, type) and issubclass(tp, BaseModel)]
    return models[0] if models else None


def _field_info(loc: Loc) -> Any:
    model = _model_at(loc[:-1]) if loc else None
    return model.model_fields.get(loc[-1]) if model else None


def _got(value: Any) -> str:
    """A value as a YAML user would recognise it, for 'got ...'."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        if len(value) > 8 or any(isinstance(v, dict | list | tuple) for v in value):
            return "a list"
        text = "[" + ", ".join(_got(v) for v in value) + "]"
        return text if len(text) <= 40 else "a list"
    return repr(value)


def _split_loc(raw: tuple[Any, ...], data: Any, kind: str) -> tuple[Loc, int | None, bool]:
    """Pydantic's loc → (path in the data, index where a union member's tag was dropped, is a dict-key error).

    A part is a real key when the data has it; other parts are pydantic's names for union members
    ('list[str]', 'constrained-int', "literal['auto']", '[key]'), except the field a 'missing' error names.
    """
    out: list[str] = []
    tag_at: int | None = None
    key_error = False
    cur = data
    for i, part in enumerate(raw):
        if isinstance(cur, dict) and (part in cur or str(part) in map(str, cur)):
            cur = cur[part] if part in cur else next(v for k, v in cur.items() if str(k) == str(part))
            out.append(str(part))
        elif isinstance(cur, list | tuple) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
            out.append(str(part))
        elif kind in ("missing", "extra_forbidden") and i == len(raw) - 1:
            out.append(str(part))
        else:
            key_error = key_error or part == "[key]"
            tag_at = len(out) if tag_at is None else tag_at
            cur = None if part == "[key]" else cur
    return tuple(out), (None if key_error else tag_at), key_error


_PATTERNS = {
    NAME_RE: "use letters, digits, '.', '_' or '-', starting with a letter or digit",
    opts.DIM_NAME: "expected a dimension name: letters, digits and '_', not starting with a digit",
    opts.LAYOUT: "expected layout letters N, C, D, H, W, T or ? (e.g. NCHW)",
    opts.OPENVINO_DEVICE: "expected an OpenVINO device: CPU, GPU, GPU.0, NPU, AUTO, or a priority list such as "
                          "AUTO:GPU,CPU (also HETERO:... and MULTI:...)",
}


def _sentence(text: str) -> str:
    """A description as the tail of a message: no final period, lower-case first letter unless an acronym."""
    text = text.rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


_ALTERNATIVES = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "string_type": "a string",
    "bool_parsing": "true or false", "bool_type": "true or false", "list_type": "a list", "tuple_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def _message(loc: Loc, err: dict[str, Any]) -> tuple[str, bool]:
    """One error as (message, point at the key rather than the value)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    got = _got(value)
    if kind == "gpux":
        return ctx["message"], False
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        names = list(model.model_fields) if model else []
        hint = did_you_mean(loc[-1], names)
        if model is Providers:
            return f"unknown provider{hint}; expected one of {', '.join(PROVIDERS)}", True
        listing = f"; expected one of {', '.join(names)}" if names and not hint and len(names) <= 12 else ""
        return f"unknown field{hint}{listing}", True
    if kind == "missing":
        info = _field_info(loc)
        about = f": {_sentence(info.description)}" if info and info.description else ""
        return f"required field is missing{about}", True
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        choices = re.findall(r"'([^']*)'", expected) or [expected]
        if loc == ("schema_version",):
            known = ", ".join(map(str, SCHEMA_VERSIONS))
            if str(value) in map(str, SCHEMA_VERSIONS):
                return f"write schema_version: {value} (a number, not a string)", False
            return f"this gpux reads schema_version {known}, got {got}; a newer gpux may read this file", False
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        if not hint and isinstance(value, str) and value.lower() in DTYPE_ALIASES and "float32" in choices:
            hint = f" (did you mean '{DTYPE_ALIASES[value.lower()]}'?)"
        return f"unknown {loc[-1] if loc else 'value'} {got}{hint}; expected one of {', '.join(choices)}", False
    if kind in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, "), False
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        info = _field_info(loc)
        if pattern in _PATTERNS:
            return f"{_PATTERNS[pattern]}, got {got}", False
        what = _sentence(info.description) if info and info.description else f"a match of {pattern}"
        return f"{got} is not valid ({what})", False
    if kind in _BOUNDS:
        op, name = _BOUNDS[kind]
        return f"must be {op} {ctx.get(name)}, got {got}", False
    if kind in ("byte_size", "byte_size_unit"):
        return f"expected a size such as 4GB, 512MiB or a number of bytes, got {got}", False
    if kind == "invalid_key":
        return f"expected a field name, got {got}", True
    if kind == "string_too_short":
        return "must not be empty", False
    if kind == "int_from_float":
        return f"expected a whole number, got {got}", False
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        examples: dict[Loc, str] = {("model",): " such as {source: model.onnx}",
                                    ("inputs",): " of name -> {dtype, shape}",
                                    ("outputs",): " of name -> {dtype, shape}"}
        example = examples.get(loc, "")
        if len(loc) == 2 and loc[0] in ("inputs", "outputs"):
            example = " such as {dtype: float32, shape: [batch, 3]}"
        return f"expected a mapping{example}, got {got}", False
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"expected a string, got {got}; quote it: '{value}'", False
    if kind in _ALTERNATIVES:
        return f"expected {_ALTERNATIVES[kind]}, got {got}", False
    msg = err["msg"]
    return f"{msg[0].lower()}{msg[1:]}, got {got}", False


def _refine(loc: Loc, err: dict[str, Any], data: Any) -> Loc:
    """Point a model-level error at what it is about: the bad list item, or the first option it names."""
    if err["type"] == "gpux":
        return (*loc, *err["ctx"].get("at", ()))
    model = _model_at(loc)
    if err["type"] == "value_error" and model:
        for word in re.findall(r"[a-z][a-z_0-9]*", err["msg"].removeprefix("Value error, ")):
            if word in model.model_fields and len(_written((*loc, word), data)) > len(loc):
                return (*loc, word)
    return loc


def _written(loc: Loc, data: Any) -> Loc:
    """The longest prefix of `loc` that the data has (a refined location may name a field left out)."""
    cur, out = data, []
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            break
        out.append(part)
    return tuple(out)


def describe_errors(project: Project, errors: list[Any], data: Any) -> list[Problem]:
    """Pydantic errors → one Problem per mistake, located at the key or value written in the file."""
    found: list[tuple[Loc, str, bool, dict[str, Any]]] = []
    unions: dict[Loc, list[tuple[Loc, dict[str, Any]]]] = {}
    for err in errors:
        loc, tag_at, key_error = _split_loc(err["loc"], data, err["type"])
        if tag_at is not None:
            unions.setdefault(loc[:tag_at], []).append((loc, err))
            continue
        msg, key = _message(loc, err)
        found.append((loc, msg, key or key_error, err))  # a bad mapping key: point at the key
    for prefix, members in unions.items():
        deeper = [(loc, err) for loc, err in members if len(loc) > len(prefix)]
        if deeper:  # the value had one member's type; report that member's own errors
            found += [(loc, *_message(loc, err), err) for loc, err in deeper]
            continue
        wanted: list[str] = []
        for _, err in members:
            kind, ctx = err["type"], err.get("ctx") or {}
            if kind == "literal_error":
                wanted.append(ctx.get("expected", "").replace(" or ", ", "))
            elif kind in _BOUNDS:
                wanted.append(f"a value {_BOUNDS[kind][0]} {ctx.get(_BOUNDS[kind][1])}")
            else:
                wanted.append(_ALTERNATIVES.get(kind, err["msg"].lower()))
        found.append((prefix, f"expected {' or '.join(dict.fromkeys(wanted))}, got {_got(members[0][1].get('input'))}",
                      False, members[0][1]))
    # 'naem: unknown field (did you mean name?)' already says that name is missing
    suggested = {(*loc[:-1], m.group(1)) for loc, msg, _, err in found if err["type"] == "extra_forbidden"
                 for m in [re.search(r"did you mean '([^']*)'", msg)] if m}
    out = []
    for loc, msg, key, err in found:
        if err["type"] == "missing" and loc in suggested:
            continue
        shown = where = loc
        if err["type"] in ("gpux", "value_error"):
            refined = _written(_refine(loc, err, data), data)
            where = refined if len(refined) > len(loc) else loc
            shown = where if err["type"] == "gpux" else loc
        problem = project.problem(shown, msg, key)
        if where != shown:  # a block's rule, at the option it names
            line, col = locate(project.marks, relocate(where, project.aliases), key=True)
            problem = Problem(problem.file, line, col, problem.field, problem.message)
        out.append(problem)
    return out
