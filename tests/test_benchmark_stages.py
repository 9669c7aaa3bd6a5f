"""`gpux run NAME --benchmark [FILES]` on projects that declare steps: pre-processing, inference and
post-processing timed apart in every measured call, end to end beside them (trained MobileNetV2 and YOLOv8n, real
photos); projects without steps keep the inference-only document; wrong mixes of inputs are one-line errors."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from .conftest import gpux
from .trained import ROOT, mobilenet_v2_onnx, package_file, yolov8_detector_example

QUICK = ("--runs", "15", "--warmup", "2", "--duration", "0")
STAGES = ("preprocess", "inference", "postprocess")


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mobilenet_v2 example's gpux.yml with the trained model (no crops: run on openvino fp32, unverified)."""
    folder = tmp_path_factory.mktemp("mobilenet_v2")
    mobilenet_v2_onnx(folder / "model.onnx")
    text = (ROOT / "examples" / "mobilenet_v2" / "gpux.yml").read_text()
    (folder / "gpux.yml").write_text(text[:text.index("runtime:")])  # steps kept; providers and verify.data left out
    shutil.copy(ROOT / "examples" / "mobilenet_v2" / "imagenet_labels.txt", folder)
    return folder


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return yolov8_detector_example(tmp_path_factory.mktemp("yolov8_detector"))


def staged_row(*args: str) -> dict:
    r = gpux("run", *args, "-p", "cpu", "--strict", *QUICK, "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["results"]
    assert row["status"] == "ok", row
    return row


def assert_split(row: dict) -> None:
    """Every stage summarized over the same measured calls as end to end, and each call at least its stages."""
    stages, raw = row["stages"], row["stage_latencies_ms"]
    e2e = stages["end_to_end"]
    assert e2e == row["stats"] and e2e["count"] >= 15
    for s in STAGES:
        assert stages[s]["count"] == e2e["count"] and len(raw[s]) == e2e["count"], s
        assert 0 < stages[s]["p50"] <= e2e["p50"] and stages[s]["max"] <= e2e["max"], s
    whole = np.asarray(row["latencies_ms"])
    parts = sum(np.asarray(raw[s]) for s in STAGES)
    assert (whole >= parts - 1e-6).all()  # per call: end to end holds the three stages (and the clock reads)


def test_classifier_split_on_a_photo(mobilenet: Path) -> None:
    cat = str(package_file("skimage", "data", "chelsea.png"))
    row = staged_row(str(mobilenet), "--benchmark", cat)
    assert_split(row)
    assert row["inputs"] == {"kind": "files", "files": [cat]} and row["shapes"] == {"x": [1, 3, 224, 224]}
    text = gpux("run", str(mobilenet), "--benchmark", cat, "-p", "cpu", *QUICK)
    assert text.returncode == 0, text.stderr
    head = text.stdout.splitlines()[0].split()
    assert head[3:8] == ["pre", "ms", "infer", "ms", "post"] and "e2e" in head
    assert "ms pre-process" in text.stderr and "ms end to end per image" in text.stderr
    assert f"inputs: {cat}" in text.stderr
    assert row["pipelined"] is None  # one file: nothing to overlap
    coffee = str(package_file("skimage", "data", "coffee.png"))
    many = staged_row(str(mobilenet), "--benchmark", cat, coffee)
    assert many["pipelined"]["files_per_s"] > 0 and many["pipelined"]["batch"] == 8  # [batch, ...]: 8 per call
    assert many["pipelined"]["files"] >= 2


def test_detector_split_on_a_generated_image(detector: Path) -> None:
    row = staged_row(str(detector), "--benchmark")
    assert_split(row)
    assert row["inputs"]["kind"] == "generated" and row["inputs"]["size"] == [320, 320]
    assert row["shapes"] == {"images": [1, 3, 320, 320]}
    r = gpux("run", str(detector), "--benchmark", "-p", "cpu", *QUICK, "--csv")
    assert r.returncode == 0, r.stderr
    [line] = list(csv.DictReader(io.StringIO(r.stdout)))
    assert 0 < float(line["preprocess_p50_ms"]) <= float(line["p50_ms"])
    assert 0 < float(line["postprocess_p50_ms"]) <= float(line["p50_ms"])


def test_without_steps_the_document_is_inference_only(mlp_project: Path) -> None:
    r = gpux("run", str(mlp_project), "--benchmark", *QUICK, "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["results"]
    assert "stages" not in row and "inputs" not in row and row["stats"]["count"] >= 15
    text = gpux("run", str(mlp_project), "--benchmark", *QUICK)
    assert text.stdout.splitlines()[0].split()[3:5] == ["median", "ms"] and "speed" not in text.stderr


def test_tensor_options_measure_inference_only_and_refuse_files(mobilenet: Path, mlp_project: Path) -> None:
    cat = str(package_file("skimage", "data", "chelsea.png"))
    r = gpux("run", str(mobilenet), "--benchmark", "--batch", "2", "-p", "cpu", *QUICK, "--json")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["results"]
    assert "stages" not in row and row["shapes"] == {"x": [2, 3, 224, 224]}
    mixed = gpux("run", str(mobilenet), "--benchmark", cat, "--batch", "2")
    assert mixed.returncode == 2 and "--batch and files both given" in mixed.stderr
    tensors_only = gpux("run", str(mlp_project), "--benchmark", cat)
    assert tensors_only.returncode == 2 and "declares no preprocess" in tensors_only.stderr
    missing = gpux("run", str(mobilenet), "--benchmark", str(mobilenet / "nope.jpg"))
    assert missing.returncode == 2 and "nope.jpg: file not found" in missing.stderr
