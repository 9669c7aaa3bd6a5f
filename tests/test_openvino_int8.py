"""OpenVINO `int8_mode: accuracy` on the real OpenVINO + NNCF: the declared cosine is kept by leaving layers in
fp32, the artifact says how many, bad combinations are config errors, and tune builds it only when it can help."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino")
pytest.importorskip("nncf")
pytest.importorskip("onnxruntime")

from gpux.artifacts.build import build
from gpux.bench.candidates import SLOWER, Outcome, needless
from gpux.config.load import load_config
from gpux.errors import VerificationFailed
from gpux.providers.options import OpenVINOOptions
from gpux.quality.metrics import DEFAULTS, compare, pooled_cosine

from .conftest import gpux as cli

WIDTH, LAYERS = 64, 6


def deep_mlp(folder: Path, int8_mode: str, verify: str) -> Path:
    """x [batch, 64] -> 6 MatMul 64x64 with Relu between: int8 error grows layer by layer (int8 cosine ~0.98)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((WIDTH, WIDTH)) * np.sqrt(2 / WIDTH)).astype(np.float32),
                                     f"w{i}") for i in range(LAYERS)]
    nodes, prev = [], "x"
    for i in range(LAYERS):
        out = "y" if i == LAYERS - 1 else f"m{i}"
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [out]))
        if i < LAYERS - 1:
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"]))
            prev = f"r{i}"
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "deep", [vi("x", TensorProto.FLOAT, ["batch", WIDTH])],
                              [vi("y", TensorProto.FLOAT, ["batch", WIDTH])], inits)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "model.onnx"))
    (folder / "gpux.yml").write_text(f"name: deep\nmodel: {{source: model.onnx}}\nproviders:\n  openvino: "
                                     f"{{precision: int8, int8_mode: {int8_mode}, calibration_samples: 4}}\n{verify}")
    return folder


def real_samples(folder: Path) -> None:
    """40 inputs declared as this synthetic model's real data: 30 calibrate, 10 are held out to verify."""
    np.savez(folder / "real.npz", x=np.random.default_rng(11).standard_normal((40, 1, WIDTH)).astype(np.float32))
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("calibration_samples: 4", "calibration: real.npz"))


def test_accuracy_mode_keeps_the_declared_cosine_where_plain_int8_fails(tmp_path: Path) -> None:
    declared = "verify: {min_cosine: 0.99, min_rows_within: 0}\n"  # judged by the cosine NNCF aims at, not by rows
    real_samples(deep_mlp(tmp_path / "plain", "quantize", declared))
    with pytest.raises(VerificationFailed, match="cosine"):
        build(load_config(tmp_path / "plain"), "openvino")
    real_samples(deep_mlp(tmp_path / "acc", "accuracy", declared))
    art = build(load_config(tmp_path / "acc"), "openvino").final.artifact
    assert art.id == "openvino-ir-int8-accuracy"
    info, verification = art.manifest["info"], art.manifest["verification"]
    assert verification["passed"] and verification["outputs"]["y"]["cosine"] >= 0.99
    assert info["int8_mode"] == "accuracy" and info["nncf_seconds"] > 0
    assert info["fp32_layers"] >= 1 and info["int8_layers"] >= 1, "some layers int8, the ones that broke it fp32"
    assert info["fp32_layers"] + info["int8_layers"] == LAYERS and info["quantized_ops"] > 0
    goal = info["accuracy_goal"]
    assert goal["min_cosine"] == 0.99 and goal["max_drop"] == pytest.approx(0.009)
    # tuned on the calibration samples, judged on the ones held out of them: never the same samples
    assert goal["validation"] == "calibration" and goal["validation_samples"] == 30
    assert verification["data"].startswith("calibration hold-out (10 of 40")
    assert verification["status"] == "verified" and verification["samples"] == 10


def test_accuracy_mode_without_a_declared_cosine_aims_at_the_int8_default(tmp_path: Path) -> None:
    art = build(load_config(deep_mlp(tmp_path, "accuracy", "")), "openvino").final.artifact
    info = art.manifest["info"]
    assert info["accuracy_goal"]["min_cosine"] == DEFAULTS["int8"]["min_cosine"]
    assert info["fp32_layers"] == 0 and info["int8_layers"] == LAYERS, "plain int8 meets 0.98: nothing given back"


def test_the_cosine_accuracy_control_aims_at_is_the_one_verification_reports() -> None:
    rng = np.random.default_rng(0)
    ref = [[rng.standard_normal((1, 8)), rng.standard_normal((1, 3))] for _ in range(4)]
    got = [[a + 0.1 * rng.standard_normal(a.shape) for a in sample] for sample in ref]
    tol = {"atol": None, "rtol": None, "min_within": None, "min_cosine": None, "min_top1": None}
    verified = compare(["a", "b"], ref, got, "int8", tol)
    assert pooled_cosine(ref, got) == pytest.approx(min(o["cosine"] for o in verified.outputs.values()), abs=1e-12)


@pytest.mark.parametrize(("options", "message"), [
    ({"int8_mode": "accuracy"}, "only valid with precision: int8"),
    ({"precision": "int8", "int8_mode": "accuracy", "inference_precision": "bf16"}, "f32 execution"),
    ({"precision": "int8", "int8_mode": "weights", "calibration_samples": 4}, "quantize or accuracy"),
])
def test_bad_combinations_are_config_errors(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenVINOOptions(**options)
    OpenVINOOptions(precision="int8", int8_mode="accuracy", calibration_samples=4)  # calibrated like quantize


def test_a_bad_combination_in_gpux_yml_is_a_config_error_at_build(tmp_path: Path) -> None:
    folder = deep_mlp(tmp_path, "accuracy", "")
    yml = folder / "gpux.yml"
    yml.write_text(yml.read_text().replace("int8_mode: accuracy", "int8_mode: accuracy, inference_precision: f16"))
    r = cli("build", str(folder), "-p", "openvino", "--json")
    assert r.returncode == 3 and "int8_mode: accuracy" in r.stderr, r.stderr
    assert json.loads(r.stdout or "{}").get("targets") is None


def test_tune_measures_the_accuracy_candidate_only_where_plain_int8_failed_and_budget_allows() -> None:
    plain = Outcome(provider="openvino", precision="int8", options={"precision": "int8", "int8_mode": "quantize"},
                    status="ok")
    acc = Outcome(provider="openvino", precision="int8", options={"precision": "int8", "int8_mode": "accuracy"},
                  refines=plain, changes={"int8_mode": "accuracy"}, cost=SLOWER)
    assert needless(acc, [plain], {id(plain): 2.0}, 300)[0] == "not needed"
    plain.status = "failed verification"
    assert needless(acc, [plain], {id(plain): 2.0}, 300) == ("pending", "")
    status, why = needless(acc, [plain], {id(plain): 60.0}, 300)
    assert status == "over budget" and "600 s" in why
    mixed = Outcome(provider="openvino", precision="int8", options={"precision": "int8", "keep_fp32": 0.05},
                    status="ok", refines=plain, changes={"keep_fp32": 0.05})
    status, why = needless(acc, [plain, mixed], {id(plain): 2.0}, 300)
    assert status == "not needed" and why == "keep_fp32=0.05 passed verification first"
    plain.status, plain.why = "unavailable", "NNCF int8 (quantize) failed"
    assert needless(acc, [plain], {}, 300)[0] == "unavailable"
    other = Outcome(provider="openvino", precision="fp32", options={"precision": "fp32"})
    assert needless(other, [plain], {}, 0) == ("pending", "")
