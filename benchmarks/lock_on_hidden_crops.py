"""How the artifact `gpux tune` locked for the MobileNetV2 example answers photo crops no verification saw: 300
random crops of the example's photos (random scales and positions, seeded), the locked artifact (opened through
gpux.load, which follows gpux.lock.json) against the FP32 source model in ONNX Runtime. Printed as one JSON line:
the lock's choice, the hidden crops' confident top-1 and top-5 agreement, and the lock's own verdict and bound.

    python benchmarks/lock_on_hidden_crops.py examples/mobilenet_v2     # after `gpux tune examples/mobilenet_v2`
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "mobilenet_v2"))


def hidden_crops(n: int = 300, seed: int = 12345) -> np.ndarray:
    """[n, 3, 224, 224]: each photo resized by its shorter side to 230-400 px, cropped at random, normalized."""
    import make_model as mk

    rng = np.random.default_rng(seed)
    photos = mk.photos()
    crops = []
    for rgb in photos:
        for _ in range(-(-n // len(photos))):
            img = mk.resized(rgb, int(rng.integers(230, 400)))
            w, h = img.size
            crops.append(mk.normalized(img, int(rng.integers(0, w - 223)), int(rng.integers(0, h - 223))))
    return np.stack(crops).astype(np.float32)[:n]


def main() -> None:
    import onnxruntime as ort

    import gpux

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "examples" / "mobilenet_v2")
    x = hidden_crops()
    ref = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    r = np.concatenate([ref.run(None, {"x": x[i:i + 1]})[0] for i in range(len(x))])
    with gpux.load(folder) as session:
        g = np.concatenate([session.run({"x": x[i:i + 1]})["logits"] for i in range(len(x))])
    p = np.exp(r - r.max(1, keepdims=True))
    confident = (p / p.sum(1, keepdims=True)).max(1) >= 0.5
    agree = r.argmax(1) == g.argmax(1)
    top5 = (np.argsort(-g, 1)[:, :5] == r.argmax(1)[:, None]).any(1)
    lock = json.loads((folder / "gpux.lock.json").read_text())
    acc = (lock.get("figures") or {}).get("accuracy") or {}
    print(json.dumps({"choice": lock["choice"], "hidden_rows": len(x), "hidden_confident": int(confident.sum()),
                      "hidden_confident_top1": float(agree[confident].mean()), "hidden_top5": float(top5.mean()),
                      "lock_status": acc.get("status"), "lock_rows": acc.get("samples"),
                      "lock_rates": [(e["label"], e["agree"], e["rows"], round(e["bound"], 4))
                                     for e in acc.get("evidence") or []]}))


if __name__ == "__main__":
    main()
