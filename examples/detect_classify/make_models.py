"""Generate the ``detect_classify`` example: a detector-like CNN and a classifier on its output.

detector: ``image`` float32 [batch, 3, 32, 32] -> Conv 3x3 (8) -> Relu -> GlobalAveragePool -> Flatten
-> ``features`` float32 [batch, 8] and ``score`` float32 [batch, 1] (Sigmoid objectness).
classifier: ``features`` float32 [batch, 8] -> Gemm -> Softmax -> ``probs`` float32 [batch, 5].
Weights from a fixed seed, so every run writes byte-identical files.

Usage: python examples/detect_classify/make_models.py [OUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED, OPSET, CHANNELS, CLASSES = 0, 17, 8, 5
HERE = Path(__file__).resolve().parent


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def detector(rng: np.random.Generator) -> onnx.ModelProto:
    w = (rng.standard_normal((CHANNELS, 3, 3, 3)) * np.sqrt(2 / 27)).astype(np.float32)
    b = (rng.standard_normal(CHANNELS) * 0.01).astype(np.float32)
    ws = (rng.standard_normal((CHANNELS, 1)) / np.sqrt(CHANNELS)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
             helper.make_node("Flatten", ["pool"], ["features"]),
             helper.make_node("MatMul", ["features", "score.w"], ["logit"]),
             helper.make_node("Sigmoid", ["logit"], ["score"])]
    graph = helper.make_graph(
        nodes, "detector",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", CHANNELS]),
         helper.make_tensor_value_info("score", TensorProto.FLOAT, ["batch", 1])],
        [numpy_helper.from_array(w, "conv.w"), numpy_helper.from_array(b, "conv.b"),
         numpy_helper.from_array(ws, "score.w")])
    return _model(graph)


def classifier(rng: np.random.Generator) -> onnx.ModelProto:
    w = (rng.standard_normal((CHANNELS, CLASSES)) / np.sqrt(CHANNELS)).astype(np.float32)
    b = (rng.standard_normal(CLASSES) * 0.01).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["features", "fc.w", "fc.b"], ["logits"]),
         helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)], "classifier",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", CHANNELS])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", CLASSES])],
        [numpy_helper.from_array(w, "fc.w"), numpy_helper.from_array(b, "fc.b")])
    return _model(graph)


def main(out: Path = HERE) -> None:
    rng = np.random.default_rng(SEED)
    for name, make in (("detector", detector), ("classifier", classifier)):
        model = make(rng)
        onnx.checker.check_model(model, full_check=True)
        (out / name).mkdir(parents=True, exist_ok=True)
        onnx.save(model, out / name / "model.onnx")
        print(f"wrote {out / name / 'model.onnx'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
