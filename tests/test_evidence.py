"""A floor is met only when the judged rows show it: the one-sided Wilson bound, the rows a floor needs, the verdict's
words when the rows are too few, the loosenings shown beside it, and rows derived from the judged samples."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpux.quality.evidence import loosened, lower_bound, rows_needed, shortfall, weigh

from .conftest import gpux as cli
from .conftest import write


def test_the_bound_is_what_the_rows_show() -> None:
    assert lower_bound(45, 45) == pytest.approx(0.9433, abs=1e-4)  # no miss in 45 rows: at most ~5.7 % missed
    assert lower_bound(0, 0) == 0.0 and lower_bound(7, 10, confidence=0.5) == pytest.approx(0.7)
    assert lower_bound(299, 300) < 0.99 < lower_bound(299, 300, confidence=0.5)
    assert rows_needed(0.99) == 268 and lower_bound(268, 268) >= 0.99 > lower_bound(267, 267)
    assert rows_needed(0.99, misses=1) == 446 and rows_needed(0.9) == 25
    assert rows_needed(1.0) is None  # no number of rows shows 100 %
    assert rows_needed(0.99, confidence=0.5) == 1


def record(agree: int, rows: int, confident: int | None = None) -> dict:
    confident = rows if confident is None else confident
    return {"logits": {"top1_confident": agree / confident, "confident_rows": confident, "top5": 1.0, "rows": rows}}


def test_too_few_rows_say_what_they_show_and_how_many_more_are_needed() -> None:
    floors = {"logits": {"min_top1_confident": 0.99, "min_top5": 0.99}}
    weighed = weigh(record(45, 77, 45), floors)
    assert {w["metric"] for w in weighed} == {"top1_confident", "top5"}
    assert shortfall(weighed) == ("45 judged rows (logits: confident top-1) show at most 94.3 %; about 223 more are "
                                  "needed for the 99 % floor")
    shown = weigh(record(300, 300), floors)  # no miss in 300 rows: at least 99.1 %
    assert all(w["shown"] for w in shown) and min(w["bound"] for w in shown) >= 0.99 and shortfall(shown) == ""
    # a rate below its floor is a failure, not a shortfall
    assert "confident top-1" not in shortfall(weigh(record(40, 45), floors))
    # answers are weighed only where judged (real data)
    text = {"ocr": {"answers": {"exact_confident": 1.0, "confident_rows": 50, "judged": False}}}
    assert weigh(text, {"ocr": {"min_exact_match": 0.99}}) == []


def test_loosened_thresholds_are_named_beside_their_defaults() -> None:
    defaults = {"min_top1_confident": 0.99, "max_cer": 0.01, "min_top5": 0.99}
    assert loosened([{"min_top1_confident": 0.95, "max_cer": 0.005}, {"max_cer": 0.03}], defaults, 0.95) == [
        "min_top1_confident 0.95 (default 0.99)", "max_cer 0.03 (default 0.01)"]
    assert loosened([{"min_top5": 1.0}], defaults, 0.8) == ["confidence 0.8 (default 0.95)"]


# ---- derived rows ---------------------------------------------------------------------------------------------------
def tiny_classifier(folder: Path) -> Path:
    """images [batch, 3, 16, 16] -> logits [batch, 10]: a conv, global pooling and a linear layer, seeded."""
    import onnx

    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["images", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]), helper.make_node("MatMul", ["f", "fc"], ["logits"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("images", TensorProto.FLOAT,
                                                                            ["batch", 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, folder / "model.onnx")
    x = np.random.default_rng(1).random((8, 1, 3, 16, 16)).astype(np.float32)
    np.savez(folder / "photos.npz", images=x)
    return folder


YML = """\
name: tiny
model: {source: model.onnx}
outputs:
  logits: {dtype: float32, shape: [batch, 10]}
verify:
  data: photos.npz
  classifications: [logits]
"""


def test_derived_rows_come_from_the_judged_samples_reproducibly_and_change_the_key(tmp_path: Path) -> None:
    folder = tiny_classifier(tmp_path)
    write(folder / "gpux.yml", YML + "  derive: {rows: 40, seed: 3}\n")
    r = cli("build", str(folder), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    target = json.loads(r.stdout)["targets"][-1]
    v = target["verification"]
    assert v["rows"] == 40 and "+ 32 derived from them (verify.derive" in v["data"], v["data"]
    again = cli("build", str(folder), "-p", "cpu", "--json", "--force")
    assert json.loads(again.stdout)["targets"][-1]["verification"]["data_digest"] == v["data_digest"]  # same seed
    write(folder / "gpux.yml", YML + "  derive: {rows: 40, seed: 4}\n")
    other = json.loads(cli("build", str(folder), "-p", "cpu", "--json").stdout)["targets"][-1]
    assert other["verification"]["data_digest"] != v["data_digest"] and other["path"] != target["path"]


def test_derived_rows_are_never_made_from_calibration_samples(tmp_path: Path) -> None:
    """With the calibration file also declared as verify.data, only the held-out quarter is judged and derived
    from: 2 of 8 samples, and the rows derived from them."""
    folder = tiny_classifier(tmp_path)
    write(folder / "gpux.yml", YML + "  derive: {rows: 20}\nproviders:\n"
                                     "  cpu: {precision: int8, quantization: static, calibration: photos.npz}\n")
    r = cli("build", str(folder), "-p", "cpu", "--json")
    v = (json.loads(r.stdout)["targets"][-1].get("verification") if r.returncode == 0 else None) or {}
    text = v.get("data") or r.stderr
    assert "calibration hold-out (2 of 8 samples, not calibrated on) + 18 derived from them" in text, text
    # 20 rows cannot show a 99 % floor: unverified (or failed), with the bound and the rows still needed
    assert r.returncode == 1 or v.get("status") == "unverified", r.stderr
    if r.returncode == 0:
        assert "judged rows (logits: " in v["unverified"] and "more are needed for the 99 % floor" in v["unverified"]


def test_derive_needs_an_image_input(tmp_path: Path) -> None:
    from .conftest import make_mlp

    make_mlp(tmp_path / "model.onnx")
    np.savez(tmp_path / "real.npz", x=np.ones((4, 1, 8), np.float32))
    write(tmp_path / "gpux.yml", "name: mlp\nmodel: {source: model.onnx}\nverify: {data: real.npz, derive: {}}\n")
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode != 0 and "verify.derive: no input is an image to crop" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
