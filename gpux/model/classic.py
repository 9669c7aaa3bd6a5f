"""ONNX-ML classifiers as skl2onnx and onnxmltools write them (ai.onnx.ml): the class names an output's last axis
holds (a classifier's or a ZipMap's `classlabels_*`), and ZipMap outputs (a sequence of maps, one per row), which
gpux answers with the probabilities tensor they are made of, under the same name (docs/classic-ml.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ML = "ai.onnx.ml"
CLASSLABELS = ("classlabels_strings", "classlabels_int64s", "classlabels_ints")
# ops a probability tensor passes through with its classes on the same last axis (skl2onnx, onnxmltools)
FOLLOWS = frozenset({"Identity", "Cast", "Normalizer", "Mul", "Div", "Softmax", "Clip"})
RESHAPES = frozenset({"Reshape", "Squeeze", "Flatten"})  # and a label output through these
CLASSIFIERS = frozenset({"LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"})  # (label, scores)
FLOATS = (1, 10, 11)  # float, float16, double
ZIPMAP_FIX = ("convert the model without a ZipMap: skl2onnx's to_onnx(model, X, options={id(model): {'zipmap': "
              "False}}), onnxmltools' convert_*(model, ..., zipmap=False)")


@dataclass(frozen=True)
class Classes:
    """What a model's ONNX-ML nodes say of its outputs: class names per output (the labels of its last axis), and
    the ZipMap outputs answered by the tensor the ZipMap reads (output -> that tensor's name)."""

    labels: dict[str, list[str]] = field(default_factory=dict)
    exchanged: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # exchanged: (rows, classes)
    zipmaps: int = 0  # ZipMap nodes in the graph (a sequence output left over names the converters' option)


def class_names(node: Any) -> list[str] | None:
    """A classifier's or ZipMap's class names, as text (int64 labels as their digits); None: it names none."""
    for attr in node.attribute:
        if attr.name in CLASSLABELS and (attr.strings or attr.ints):  # a converter may write an empty one too
            return [s.decode("utf-8", "replace") for s in attr.strings] if attr.strings else [str(i) for i in attr.ints]
    return None


def read(model: Any) -> Classes:
    """The class names and exchangeable ZipMaps of `model` (an onnx ModelProto); nothing for a model without
    ai.onnx.ml operators."""
    if not any(o.domain == ML for o in model.opset_import):
        return Classes()
    graph = model.graph
    made_by = {out: node for node in graph.node for out in node.output}
    constants = {i.name: i for i in graph.initializer}
    constants |= {o: a.t for n in graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
                  for o in n.output}
    labels: dict[str, list[str]] = {}
    exchanged: dict[str, str] = {}
    picked: list[list[str]] = []
    for out in graph.output:
        node, name = _origin(out.name, made_by, constants, FOLLOWS | RESHAPES)
        names = None if node is None else class_names(node) or _picked_from(node, constants)
        if node is None or names is None:
            continue
        if node.op_type == "ZipMap":
            exchanged |= {out.name: node.input[0]} if out.type.HasField("sequence_type") else {}
            labels[out.name] = names
        elif node.op_type in CLASSIFIERS and list(node.output).index(name) == 1 and \
                _origin(out.name, made_by, constants, FOLLOWS)[0] is node:  # its scores, their classes kept
            labels[out.name] = names
        else:  # a label output: the names it picks from, for the scores beside it (below)
            picked.append(names)
    for names in picked:  # scores an ensemble or calibration computes: the one float output with that many classes
        scores = [o.name for o in graph.output if o.name not in labels and _columns(o) == len(names)]
        labels |= {scores[0]: names} if len(scores) == 1 else {}
    shapes = {n: (_rows(model), len(labels.get(n, ())) or None) for n in exchanged}
    return Classes(labels={n: v for n, v in labels.items() if v}, exchanged=exchanged, shapes=shapes,
                   zipmaps=sum(n.op_type == "ZipMap" for n in graph.node))


def _origin(name: str, made_by: dict[str, Any], constants: dict[str, Any], through: frozenset[str]
            ) -> tuple[Any, str]:
    """The node a graph output's values come from, followed back through the ops `through` (with one input that is
    not a constant), and the name of that node's output."""
    seen: set[str] = set()
    while name in made_by and name not in seen:
        seen.add(name)
        node = made_by[name]
        data = [i for i in node.input if i and i not in constants]
        if node.op_type not in through or node.domain not in ("", ML) or len(data) != 1:
            return node, name
        name = data[0]
    return None, name


def _picked_from(node: Any, constants: dict[str, Any]) -> list[str] | None:
    """The class names a label is picked from by index (skl2onnx's ArrayFeatureExtractor, or a Gather, on a
    constant list of names)."""
    if node.op_type not in ("ArrayFeatureExtractor", "Gather") or node.input[0] not in constants:
        return None
    from onnx import numpy_helper

    values = numpy_helper.to_array(constants[node.input[0]])
    if values.ndim != 1 or values.dtype.kind not in "OSUiu":
        return None
    return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values.tolist()]


def _columns(value_info: Any) -> int | None:
    """The static last dim of a float tensor output (None: another type, or a dynamic last dim)."""
    t = value_info.type.tensor_type if value_info.type.HasField("tensor_type") else None
    dims = t.shape.dim if t is not None and t.elem_type in FLOATS else []
    return int(dims[-1].dim_value) if len(dims) == 2 and dims[-1].HasField("dim_value") else None


def exchange(model: Any, outputs: dict[str, str]) -> None:
    """Answer each ZipMap output of `model` (in place) with the tensor its ZipMap reads (`outputs`: output -> that
    tensor, as `read` found them): the ZipMap becomes an Identity, the output a float tensor [rows, classes]."""
    from onnx import TensorProto, helper

    rows, classes = _rows(model), {}
    for node in model.graph.node:
        if node.op_type == "ZipMap" and node.domain == ML and node.input[0] in outputs.values():
            classes[node.input[0]] = len(class_names(node) or []) or None
            node.CopyFrom(helper.make_node("Identity", [node.input[0]], list(node.output), name=node.name))
    keep = [v for v in model.graph.value_info if v.type.HasField("tensor_type")]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)  # the sequences between a ZipMap and its output are tensors now
    for out in model.graph.output:
        if out.name in outputs:
            shape = [rows, classes.get(outputs[out.name])]
            out.CopyFrom(helper.make_tensor_value_info(out.name, TensorProto.FLOAT, shape))
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", 13))  # for the Identity


def _rows(model: Any) -> int | None:
    """The rows the model's first input fixes (None: a dynamic batch)."""
    graph = model.graph
    init = {i.name for i in graph.initializer}
    first = next((v for v in graph.input if v.name not in init), None)
    dims = first.type.tensor_type.shape.dim if first is not None and first.type.HasField("tensor_type") else []
    return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0 else None


def runnable(path: Path) -> bytes:
    """The model at `path` with its ZipMap outputs exchanged (`exchange`), as bytes a session opens."""
    from gpux.optional import require

    onnx = require("onnx")
    model = onnx.load(str(path))
    exchange(model, read(model).exchanged)
    return bytes(model.SerializeToString())


__all__ = ["ZIPMAP_FIX", "Classes", "class_names", "exchange", "read", "runnable"]
