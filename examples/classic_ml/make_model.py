"""Generate the ``classic_ml`` example: a scikit-learn RandomForestClassifier trained on the iris measurements
scikit-learn ships, its classes named by strings (setosa, versicolor, virginica), converted to ONNX with skl2onnx's
defaults. (No scaler ahead of the trees: scikit-learn scales in float64, ONNX in float32, and a row that lands
between the two on a tree's threshold takes the other branch.)

Those defaults are what most converted classifiers look like: ``X`` float32 [batch, 4] -> ``output_label`` string
[batch] (the predicted class name) and ``output_probability``, a ZipMap (a list of {class name: probability} maps,
one per row), which gpux answers as the float32 [batch, 3] probabilities it is made of, each column named by the
class the model carries. Writes ``model.onnx`` and ``held_out.npz`` (the rows the estimator never saw, for
``gpux run . --file held_out.npz``). Nothing is downloaded; the same seed writes the same model.

Usage: python examples/classic_ml/make_model.py [OUT_DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = 0


class Missing(Exception):
    """scikit-learn or skl2onnx is not installed."""


def train() -> tuple[Any, Any, Any]:
    """(the fitted estimator, the held-out rows as float32, their true class names)."""
    try:
        import numpy as np
        from sklearn.datasets import load_iris
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.model_selection import train_test_split
    except ImportError as exc:
        raise Missing(f"scikit-learn is not installed: pip install scikit-learn skl2onnx ({exc})") from exc
    iris = load_iris()
    x, y = iris.data.astype(np.float32), np.asarray(iris.target_names)[iris.target]
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.3, random_state=SEED, stratify=y)
    model = RandomForestClassifier(n_estimators=20, max_depth=4, random_state=SEED)
    return model.fit(x_train, y_train), x_test, y_test


def export(path: Path) -> Path:
    """Train, convert with skl2onnx's default options (ZipMap on) and write the model to `path`, and the held-out
    rows beside it; return the model's path."""
    import numpy as np

    try:
        from skl2onnx import to_onnx
    except ImportError as exc:
        raise Missing(f"skl2onnx is not installed: pip install skl2onnx ({exc})") from exc
    model, x_test, _ = train()
    onx = to_onnx(model, x_test[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(onx.SerializeToString())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    np.savez(path.parent / "held_out.npz", X=x_test)
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=HERE, help="folder to write model.onnx into")
    args = parser.parse_args()
    try:
        written = export(args.out / "model.onnx")
    except Missing as exc:
        raise SystemExit(str(exc)) from exc
    print(f"wrote {written} ({written.stat().st_size:,} bytes) and {written.parent / 'held_out.npz'}")
