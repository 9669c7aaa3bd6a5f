"""Reads an ONNX model's real inputs/outputs and checks the declared ones in gpux.yml against them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpux.errors import ConfigError, Problem
from gpux.formats import ONNX_DTYPES, TORCH_FORMATS, source_format
from gpux.model.tensor import Dim, ModelIO, Tensor, shape_text
from gpux.optional import require

NONTENSOR = "onnx-type-nontensor"  # a sequence, map or optional, as the wire reader (gpux.model.wire) reads it

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.config.schema import TensorSpec
    from gpux.model.compat import Compat


def _tensor(value_info: Any) -> Tensor:
    t = value_info.type.tensor_type
    dtype = ONNX_DTYPES.get(t.elem_type, f"onnx-type-{t.elem_type}")
    if not t.HasField("shape"):
        return Tensor(value_info.name, dtype, None)
    dims: list[Dim] = []
    for d in t.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:  # 0 is a static size too; -1 (exporters) is dynamic
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return Tensor(value_info.name, dtype, tuple(dims))


def read_io(path: Path, memo: Path | None = None, check: bool = True) -> ModelIO:
    """The model's interface; memoised in `memo` by the file's stamp (`gpux.files.stamp`) so unchanged models aren't
    parsed.
    `check=False` skips the model checks (gpux's own intermediate files)."""
    if memo is None or not path.is_file():
        return _parse_io(path, check)
    from gpux.files import memoised

    [cached] = memoised([path], memo, lambda p: _entry(p, _parse_io(p)), _still_true)
    return ModelIO.from_dict({k: v for k, v in cached.items() if k != "beside"})


def keep_io(path: Path, memo: Path, io: ModelIO, then: tuple[int, ...]) -> None:
    """Remember `io` in `memo` as what `path` holds, if the file is still the one that was read (`then`: its stamp
    then): a model replaced meanwhile is read again next time, not trusted."""
    from gpux.files import memoised, stamp

    if tuple(stamp(path.stat())) != then:
        return
    entry = _entry(path, io)
    memoised([path], memo, lambda _p: entry, _still_true)


def _entry(path: Path, io: ModelIO) -> dict[str, Any]:
    """A memo entry: the model's I/O, and the stamps of the external data files it was read with."""
    return {**io.to_dict(), "beside": _stamps(path, list(io.external_data))}


def _still_true(path: Path, got: Any) -> bool:  # a memo written before class names were read is read again
    return isinstance(got, dict) and "exchanged" in got and \
        got.get("beside") == _stamps(path, got.get("external_data") or [])


def _stamps(path: Path, names: list[str]) -> list[list[int] | None]:
    """The stamps of the external data files beside `path` (None: missing): a memoised reading depends on them
    too, so one made while a file was missing or truncated is not trusted once that file changes."""
    from gpux.files import stamp

    out: list[list[int] | None] = []
    for name in names:
        try:
            st = (path.parent / name).stat()
        except OSError:
            out.append(None)
            continue
        out.append(stamp(st))
    return out


def _parse_io(path: Path, check: bool = True) -> ModelIO:
    from gpux.model.compat import all_tensors

    onnx = require("onnx")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError and friends
        raise ConfigError([Problem(str(path), 0, 0, "", f"not a readable ONNX model: {exc}")]) from exc
    init = {i.name for i in model.graph.initializer}
    external = sorted(
        {
            e.value
            for t in all_tensors(model.graph)
            if t.data_location == 1
            for e in t.external_data
            if e.key == "location"
        }
    )
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    from gpux.model import classic
    from gpux.model.compat import structural_problems, type_problems

    classes = classic.read(model)

    def code(v: Any) -> int:  # -1: not a tensor (sequence, map, optional); a ZipMap's is its float probabilities
        return int(v.type.tensor_type.elem_type) if v.type.HasField("tensor_type") else \
            1 if v.name in classes.exchanged else -1

    def output(v: Any) -> Tensor:
        return Tensor(v.name, "float32", classes.shapes[v.name]) if v.name in classes.exchanged else _tensor(v)

    edges = [("input", v.name, code(v)) for v in model.graph.input if v.name not in init]
    edges += [("output", v.name, code(v)) for v in model.graph.output]
    problems = structural_problems(model, path, tuple(external)) if check else []
    problems += type_problems(edges, classes.zipmaps > 0) if check and not problems else []
    return ModelIO(
        inputs=tuple(_tensor(v) for v in model.graph.input if v.name not in init),
        outputs=tuple(output(v) for v in model.graph.output),
        opset=opset,
        ir_version=model.ir_version,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        external_data=tuple(external),
        opsets={("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in model.opset_import},
        problems=tuple(problems),
        labels=classes.labels,
        exchanged=classes.exchanged,
    )


def check_declared(project: Project, io: ModelIO) -> list[Problem]:
    """Every declared input/output must exist in the model with the same dtype, rank and static dims."""
    problems = []
    for kind, declared, actual in (
        ("inputs", project.config.inputs, io.inputs),
        ("outputs", project.config.outputs, io.outputs),
    ):
        if declared is None:
            continue
        real = {t.name: t for t in actual}
        suggested: set[str] = set()
        for name, spec in declared.items():
            if name not in real:
                from gpux.config.problems import did_you_mean

                hint = did_you_mean(name, list(real))
                suggested.update(n for n in real if f"'{n}'" in hint)
                msg = f"the model has no {kind[:-1]} {name!r}{hint}"
                problems.append(project.problem((kind, name), f"{msg}; it has {', '.join(real)}", key=True))
                continue
            problems += _compare(project, (kind, name), spec, real[name])
        if kind == "inputs":
            missing = [n for n in real if n not in declared and n not in suggested]
            if missing:
                problems.append(project.problem((kind,), f"model inputs not declared: {', '.join(missing)}",
                                                key=True))
    return sorted(problems, key=lambda p: (p.line, p.col))


def _compare(project: Project, loc: tuple[str, ...], spec: TensorSpec, real: Tensor) -> list[Problem]:
    out = []
    if spec.dtype != real.dtype and real.dtype != NONTENSOR:  # the wire reader cannot tell what a ZipMap becomes
        out.append(project.problem((*loc, "dtype"), f"declared {spec.dtype} but the model has {real.dtype}"))
    if spec.shape is None or real.shape is None:
        return out
    if len(spec.shape) != len(real.shape):
        msg = f"declared rank {len(spec.shape)} but the model has rank {len(real.shape)} {shape_text(real.shape)}"
        return [*out, project.problem((*loc, "shape"), msg)]
    for i, (d, r) in enumerate(zip(spec.shape, real.shape, strict=True)):
        if isinstance(r, int) and d != r:
            msg = f"dim {i} is {d!r} but the model fixes it to {r} {shape_text(real.shape)}"
            out.append(project.problem((*loc, "shape", str(i)), msg))
    return out


def effective_io(project: Project, io: ModelIO) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The interface gpux uses: declared names/shapes where given (they name dynamic dims), else the model's."""

    def merge(declared: Mapping[str, TensorSpec] | None, actual: tuple[Tensor, ...]) -> dict[str, Tensor]:
        out = {}
        for t in actual:
            spec = (declared or {}).get(t.name)
            shape = t.shape
            if spec is not None and spec.shape is not None:
                shape = tuple(spec.shape)
            out[t.name] = Tensor(t.name, t.dtype, shape)
        return out

    return merge(project.config.inputs, io.inputs), merge(project.config.outputs, io.outputs)


# file suffix -> source format (model.format states it where the suffix is ambiguous)
def declared_io(project: Project) -> ModelIO:
    """The interface of a source gpux cannot read without running it (PyTorch): the declared one."""
    cfg = project.config
    if not cfg.inputs or any(s.shape is None for s in cfg.inputs.values()):
        raise ConfigError([project.problem(("inputs",), "a PyTorch source needs every input declared with "
                                           "dtype and shape (ints or dim names) to be exported", key=True)])
    def tensors(specs: Mapping[str, TensorSpec] | None) -> tuple[Tensor, ...]:
        return tuple(Tensor(n, s.dtype, tuple(s.shape) if s.shape else None) for n, s in (specs or {}).items())

    return ModelIO(inputs=tensors(cfg.inputs), outputs=tensors(cfg.outputs), producer=source_format(project))


def compat_check(io: ModelIO, store: Path | None = None) -> Compat:
    """The model's IR version and opsets against the installed ONNX Runtime (gpux.model.compat.Compat); what that
    runtime reads is kept in the store (`store`: its root), so opening a checked model does not probe again."""
    from gpux.model.compat import Compat, check

    return check(io.ir_version, io.opsets, store / ".ort-limits.json" if store else None) if io.ir_version \
        else Compat()


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A project's model, checked: its interface (matching the declared one), the interface gpux uses
    (`effective_io`: declared names and shapes where given, derived once here), and how its versions meet the
    installed ONNX Runtime (`gpux.model.compat.Compat`: an IR version to lower to, with its note)."""

    io: ModelIO
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    compat: Compat
    stamp: tuple[int, ...] = ()  # the model file's stamp (gpux.files.stamp) when it was read
    beside: tuple[list[int] | None, ...] = ()  # its external data files' stamps then (None: missing)
    files: tuple[Path, ...] = ()  # the files the model is made of: the source and its external data
    read: ModelIO | None = None  # the interface as the file states it, where outputs it misstates were replaced
    notes: tuple[Problem, ...] = ()  # warnings at their gpux.yml line: outputs the metadata misstates


def check_model(project: Project, store_dir: str | Path | None = None) -> Checked:
    """The model read and checked once per project per process (kept on `project.derived`, read again only when
    the model file, its external data files or the declared I/O change); raises ConfigError listing every
    problem."""
    if not project.source.is_file():
        raise ConfigError([project.problem(("model", "source"), f"file not found: {project.source}")])
    from gpux.files import stamp

    now = tuple(stamp(project.source.stat()))
    cfg = project.config
    key = (project.source, now, cfg.model, cfg.inputs, cfg.outputs)
    checked = project.derived.get("model", key, lambda: _checked(project, store_dir, now),
                                  lambda kept: kept.beside == _beside(project.source, kept.io))
    project.derived.labels = dict(checked.io.labels)  # what Project.labels_of answers where gpux.yml names none
    return checked


def _beside(path: Path, io: ModelIO) -> tuple[list[int] | None, ...]:
    return tuple(_stamps(path, list(io.external_data)))


def _checked(project: Project, store_dir: str | Path | None, stamp: tuple[int, ...]) -> Checked:
    from gpux.files import store_root
    from gpux.model.compat import Compat

    if source_format(project) in TORCH_FORMATS:
        return _kept(project, declared_io(project), Compat(), stamp)
    store = store_root(project.root, store_dir)
    io = read_io(project.source, store / ".model-io.json")
    compat = compat_check(io, store)
    model_problems = [*io.problems, *compat.problems]
    if model_problems:
        named = "" if project.implied else f"{project.source.name}: "  # else the problem names the model
        raise ConfigError([project.problem(("model", "source"), named + m) for m in model_problems])
    problems = check_declared(project, io)
    read, (io, problems, notes) = io, _against_real(project, io, problems, store)
    missing = [f for f in io.external_data if not (project.source.parent / f).is_file()]
    if missing:
        problems.insert(0, project.problem(("model", "source"), f"external data file not found beside the model: "
                                           f"{', '.join(missing)}"))
    if problems:
        raise ConfigError(problems)
    return replace(_kept(project, io, compat, stamp), read=read, notes=notes)


def _against_real(project: Project, io: ModelIO, problems: list[Problem], store: Path
                  ) -> tuple[ModelIO, list[Problem], tuple[Problem, ...]]:
    """The interface as the model really returns it, where that matters (gpux.model.fit): outputs its metadata
    misstates take their real shapes (a warning each: the notes), and declared steps that cannot fit them are
    problems."""
    from gpux.model import fit

    if not fit.wants_real(project, problems, io):
        return io, problems, ()
    from gpux.model.probe import real_io

    real = real_io(project.source, io.inputs, store / ".model-real.json", sample_inputs(project, io))
    if real is None:
        return io, problems, ()
    io_real, changed = fit.trued(io, real)
    said: tuple[Problem, ...] = ()
    if changed:
        problems = check_declared(project, io_real)
        said = tuple(fit.notes(project, io, changed, real))
    return io_real, [*problems, *fit.step_problems(project, real)], said


def sample_inputs(project: Project, io: ModelIO) -> dict[str, Tensor]:
    """The model's inputs with the sizes the project feeds them where it fixes one: a declared int, the height and
    width its image steps fix (gpux.model.probe.sample: each still dynamic in the model is varied around it)."""
    inputs = {t.name: t for t in io.inputs}
    for name, spec in (project.config.inputs or {}).items():
        t = inputs.get(name)
        if t is None or t.shape is None:
            continue
        dims = [s if isinstance(s, int) else d for d, s in zip(t.shape, spec.shape or t.shape, strict=False)]
        image = spec.preprocess.image if spec.preprocess else None
        if image is not None and len(dims) == 4:
            for i, fixed in zip((2, 3) if image.layout == "nchw" else (1, 2), image.fixed, strict=True):
                dims[i] = fixed if fixed is not None else dims[i]
        inputs[name] = Tensor(t.name, t.dtype, tuple(dims))
    return inputs


def _kept(project: Project, io: ModelIO, compat: Compat, stamp: tuple[int, ...]) -> Checked:
    inputs, outputs = effective_io(project, io)
    return Checked(io=io, inputs=inputs, outputs=outputs, compat=compat, stamp=stamp,
                   beside=_beside(project.source, io), files=tuple(source_files(project, io)))


def load_checked(project: Project, store_dir: str | Path | None = None) -> ModelIO:
    """The model's interface, after checking the declared inputs/outputs against it (once: `check_model`)."""
    return check_model(project, store_dir).io


def interface(project: Project, store_dir: str | Path | None = None) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The inputs and outputs gpux uses for the project's model (`effective_io`, derived once: `check_model`)."""
    checked = check_model(project, store_dir)
    return checked.inputs, checked.outputs


def source_files(project: Project, io: ModelIO) -> list[Path]:
    """The files the model is made of: the source and its external data."""
    src = project.source
    return [src, *[(src.parent / f).resolve() for f in io.external_data]]
