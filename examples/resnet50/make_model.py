"""Generate the ``resnet50`` example model: ResNet-50 topology, random weights (~100 MB).

``input`` float32 [batch, 3, 224, 224] -> ``logits`` float32 [batch, 1000]. Each Conv feeds an unfused BatchNorm
whose running stats are measured on a seeded calibration batch while building, so activations stay O(1).
"""

import argparse
import os
from pathlib import Path

import numpy as np
import onnx
from numpy.lib.stride_tricks import sliding_window_view as windows
from onnx import TensorProto, helper, numpy_helper

SEED, OPSET = 0, 17
DEFAULT_OUT = Path(__file__).resolve().parent / "model.onnx"
STAGES = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]  # (width, blocks, first stride)


def build() -> onnx.ModelProto:
    rng, nodes, inits = np.random.default_rng(SEED), [], []

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def param(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr, np.float32), name))
        return name

    def conv_bn(x, v, name, cout, k, stride=1, relu=True, gamma=1.0):
        """Conv -> BN (-> Relu) on graph tensor ``x``; ``v`` is its value on the calibration batch (NHWC)."""
        cin, pad = v.shape[-1], k // 2
        w = rng.standard_normal((cout, cin, k, k), np.float32) * np.float32(np.sqrt(2.0 / (cin * k * k)))
        v = windows(np.pad(v, [(0, 0), (pad, pad), (pad, pad), (0, 0)]), (k, k), axis=(1, 2))[:, ::stride, ::stride]
        v = np.tensordot(v, w, ([3, 4, 5], [1, 2, 3]))
        mean, var = v.mean((0, 1, 2)), v.var((0, 1, 2))
        scale, bias = gamma * (0.7 + 0.6 * rng.random(cout, np.float32)), 0.1 * rng.standard_normal(cout, np.float32)
        v = (v - mean) / np.sqrt(var + 1e-5) * scale + bias
        x = node("Conv", [x, param(f"{name}.weight", w)], name, strides=[stride] * 2, pads=[pad] * 4)
        bn = [param(f"{name}.bn.{n}", a) for n, a in dict(scale=scale, bias=bias, mean=mean, var=var).items()]
        x = node("BatchNormalization", [x, *bn], f"{name}.bn", epsilon=1e-5)
        return (node("Relu", [x], f"{name}.relu"), np.maximum(v, 0)) if relu else (x, v)

    v = np.concatenate([rng.standard_normal((1, 224, 224, 3), np.float32), rng.random((1, 224, 224, 3), np.float32)])
    x, v = conv_bn("input", v, "stem", 64, 7, stride=2)
    x = node("MaxPool", [x], "stem.pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    v = windows(np.pad(v, [(0, 0), (1, 1), (1, 1), (0, 0)]), (3, 3), axis=(1, 2))[:, ::2, ::2].max((4, 5))
    for s, (width, blocks, stride) in enumerate(STAGES, start=1):
        for b in range(blocks):
            p, st = f"layer{s}.{b}", stride if b == 0 else 1
            y, yv = conv_bn(x, v, f"{p}.conv1", width, 1)
            y, yv = conv_bn(y, yv, f"{p}.conv2", width, 3, stride=st)
            y, yv = conv_bn(y, yv, f"{p}.conv3", 4 * width, 1, relu=False, gamma=0.3)  # damp the residual
            sc, sv = (x, v) if b else conv_bn(x, v, f"{p}.downsample", 4 * width, 1, stride=st, relu=False)
            x, v = node("Relu", [node("Add", [y, sc], f"{p}.add")], f"{p}.relu"), np.maximum(yv + sv, 0)
    x = node("Flatten", [node("GlobalAveragePool", [x], "avgpool")], "flatten", axis=1)
    w = rng.standard_normal((1000, v.shape[-1]), np.float32)
    w -= w.mean(1, keepdims=True)  # zero-sum rows cancel the input-independent part of the pooled features
    w /= np.std(v.mean((1, 2)) @ w.T)  # logits std ~1 on the calibration batch
    node("Gemm", [x, param("fc.weight", w), param("fc.bias", np.zeros(1000))], "logits", transB=1)
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 224, 224])
    out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1000])
    graph = helper.make_graph(nodes, "resnet50", [inp], [out], inits)
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def make(path: str | os.PathLike = DEFAULT_OUT) -> Path:
    """Build, check and atomically write the model to ``path``; return the path."""
    (path := Path(path)).parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        onnx.save(build(), tmp)
        onnx.checker.check_model(str(tmp), full_check=True)  # by path: no second 100 MB copy in memory
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
