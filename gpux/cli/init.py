"""`gpux init [MODEL]`: a commented gpux.yml for a model file (ONNX, TorchScript or a torch.export program), its
inputs and outputs read from the model, the providers that run here listed; the result validates."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.errors import UsageError
from gpux.formats import SUFFIX_FORMATS, TORCH_FORMATS
from gpux.model.io import Tensor

SCHEMA_AT = ".gpux/gpux.schema.json"  # the store folder: git-ignored, rewritten by `gpux schema -o` on any machine
TORCH_DTYPES = {"Float": "float32", "Half": "float16", "BFloat16": "bfloat16", "Double": "float64",
                "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool"}


def init_command(model: str | None, folder: str, force: bool, as_json: bool, declared: tuple[str, ...] = (),
                 shapes: tuple[str, ...] = ()) -> int:
    from gpux import report
    from gpux.cli.validate import schema_text
    from gpux.files import atomic_write_text
    from gpux.model.inputs import parse_shapes

    src = find_model(Path(model) if model else None, Path(folder))
    target = src.parent / "gpux.yml"
    if target.exists() and not force:
        raise UsageError(f"{target}: exists; gpux init does not overwrite it", hint="pass --force to replace it")
    sizes = parse_shapes(shapes)
    given = dict(sizes)
    inputs, outputs, fmt = read_model(src, [parse_input(d) for d in declared], sizes)
    if sizes != given:
        report.info(f"note: {src.name} does not run with its symbolic dims at 64 or 1; it runs at "
                    f"{', '.join(f'{d}={n}' for d, n in sizes.items() if d not in given)}, written under shapes: "
                    "(--shape NAME=SIZE chooses)")
    symbolic = sorted({d for t in inputs + outputs for d in (t.shape or ()) if isinstance(d, str)} - {"batch"} -
                      set(sizes))
    providers = available_providers()
    text = render(src, inputs, outputs, fmt, symbolic, providers, sizes)
    atomic_write_text(target, text)
    schema = src.parent / SCHEMA_AT
    schema.parent.mkdir(exist_ok=True)
    atomic_write_text(schema, schema_text())
    _check(target)
    if as_json:
        report.emit_json({"path": str(target), "model": src.name, "format": fmt,
                          "inputs": [t.to_dict() for t in inputs], "outputs": [t.to_dict() for t in outputs],
                          "shapes": sizes, "fill_in": symbolic, "providers": providers})
    else:
        fill = f"; fill in the sizes of {', '.join(symbolic)} under benchmark.shapes" if symbolic else ""
        report.info(f"wrote {target} ({len(inputs)} input(s), {len(outputs)} output(s){fill})")
    return 0


def find_model(model: Path | None, folder: Path) -> Path:
    """The model file named, else the one model file in `folder` (by suffix)."""
    if model is not None:
        if not model.is_file():
            raise UsageError(f"{model}: file not found")
        return model.absolute()  # a link stays the path named: gpux.yml goes beside it, the model is read through it
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a folder")
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in SUFFIX_FORMATS)
    if len(found) != 1:
        what = f"several model files ({', '.join(p.name for p in found)})" if found else \
            f"no model file ({', '.join(SUFFIX_FORMATS)})"
        raise UsageError(f"{folder}: {what}", hint="pass the model's path: gpux init path/to/model.onnx")
    return found[0].absolute()


def parse_input(text: str) -> Tensor:
    """`NAME=DTYPE[d0,d1,...]` (dims are sizes or names), e.g. image=float32[batch,3,32,32]."""
    from gpux.formats import ONNX_DTYPES

    m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\w+)\s*\[([^\]]*)\]\s*", text)
    if m is None or m.group(2) not in ONNX_DTYPES.values():
        raise UsageError(f"--input {text!r}: expected NAME=DTYPE[DIMS], e.g. image=float32[batch,3,224,224] "
                         f"(dtypes: {', '.join(sorted(set(ONNX_DTYPES.values()) - {'string'}))})")
    dims = [d.strip() for d in m.group(3).split(",") if d.strip()]
    return Tensor(m.group(1), m.group(2), tuple(int(d) if d.isdigit() else d for d in dims))


def read_model(src: Path, declared: list[Tensor] | None = None, sizes: dict[str, int] | None = None
               ) -> tuple[list[Tensor], list[Tensor], str]:
    """(inputs, outputs, format): ONNX by its graph and what it returns at `sizes` of its symbolic dims (--shape;
    `onnx_io`), a torch.export program by its signature, a TorchScript module by the inputs declared with --input
    (it records none once saved), its outputs by running it."""
    fmt = SUFFIX_FORMATS.get(src.suffix.lower(), "onnx")
    if fmt not in TORCH_FORMATS:
        return (*onnx_io(src, sizes if sizes is not None else {}), fmt)
    from gpux.optional import require

    torch = require("torch")
    try:
        if _is_export(src):
            return (*_export_io(torch, src), "torch_export")
        return (*_script_io(torch, src, declared or []), "torchscript")
    except UsageError:
        raise
    except Exception as exc:  # torch raises RuntimeError and friends for files it cannot read
        raise UsageError(f"{src}: not a readable PyTorch model: {str(exc).splitlines()[0]}") from exc


def onnx_io(src: Path, sizes: dict[str, int]) -> tuple[list[Tensor], list[Tensor]]:
    """An ONNX model's inputs and outputs, its outputs as it returns them (gpux.model.fit.trued): run at `sizes`
    (--shape, checked), else at the probe's; a model that runs at neither is run at INIT_SIZES (`fit_sizes`), and
    the size it runs at is added to `sizes` (written under shapes:) unless it is 1."""
    from gpux.model.fit import trued
    from gpux.model.io import read_io
    from gpux.model.probe import real_io

    io = read_io(src)
    if io.problems:  # the model itself (docs/exit-codes.md: 3), as build and run say it
        from gpux.errors import ModelError

        raise ModelError(f"{src}: {io.problems[0]}")
    named = [_named(t) for t in io.inputs]
    fit_sizes(src, named, sizes, check_only=True)
    real = real_io(src, io.inputs, None, {t.name: _sized(t, sizes) for t in named}) if sizes else \
        real_io(src, io.inputs, None)
    if real is None:  # not at the sizes given, or the probe's: why, or the sizes it runs at
        found = fit_sizes(src, named, sizes or None)
        sizes.update({d: n for d, n in found.items() if n != 1})
        real = real_io(src, io.inputs, None, {t.name: _sized(t, found) for t in named}) if found else None
    io = trued(io, real)[0] if real is not None else io  # what it returns, where its metadata misstates an output
    outputs: list[Tensor] = [Labelled(n.name, n.dtype, n.shape, labels=tuple(io.labels.get(n.name, ())))
               for n in map(_named, io.outputs)]  # with an ONNX-ML classifier's class names (gpux.model.classic)
    return [_named(t) for t in io.inputs], outputs


# sizes `gpux init` runs a model's symbolic dims at where it does not run at the probe's (64): 1, then a larger
# default (images: a fully convolutional net whose strides need more than 64); the first it runs at is kept, and
# written under shapes: unless it is 1 (what generated verification inputs use first anyway)
INIT_SIZES = (1, 256)


def symbolic_dims(inputs: list[Tensor]) -> list[str]:
    """The inputs' symbolic dims after the first axis (the batch), in order: the sizes --shape gives."""
    return list(dict.fromkeys(d for t in inputs for d in (t.shape or ())[1:] if isinstance(d, str)))


def _sized(t: Tensor, sizes: dict[str, int]) -> Tensor:
    return t if t.shape is None else Tensor(t.name, t.dtype, tuple(sizes.get(d, d) if isinstance(d, str) else d
                                                                    for d in t.shape))


def fit_sizes(src: Path, inputs: list[Tensor], given: dict[str, int] | None = None,
              check_only: bool = False) -> dict[str, int]:
    """Sizes of the inputs' symbolic dims the model runs at on ONNX Runtime's CPU (`given`: --shape, else each of
    INIT_SIZES in turn); {} where it cannot be told (no symbolic dim, an input without a shape or of strings, a model
    ONNX Runtime cannot load: the metadata is read as it is). A model that runs at none of them is a UsageError
    naming the dims and --shape; so is a --shape of a dim the inputs do not have (`check_only`: that alone)."""
    dims = symbolic_dims(inputs)
    unknown = sorted(set(given or ()) - set(dims))
    if unknown:
        raise UsageError(f"--shape {unknown[0]}=...: {src.name} has no symbolic input dim {unknown[0]!r} "
                         f"(its dims: {', '.join(dims) or 'none'})")
    if check_only or not dims or any(t.shape is None or t.dtype == "string" for t in inputs):
        return {}
    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(str(src), options, providers=["CPUExecutionProvider"])
    except Exception:  # ONNX Runtime's errors share no base class: a model it cannot load keeps its metadata
        return {}
    from gpux.model.probe import sample

    error = ""
    trials: list[dict[str, int]] = [given] if given is not None else [dict.fromkeys(dims, n) for n in INIT_SIZES]
    for sizes in trials:
        try:
            session.run(None, sample(tuple(_sized(t, sizes) for t in inputs), {}, 1, 0))
        except Exception as exc:  # ONNX Runtime's own errors (no common base class): the model refuses these sizes
            error = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            continue
        return sizes
    tried = ", ".join(f"{d}={n}" for d, n in given.items()) if given is not None else \
        f"{', '.join(dims)} at 1, 64 or {INIT_SIZES[-1]}"
    raise UsageError(f"{src.name} does not run on ONNX Runtime with {tried} ({error})",
                     hint=f"give the sizes it runs at: gpux init {src.name} " +
                     " ".join(f"--shape {d}=SIZE" for d in dims))


def _is_export(src: Path) -> bool:
    import zipfile

    if src.suffix.lower() == ".pt2":
        return True
    with zipfile.ZipFile(src) as z:
        return any("serialized_exported_program" in n for n in z.namelist())


def _named(t: Tensor) -> Tensor:
    """Dynamic dims without a usable name (none, or an expression such as `height/2 + 1`) get one: batch first,
    else the tensor's name and the axis; gpux.yml names every dynamic dim."""
    from gpux.providers.options import DIM_NAME

    def name(d: int | str | None, i: int) -> int | str:
        if isinstance(d, int) or (isinstance(d, str) and re.fullmatch(DIM_NAME, d)):
            return d
        return "batch" if i == 0 and "batch" not in (t.shape or ()) else re.sub(r"\W", "_", f"{t.name}_{i}")

    return t if t.shape is None else Tensor(t.name, t.dtype, tuple(name(d, i) for i, d in enumerate(t.shape)))


def _fake(name: str, value: Any, first_dynamic: set[str]) -> Tensor:
    dims: list[int | str] = []
    for i, d in enumerate(value.shape):
        if isinstance(d, int):
            dims.append(d)
            continue
        symbol = re.sub(r"\W", "_", str(d))
        dims.append("batch" if i == 0 and (not first_dynamic or symbol in first_dynamic) else symbol)
        if i == 0:
            first_dynamic.add(symbol)
    return Tensor(name, str(value.dtype).removeprefix("torch."), tuple(dims))


def _export_io(torch: Any, src: Path) -> tuple[list[Tensor], list[Tensor]]:
    ep = torch.export.load(str(src))
    sig = ep.graph_signature
    user = set(sig.user_inputs)
    nodes = {n.name: n for n in ep.graph.nodes}
    firsts: set[str] = set()
    inputs = [_fake(n, nodes[n].meta["val"], firsts) for n in sig.user_inputs if n in user]
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    values = out_node.args[0] if isinstance(out_node.args[0], list | tuple) else [out_node.args[0]]
    names = ["output"] if len(values) == 1 else [f"output{i}" for i in range(len(values))]
    outputs = [_fake(name, v.meta["val"], firsts) for name, v in zip(names, values, strict=True)]
    return inputs, outputs


def _script_io(torch: Any, src: Path, declared: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """A saved TorchScript module keeps no input shapes: the declared inputs, and the outputs it returns on zeros
    with each dim name at 1 and at 2 (a dim that follows them is named after the input's)."""
    module = torch.jit.load(str(src), map_location="cpu").eval()
    names = [v.debugName().split(".")[0] for v in list(module.graph.inputs())[1:]]
    if not declared:
        raise UsageError(f"{src}: a saved TorchScript module records no input dtypes and shapes",
                         hint=f"declare them: gpux init {src.name} " + " ".join(
                             f"--input {n}=float32[batch,...]" for n in names) + " (or export with torch.export)")
    if [t.name for t in declared] != names:
        raise UsageError(f"{src}: the module takes {', '.join(names) or 'no inputs'}; --input gave "
                         f"{', '.join(t.name for t in declared)}", hint="one --input per input, in this order")

    def outputs_at(size: int) -> list[Any]:
        feeds = [torch.zeros([size if isinstance(d, str) else d for d in t.shape or ()],
                             dtype=getattr(torch, t.dtype)) for t in declared]
        with torch.no_grad():
            out = module(*feeds)
        return list(out) if isinstance(out, list | tuple) else [out]

    try:
        one, two = outputs_at(1), outputs_at(2)
    except Exception as exc:  # the module's own error for inputs it does not take
        raise UsageError(f"{src}: the module fails on zeros of the declared inputs: "
                         f"{str(exc).strip().splitlines()[-1]}", hint="check --input's dtypes and shapes") from exc
    symbol = next((d for t in declared for d in (t.shape or ()) if isinstance(d, str)), "batch")
    outs = []
    for i, (a, b) in enumerate(zip(one, two, strict=True)):
        shape = tuple(symbol if x != y else int(x) for x, y in zip(a.shape, b.shape, strict=True))
        outs.append(Tensor("output" if len(one) == 1 else f"output{i}", str(a.dtype).removeprefix("torch."), shape))
    return declared, outs


def available_providers() -> list[str]:
    """The built-in providers whose runtime and device are here, in gpux's order."""
    from gpux.providers import probe, registry

    return [name for name in registry() if probe(name).ok]


def _yaml_name(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", text) else json.dumps(text)


@dataclass(frozen=True)
class Labelled(Tensor):
    """An output with the class names the model carries for its last axis (written as its `labels:`)."""

    labels: tuple[str, ...] = ()

    def to_dict(self) -> Any:  # init's --json: the tensor, and its labels where the model names them
        return {**super().to_dict(), "labels": list(self.labels)} if self.labels else super().to_dict()


def _tensor_line(t: Tensor) -> str:
    shape = "" if t.shape is None else f", shape: [{', '.join(str(d) for d in t.shape)}]"
    names = getattr(t, "labels", ())
    labels = f", labels: {json.dumps(list(names), ensure_ascii=False)}" if names else ""
    return f"  {_yaml_name(t.name)}: {{dtype: {t.dtype}{shape}{labels}}}"


def _proposed(t: Tensor, inputs: list[Tensor], outputs: list[Tensor]) -> list[str]:
    """A comment per kind of answer the output's shape matches (gpux.config.kinds), saying which and why."""
    from gpux.config.kinds import proposals

    return [f"  #   {p} (docs/answers.md)" for p in proposals(t.shape, inputs, outputs)] if t.shape is not None \
        else []


def _note(line: str, comment: str) -> str:
    return f"{line:<38}# {comment}"


def render(src: Path, inputs: list[Tensor], outputs: list[Tensor], fmt: str, symbolic: list[str],
           providers: list[str], sizes: dict[str, int] | None = None) -> str:
    from gpux.providers import registry

    rows = registry()
    name = re.sub(r"[^a-z0-9-]+", "-", src.parent.name.lower()).strip("-") or "model"
    name = name if name[0].isalpha() else f"model-{name}"
    lines = [
        f"# yaml-language-server: $schema={SCHEMA_AT}",
        "# Written by `gpux init` from the model; every field: docs/config.md. Check it with `gpux validate`.",
        _note(f"name: {name}", f"`gpux run {name}` finds it by this name"),
        "version: 1.0.0",
        "model:",
        _note(f"  source: {_yaml_name(src.name)}", fmt) if fmt != "onnx" else f"  source: {_yaml_name(src.name)}",
        _note("inputs:", "read from the model; a dim name is a size chosen at run time"),
        *[_tensor_line(t) for t in inputs],
        "  # an image input can take photos: preprocess: {image: {...}} (docs/answers.md)",
        "outputs:",
        *[line for t in outputs for line in (_tensor_line(t), *_proposed(t, inputs, outputs))],
        "  # class scores can answer labels: labels: FILE, postprocess: {softmax: true, topk: 5} (docs/answers.md)",
        *([_note("shapes:", "sizes of symbolic dims: verification, calibration and benchmark data use them"),
            *[f"  {d}: {n}" for d, n in sizes.items()]] if sizes else []),
        "runtime:",
        _note("  backend: auto", "the first provider that runs here, in gpux's order; or a list"),
        _note("providers:", f"runs here: {', '.join(providers) or 'none found'} (`gpux inspect` says why "
              "others do not)"),
        *[f"  {p}: {{precision: fp32}}" for p in providers if "precision" in rows[p].option_model.model_fields],
    ]
    if symbolic:
        lines += ["benchmark:",
                  _note("  shapes: {}", "fill in the sizes you run at (benchmarks and synthetic inputs use them):"),
                  *[f"  #   {d}: 128" for d in symbolic]]
    return "\n".join(lines) + "\n"


def _check(path: Path) -> None:
    """The written file loads like any gpux.yml (a failure here is gpux's own mistake, said as such)."""
    from gpux.config.load import load_config

    load_config(path)
