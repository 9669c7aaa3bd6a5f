"""Generate the ``ranker`` example model: a small multi-input scorer with int64 inputs.

Inputs ``tokens`` int64 [batch, seq] (ids in [0, 1000)), ``segment`` int64 [batch, seq] (0 or 1)
and ``dense`` float32 [batch, 16]. Token + segment embeddings are mean-pooled over ``seq``,
concatenated with a projection of ``dense`` and fed through MatMul -> Relu -> MatMul, whose
output is split into ``score`` float32 [batch, 1] and ``embedding`` float32 [batch, 32].
Weights come from a fixed seed, so every run writes a byte-identical file.

Usage: python examples/multi_input/make_model.py [OUT_PATH] [--force]
"""

import argparse
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED, OPSET = 0, 17
DEFAULT_OUT = Path(__file__).resolve().parent / "model.onnx"
VOCAB, SEGMENTS, DENSE, DIM, HIDDEN = 1000, 2, 16, 32, 64


def build() -> onnx.ModelProto:
    rng, nodes, inits = np.random.default_rng(SEED), [], []

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def param(name, arr):
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def linear(x, name, fan_in, fan_out, gain=1.0):
        """MatMul + Add; weights drawn with std sqrt(gain / fan_in), bias zero."""
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(gain / fan_in)).astype(np.float32)
        y = node("MatMul", [x, param(f"{name}.weight", w)], f"{name}.matmul")
        return node("Add", [y, param(f"{name}.bias", np.zeros(fan_out, np.float32))], name)

    tok_emb = param("token_emb", rng.standard_normal((VOCAB, DIM)).astype(np.float32))
    seg_emb = param("segment_emb", rng.standard_normal((SEGMENTS, DIM)).astype(np.float32))
    tok = node("Gather", [tok_emb, "tokens"], "token_lookup")  # [batch, seq, DIM]
    seg = node("Gather", [seg_emb, "segment"], "segment_lookup")  # [batch, seq, DIM]
    emb = node("Add", [tok, seg], "embeddings")
    pooled = node("ReduceMean", [emb], "pooled", axes=[1], keepdims=0)  # [batch, DIM]
    features = node("Concat", [pooled, linear("dense", "dense_proj", DENSE, DIM)], "features", axis=1)
    hidden = node("Relu", [linear(features, "hidden", 2 * DIM, HIDDEN, gain=2.0)], "hidden.relu")
    head = linear(hidden, "head", HIDDEN, 1 + DIM)  # [batch, 1 + DIM] -> score | embedding
    split = param("head.split", np.array([1, DIM], np.int64))
    nodes.append(helper.make_node("Split", [head, split], ["score", "embedding"], name="head.split", axis=1))

    info = helper.make_tensor_value_info
    inputs = [
        info("tokens", TensorProto.INT64, ["batch", "seq"]),
        info("segment", TensorProto.INT64, ["batch", "seq"]),
        info("dense", TensorProto.FLOAT, ["batch", DENSE]),
    ]
    outputs = [info("score", TensorProto.FLOAT, ["batch", 1]), info("embedding", TensorProto.FLOAT, ["batch", DIM])]
    graph = helper.make_graph(nodes, "ranker", inputs, outputs, inits)
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def make(path: str | os.PathLike = DEFAULT_OUT) -> Path:
    """Build, check and atomically write the model to ``path``; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = build()
    onnx.checker.check_model(model, full_check=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        onnx.save(model, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="output .onnx path")
    parser.add_argument("--force", action="store_true", help="regenerate even if OUT exists")
    args = parser.parse_args()
    kept = args.out.exists() and not args.force  # deterministic output: regenerating would change nothing
    path = args.out if kept else make(args.out)
    print(f"{'kept existing' if kept else 'wrote'} {path} ({path.stat().st_size:,} bytes)")
