"""Mixed-precision int8 on the trained MobileNetV2 (examples/mobilenet_v2, 44 real photo crops): `keep_fp32` leaves
in fp32 exactly the layers ranked most sensitive, ranked on the calibration samples only; `gpux tune` tries the
mixed ladder where plain int8 fails the floor and locks a candidate that meets it on held-out data; an int8
candidate of a provider without calibration data borrows the project's."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpux.artifacts.build import build
from gpux.bench.tune import TuneRequest, candidates
from gpux.config.load import load_config
from gpux.plan.lock import LOCK_NAME
from gpux.quality.calibrate import split
from gpux.runtimes.onnxruntime_int8 import samples_digest

from .conftest import gpux as cli
from .trained import ROOT, imagenet_crops, mobilenet_v2_onnx

DECLARED = "  cpu: {precision: int8, quantization: static, per_channel: true, calibration: crops.npz}"


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/mobilenet_v2 with its model and crops made, and cpu int8 per tensor (per_channel left
    out): plain static int8 then flips about 1 held-out crop in 5, below the int8 floor."""
    folder = tmp_path_factory.mktemp("mobilenet") / "mobilenet_v2"
    folder.mkdir()
    for name in ("gpux.yml", "imagenet_labels.txt"):
        shutil.copy(ROOT / "examples" / "mobilenet_v2" / name, folder / name)
    mobilenet_v2_onnx(folder / "model.onnx")
    np.savez(folder / "crops.npz", x=imagenet_crops()[:, None])
    yml = folder / "gpux.yml"
    assert DECLARED in yml.read_text()
    yml.write_text(yml.read_text().replace(DECLARED, DECLARED.replace("per_channel: true, ", "")))
    return folder


def with_cpu(folder: Path, fields: str) -> Any:
    """The project with `fields` added to its cpu block."""
    yml = folder / "gpux.yml"
    text = yml.read_text()
    yml.write_text(text.replace("calibration: crops.npz}", f"calibration: crops.npz, {fields}}}", 1))
    try:
        return load_config(folder)
    finally:
        yml.write_text(text)


def graph(path: Path) -> tuple[list[Any], dict[str, str]]:
    """The model's Conv/Gemm layers and, per tensor, the type of the node that makes it."""
    import onnx

    model = onnx.load(str(path))
    made_by = {o: n.op_type for n in model.graph.node for o in n.output}
    return [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")], made_by


@pytest.mark.slow
def test_keep_fp32_leaves_exactly_the_ranked_layers_ranked_on_calibration_samples_only(mobilenet: Path) -> None:
    project = with_cpu(mobilenet, "keep_fp32: 3")  # optimization basic: the file keeps its Q/DQ nodes
    art = build(project, "cpu", verify=False).final.artifact
    record = art.manifest["info"]["keep_fp32"]
    assert record["of"] == 53 and len(record["ranking"]) == 50
    losses = [r["lost_db"] for r in record["ranking"]]
    assert losses == sorted(losses, reverse=True) and losses[0] > losses[-1]
    assert record["kept"] == [r["layer"] for r in record["ranking"][:3]]
    layers, made_by = graph(art.main)
    fp32 = {n.name for n in layers if "DequantizeLinear" not in {made_by.get(i) for i in n.input}}
    assert fp32 == set(record["kept"]), "no Q/DQ feeds the kept layers; every other layer takes int8 weights"
    assert all(made_by.get(n.input[1]) == "DequantizeLinear" for n in layers if n.name not in fp32)
    crops = [{"x": x} for x in np.load(mobilenet / "crops.npz")["x"]]
    calibration, held_out = split(crops)
    assert record["ranked_on"] == {"samples": 33, "digest": samples_digest(calibration)}
    assert len(held_out) == 11 and samples_digest(calibration) != samples_digest(crops)


@pytest.mark.slow
def test_tune_tries_the_mixed_ladder_where_plain_int8_fails_and_locks_one_meeting_the_floor(mobilenet: Path) -> None:
    # what is checked is the ladder, not the budget: a budget no busy machine spends, so every rung needed is reached
    r = cli("tune", str(mobilenet), "--providers", "cpu", "--precisions", "int8", "--seconds", "0.3",
            "--budget", "3600", "--json")
    lock = json.loads(r.stdout)
    plain = next(c for c in lock["candidates"] if c["options"].get("quantization") == "static" and not c["refines"])
    assert plain["status"] == "failed verification" and plain["accuracy"]["top5"] < 0.99
    mixed = [c for c in lock["candidates"] if (c["changes"] or {}).get("keep_fp32")]
    assert [c["changes"]["keep_fp32"] for c in mixed] == [0.05, 0.15, 0.3]
    tried = [c for c in lock["candidates"] if c["status"] not in ("not needed", "over budget", "too slow")]
    for slow in (c for c in lock["candidates"] if c["status"] == "too slow"):  # e.g. dynamic int8's ConvInteger
        assert slow["precision"] == "int8" and not slow["accuracy"] and "not verified" in slow["why"], slow
        assert slow["p50_ms"] is None
    assert mixed[0] in tried, "the calibration variants failed too here: the first rung of the ladder was built"
    if r.returncode == 1:  # on 700 judged rows no cpu int8 rung shows the 99 % floor: nothing is locked, each says why
        assert all(c["status"] in ("failed verification", "unverified") for c in tried), tried
        assert lock["choice"] is None and not (mobilenet / LOCK_NAME).exists()
        return
    assert r.returncode == 0, r.stderr
    passed = next(c for c in tried if c["status"] == "ok")
    assert all(c["status"] in ("failed verification", "unverified") for c in tried[:tried.index(passed)])
    assert all(c["status"] == "not needed" for c in lock["candidates"][lock["candidates"].index(passed) + 1:])
    assert lock["choice"]["options"] == passed["options"] and passed["vs_plain_ort"]["speedup"] > 0
    assert passed in mixed and passed["keep_fp32"]["ranked_on"]["samples"] == 33
    assert len(passed["keep_fp32"]["kept"]) == {0.05: 3, 0.15: 8, 0.3: 16}[passed["changes"]["keep_fp32"]]
    assert lock["limiting_layers"]["cpu"]["layers"][0]["lost_db"] > 0
    assert json.loads((mobilenet / LOCK_NAME).read_text())["choice"] == lock["choice"]


def test_an_int8_candidate_without_calibration_of_its_own_borrows_the_projects(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(ROOT / "examples" / "mobilenet_v2", folder, ignore=shutil.ignore_patterns("*.onnx", "*.npz"))
    np.savez(folder / "crops.npz", x=np.zeros((4, 1, 3, 224, 224), np.float32))
    yml = folder / "gpux.yml"  # an openvino block with no calibration of its own: its int8 candidates borrow cpu's
    yml.write_text(re.sub(r"(?m)^  openvino: .*$", "  openvino: {precision: fp32}", yml.read_text()))
    project = load_config(folder, require_model=False)
    rows = candidates(project, TuneRequest(target=str(folder), providers=("openvino", "cpu")))
    ov = [o for o in rows if o.provider == "openvino" and o.precision == "int8"]
    assert ov and all(o.options["calibration"] == "crops.npz" for o in ov)
    assert all(o.note == "calibration from providers.cpu.calibration" for o in ov)
    dynamic = next(o for o in rows if o.options.get("quantization") == "dynamic")
    assert "calibration" not in dynamic.options, "a mode that takes no calibration data borrows none"
    assert [o.changes for o in ov if o.refines] == [{"preset": "mixed"}, {"bias_correction": "full"},
                                                   {"keep_fp32": 0.05}, {"keep_fp32": 0.15}, {"keep_fp32": 0.3},
                                                   {"int8_mode": "accuracy"}]


def test_entropy_calibration_ranges_differ_from_minmax(tmp_path: Path) -> None:
    """quantize_static's own entropy bins (128 of 128) leave one candidate range, the minmax one: gpux's differ."""
    import onnx
    from onnx import numpy_helper

    from gpux.runtimes.onnxruntime_int8 import Int8, quantize

    from .conftest import make_mlp

    make_mlp(tmp_path / "model.onnx")
    rng = np.random.default_rng(0)
    feeds = [{"x": (rng.standard_normal((1, 8)) * (3 if i % 7 == 0 else 1)).astype(np.float32)} for i in range(40)]

    def scales(method: str) -> dict[str, Any]:
        dst = tmp_path / f"{method}.onnx"
        quantize(tmp_path / "model.onnx", dst, Int8("static", method=method), feeds)
        return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(dst)).graph.initializer
                if i.name.endswith("_scale")}

    minmax, entropy = scales("minmax"), scales("entropy")
    assert minmax.keys() == entropy.keys() and any(not np.allclose(minmax[k], entropy[k]) for k in minmax)


def test_the_entropy_search_finds_the_range_onnxruntimes_own_finds() -> None:
    """gpux.runtimes.onnxruntime_int8.entropy_threshold against HistogramCollector.get_entropy_threshold itself, on
    histograms its collector makes (merged over batches, so their bins grow) of activations shaped as nets make them."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    from gpux.runtimes.onnxruntime_int8 import ENTROPY_BINS, entropy_threshold

    rng = np.random.default_rng(3)
    shapes = {"normal": lambda n: rng.standard_normal(n), "relu": lambda n: np.maximum(rng.standard_normal(n), 0),
              "heavy": lambda n: rng.laplace(size=n) ** 3,
              "sparse": lambda n: rng.standard_normal(n) * (rng.random(n) < 0.02),
              "growing": lambda n: rng.standard_normal(n) * rng.uniform(1, 4)}
    collector = HistogramCollector("entropy", symmetric=False, num_bins=256, num_quantized_bins=32, percentile=99.99,
                                   scenario="same")
    for _ in range(4):
        collector.collect_value({k: make(20000).astype(np.float32) for k, make in shapes.items()})
    assert collector.histogram_dict["growing"][0].size > 256, "a later batch's wider range grew the bins"
    for name, histogram in collector.histogram_dict.items():
        theirs = collector.get_entropy_threshold(histogram, 32)
        ours = entropy_threshold(histogram, 32)
        assert [float(x) for x in ours] == [float(x) for x in theirs], name
        assert ours[0].dtype == theirs[0].dtype
    big = HistogramCollector("entropy", False, ENTROPY_BINS["num_bins"], ENTROPY_BINS["num_quantized_bins"], 99.99,
                             "same")
    big.collect_value({"x": np.maximum(rng.standard_normal(50000), 0).astype(np.float32)})
    histogram = big.histogram_dict["x"]
    assert [float(x) for x in entropy_threshold(histogram, 128)] == \
        [float(x) for x in big.get_entropy_threshold(histogram, 128)]
