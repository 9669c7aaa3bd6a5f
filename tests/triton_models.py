"""The models Triton's example clients call, built as ONNX with onnx.helper, each in a gpux project:
`simple` (INT32 INPUT0, INPUT1 [-1, 16] -> OUTPUT0 sum, OUTPUT1 difference), `simple_string` (the same over
numbers written as strings: Cast in, Cast out), `simple_int8`, `simple_identity` (BYTES), `custom_identity_int32`
and `densenet_onnx` (an image classifier's interface: FP32 [3, 224, 224] -> 1000 scores)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

GPUX_YML = """\
name: {name}
version: 1
model: {{source: model.onnx}}
runtime: {{backend: cpu}}
serve: {{http_port: 0, grpc_port: 0, max_batch_size: {batch}}}
"""
LABELED = """\
outputs: {{{output}: {{dtype: float32, shape: [{classes}], labels: labels.txt}}}}
"""


def _save(graph: Any, path: Path, opset: int = 17) -> None:
    import onnx
    from onnx import helper

    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))


def add_sub(path: Path, elem: int, name: str) -> None:
    """INPUT0, INPUT1 [batch, 16] of `elem` -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1."""
    from onnx import helper

    io = [helper.make_tensor_value_info(n, elem, ["batch", 16]) for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    graph = helper.make_graph([helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
                               helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])], name, io[:2], io[2:])
    _save(graph, path)


def simple(path: Path) -> None:
    from onnx import TensorProto

    add_sub(path, TensorProto.INT32, "simple")


def simple_int8(path: Path) -> None:
    from onnx import TensorProto

    add_sub(path, TensorProto.INT8, "simple_int8")


def simple_string(path: Path) -> None:
    """Triton's simple_string: BYTES INPUT0, INPUT1 [batch, 16] holding numbers as text, Cast to INT32, added and
    subtracted, Cast back to text. An empty string does not Cast: a warm-up of empty strings fails."""
    from onnx import TensorProto, helper

    s = TensorProto.STRING
    nodes = [helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
             helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
             helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Sub", ["a", "b"], ["diff"]),
             helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=s),
             helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=s)]
    io = [helper.make_tensor_value_info(n, s, ["batch", 16]) for n in ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    _save(helper.make_graph(nodes, "simple_string", io[:2], io[2:]), path)


def identity(path: Path, elem: int) -> None:
    from onnx import helper

    graph = helper.make_graph([helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], "identity",
                              [helper.make_tensor_value_info("INPUT0", elem, ["batch", "n"])],
                              [helper.make_tensor_value_info("OUTPUT0", elem, ["batch", "n"])])
    _save(graph, path)


def simple_identity(path: Path) -> None:
    from onnx import TensorProto

    identity(path, TensorProto.STRING)


def custom_identity_int32(path: Path) -> None:
    from onnx import TensorProto

    identity(path, TensorProto.INT32)


def densenet_onnx(path: Path) -> None:
    """data_0 FP32 [3, 224, 224] -> fc6_1 FP32 [1000]: mean colour through fixed weights (an image classifier's
    interface, no batch dim, as Triton's densenet_onnx)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32), "w")
    nodes = [helper.make_node("ReduceMean", ["data_0"], ["m"], axes=[1, 2], keepdims=0),
             helper.make_node("Unsqueeze", ["m", "zero"], ["row"]), helper.make_node("MatMul", ["row", "w"], ["s"]),
             helper.make_node("Squeeze", ["s", "zero"], ["fc6_1"])]
    zero = numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")
    graph = helper.make_graph(nodes, "densenet_onnx", [helper.make_tensor_value_info("data_0", TensorProto.FLOAT,
                                                                                     [3, 224, 224])],
                              [helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, [1000])], [weights, zero])
    _save(graph, path)


MODELS: dict[str, tuple[Callable[[Path], None], int]] = {  # name -> (builder, serve.max_batch_size)
    "simple": (simple, 8), "simple_string": (simple_string, 8), "simple_int8": (simple_int8, 8),
    "simple_identity": (simple_identity, 8), "custom_identity_int32": (custom_identity_int32, 8),
    "densenet_onnx": (densenet_onnx, 0),
}


def triton_projects(base: Path, names: list[str] | None = None) -> list[Path]:
    """A gpux project per model (all of MODELS unless `names`), under `base`."""
    paths = []
    for name in names or list(MODELS):
        build, batch = MODELS[name]
        root = base / name
        root.mkdir(parents=True, exist_ok=True)
        build(root / "model.onnx")
        text = GPUX_YML.format(name=name, batch=batch)
        if name == "densenet_onnx":  # its classes named, as Triton's densenet_onnx names them in labels.txt
            (root / "labels.txt").write_text("".join(f"class {i}\n" for i in range(1000)))
            text += LABELED.format(output="fc6_1", classes=1000)
        (root / "gpux.yml").write_text(text)
        paths.append(root)
    return paths
