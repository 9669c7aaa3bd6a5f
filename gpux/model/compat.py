"""Model checks before any runtime loads it: structure (onnx checker, empty files, external data), element
types gpux can exchange, and the model's IR version and opsets against what the installed runtimes read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from gpux.errors import error_lines
from gpux.files import stamp
from gpux.optional import is_installed, require, version_of


def structural_problems(model: Any, path: Path, external: tuple[str, ...]) -> list[str]:
    """What makes `model` (read from `path`, external data not loaded) unusable by any runtime."""
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        return ["not an ONNX model: no graph (empty or not a model file)"]
    if any(not (path.parent / f).is_file() for f in external):
        return []  # the caller names the missing files (the checker would only say it cannot read them)
    out = _truncated(model, path) if external else []
    onnx = require("onnx")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if model.ir_version > onnx.IR_VERSION or opset > onnx.defs.onnx_opset_version():
        return out  # newer than this onnx: the runtime check below says what to do
    try:
        onnx.checker.check_model(str(path) if external else model)
    except Exception as exc:  # ValidationError, or a C++ error on a broken graph
        out.append(f"invalid ONNX graph: {_first(exc)}")
    return out


def _truncated(model: Any, path: Path) -> list[str]:
    """External tensors whose offset+length run past the end of their file."""

    out: list[str] = []
    for t in all_tensors(model.graph):
        if t.data_location != 1:
            continue
        info = {e.key: e.value for e in t.external_data}
        f = path.parent / info.get("location", "")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if f.is_file() and end > f.stat().st_size:
            out.append(f"external data file {f.name} is truncated: tensor {t.name!r} needs bytes up to {end}, "
                       f"the file has {f.stat().st_size}")
            break
    return out


def type_problems(tensors: list[tuple[str, str, int]], zipmap: bool = False) -> list[str]:
    """(kind, name, elem_type) of graph inputs/outputs whose element type gpux cannot pass as numpy arrays
    (`zipmap`: the graph has a ZipMap, whose outputs gpux answers only where they are the graph's outputs)."""
    from gpux.formats import ONNX_DTYPES
    from gpux.model.classic import ZIPMAP_FIX

    onnx = require("onnx")
    out = []
    for kind, name, code in tensors:
        if code == -1:
            fix = ZIPMAP_FIX if zipmap and kind == "output" else "give the model tensor inputs and outputs"
            out.append(f"{kind} {name!r} is not a tensor (a sequence, map or optional), which gpux cannot "
                       f"exchange; {fix}")
        elif code not in ONNX_DTYPES:
            try:
                label = onnx.TensorProto.DataType.Name(code).lower()
            except ValueError:
                label = f"element type {code}"
            out.append(f"{kind} {name!r} has element type {label}, which gpux cannot exchange as a numpy array; "
                       f"add a Cast to a supported type (e.g. float32) at the graph's edge")
    return out


def _first(exc: BaseException) -> str:
    lines = error_lines(exc) or [type(exc).__name__]
    text = lines[0] + (" " + lines[1] if lines[0].endswith(":") and len(lines) > 1 else "")
    return text[:300]


# ---- installed runtimes ----------------------------------------------------------------------------
def _probe_model(ir: int, opset: int) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
                 .SerializeToString())


def _ort_loads(data: bytes) -> bool:
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 4
    try:
        onnxruntime.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    except Exception:  # "Unsupported model IR version" / opset newer than this build knows
        return False
    return True


def ort_limits(cache_file: Path | None = None) -> tuple[int, int] | None:
    """(newest IR version, newest default-domain opset) the installed ONNX Runtime loads; None: none here.
    Found by loading probe models (onnx and a session per try); with `cache_file`, kept there per installed
    onnxruntime and onnx version, so a process that opens a checked model imports neither to ask again."""
    if not is_installed("onnxruntime") or not is_installed("onnx"):
        return None
    from gpux.optional import installed_ort_distributions

    runtimes = ", ".join(f"{d} {version_of(d)}" for d in installed_ort_distributions()) or "onnxruntime None"
    key = f"{runtimes}, onnx {version_of('onnx')}"
    from gpux.files import read_memo, write_memo

    known = read_memo(cache_file)
    if key in known:
        got = known[key]
        return (got[0], got[1]) if got else None
    limits = _probe_limits()
    write_memo(cache_file, {**known, key: list(limits) if limits else None})
    return limits


@cache
def _probe_limits() -> tuple[int, int] | None:
    onnx = require("onnx")
    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if _ort_loads(_probe_model(v, 13))), None)
    if ir is None:
        return None
    opset = next((v for v in range(onnx.defs.onnx_opset_version() + 2, 6, -1)
                  if _ort_loads(_probe_model(ir, v))), 7)
    return ir, opset


@dataclass(frozen=True)
class Compat:
    """How the model's versions meet ONNX Runtime's: refusals (what to do) and an IR version to lower to."""

    problems: tuple[str, ...] = ()
    lower_ir_to: int | None = None
    note: str = ""


def check(ir_version: int | None, opsets: dict[str, int], cache_file: Path | None = None) -> Compat:
    """Compare with the installed ONNX Runtime (the reference and every ONNX artifact run on it); its limits are
    kept in `cache_file` (ort_limits)."""
    limits = ort_limits(cache_file) if ir_version else None
    if limits is None or ir_version is None:
        return Compat()
    ir_max, opset_max = limits
    ort = f"onnxruntime {version_of('onnxruntime') or ''}".strip()
    problems = []
    opset = opsets.get("", opsets.get("ai.onnx", 0))
    if opset > opset_max:
        problems.append(f"the model uses opset {opset}, newer than {ort} reads (<= {opset_max}): convert it with "
                        f"onnx.version_converter.convert_version(model, {opset_max}) or install a newer "
                        f"onnxruntime")
    if ir_version <= ir_max:
        return Compat(tuple(problems))
    onnx = require("onnx")
    from onnx import helper

    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    try:
        floor = helper.find_min_ir_version_for(imports, ignore_unknown=True)
    except Exception:  # an opset newer than this onnx knows
        floor = onnx.IR_VERSION + 1
    if floor <= ir_max and not problems:
        return Compat((), ir_max, f"the model's IR version {ir_version} is newer than {ort} reads; gpux lowers it "
                                  f"to {ir_max} in its own artifacts (its opsets need only IR {floor})")
    problems.append(f"the model's IR version {ir_version} is newer than {ort} reads (<= {ir_max}) and its opsets "
                    f"need IR {floor}: install a newer onnxruntime, or re-export the model with an older exporter")
    return Compat(tuple(problems))


def usable_source(src: Path, ir: int | None, exchanged: dict[str, str], folder: Path) -> Path:
    """`src`, or a copy of it in `folder` (inside the store) that ONNX Runtime reads and gpux exchanges, made once
    per source: stamped with IR version `ir` (None: kept), its ZipMap outputs answered by the probabilities they
    are made of (`exchanged`: gpux.model.classic.exchange)."""
    if ir is None and not exchanged:
        return src
    onnx = require("onnx")
    made_from = "-".join(map(str, stamp(src.stat())))  # a source rewritten in place, mtime kept, is made again
    # a folder per copy, the file named as the source: what a runtime says of it names the user's file
    dst = folder / f"{src.stem}-{made_from}{f'-ir{ir}' if ir else ''}{'-tensors' if exchanged else ''}" / src.name
    if dst.is_file():
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(src))  # with its external data
    if ir is not None:
        model.ir_version = ir
    if exchanged:
        from gpux.model.classic import exchange

        exchange(model, exchanged)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    external = model.ByteSize() > 1_800_000_000
    onnx.save_model(model, str(tmp), save_as_external_data=external, location=dst.name + ".data")
    os.replace(tmp, dst)
    return dst


def all_tensors(graph: Any) -> Any:
    """Every tensor a graph holds: initializers and constants, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from all_tensors(attr.g)
            for g in attr.graphs:
                yield from all_tensors(g)
