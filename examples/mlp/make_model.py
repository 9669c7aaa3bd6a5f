"""Generate the ``mlp`` example model: a 64 -> 128 -> 128 -> 10 Softmax classifier.

``x`` float32 [batch, 64] -> ``probs`` float32 [batch, 10]. He-initialised weights from a fixed
seed, so every run writes a byte-identical file.

Usage: python examples/mlp/make_model.py [OUT_PATH] [--force]
"""

import argparse
import itertools
import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED, OPSET = 0, 17
DEFAULT_OUT = Path(__file__).resolve().parent / "model.onnx"
DIMS = [64, 128, 128, 10]


def build() -> onnx.ModelProto:
    rng, nodes, inits, x = np.random.default_rng(SEED), [], [], "x"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(DIMS)):
        last = i == len(DIMS) - 2
        gain = 1.0 if last else 2.0  # He init ahead of Relu, LeCun for the logits
        w = rng.standard_normal((fan_in, fan_out)) * np.sqrt(gain / fan_in)
        b = rng.standard_normal(fan_out) * 0.01
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"fc{i}.weight"),
            numpy_helper.from_array(b.astype(np.float32), f"fc{i}.bias"),
        ]
        out = "logits" if last else f"fc{i}"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight", f"fc{i}.bias"], [out], name=f"fc{i}"))
        x = out
        if not last:
            nodes.append(helper.make_node("Relu", [x], [f"{x}.relu"], name=f"{x}.relu"))
            x = f"{x}.relu"
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", DIMS[0]])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", DIMS[-1]])],
        inits,
    )
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
