"""Task-level verification: where an output declares post-processing, the answers (top-k labels, boxes after NMS,
text) of every build are compared with the FP32 reference's on the declared data, reported in `gpux build`, its
JSON and `inspect`, and judged by thresholds per precision that `verify.outputs.NAME` overrides. On trained models
and real photos: torchvision's MobileNetV2 and nudenet's YOLOv8n (the examples)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpux.quality.agreement import box_agreement, edit_distance, text_agreement, topk_agreement
from gpux.quality.metrics import DEFAULTS

from .conftest import gpux
from .trained import ROOT, mobilenet_v2_example, yolov8_detector_example


def test_text_agreement_counts_exact_strings_and_character_errors() -> None:
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "abc") == 3 and edit_distance("ab", "ab") == 0
    same = text_agreement(["hello", "world"], ["hello", "world"])
    assert same == {"rows": 2, "exact_match": 1.0, "cer": 0.0, "confident_rows": 2, "exact_confident": 1.0}
    off = text_agreement(["hello", "world", "gpux"], ["hallo", "world", "gpu"])  # 1 substitution, 1 deletion
    assert off["exact_match"] == pytest.approx(1 / 3) and off["cer"] == pytest.approx(2 / 14)
    # only the texts the reference reads confidently are judged by exact match
    hesitant = text_agreement([("hello", False), ("world", True)], [("hallo", True), ("world", True)])
    assert hesitant["exact_match"] == 0.5 and hesitant["confident_rows"] == 1 and hesitant["exact_confident"] == 1.0
    assert text_agreement([""], ["x"])["cer"] == 1.0 and text_agreement([""], [""])["cer"] == 0.0


def boxes(*rows: tuple[float, float, float, float, float, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(boxes [N, 4], scores [N], classes [N], the confident score) as agreement.decode_boxes gives them."""
    a = np.array([r[:4] for r in rows], np.float32).reshape(-1, 4)
    return a, np.array([r[4] for r in rows], np.float32), np.array([r[5] for r in rows], np.int64), 0.5


def test_ctc_outputs_compare_as_decoded_class_sequences() -> None:
    """A ctc output's rows decode greedily (repeats collapsed, blank dropped); one flipped step is one edit."""
    from gpux.config.steps import Postprocess
    from gpux.quality.agreement import answer_kind, decode_text

    spec = Postprocess.model_validate({"ctc": {"charset": ["a", "b", "c"], "blank": 0}})
    assert answer_kind(spec) == "text"
    steps = [1, 1, 0, 2, 3, 3, 0, 1]  # -> a b c a
    row = np.eye(4, dtype=np.float32)[steps]
    flipped = row.copy()
    flipped[3] = np.eye(4, dtype=np.float32)[3]  # b -> c, merged with the next c: a c a
    ref, got = decode_text(row, spec), decode_text(flipped, spec)
    assert len(ref[0]) == 4 and len(got[0]) == 3 and ref[1] and got[1]
    assert text_agreement([ref, ref], [ref, got]) == {"rows": 2, "exact_match": 0.5, "cer": 1 / 8,
                                                      "confident_rows": 2, "exact_confident": 0.5}
    unsure = row.copy()
    unsure[3] = [0.0, 0.0, 0.55, 0.45]  # one character read at 0.55 stays confident; at 0.45 it does not
    assert decode_text(unsure, spec) == (ref[0], True)
    unsure[3] = [0.1, 0.0, 0.45, 0.45]
    assert decode_text(unsure, spec)[1] is False


def test_boxes_match_by_label_and_iou_greedily_by_score() -> None:
    face, hand = (10, 10, 50, 50, 0.9, 1), (100, 100, 140, 160, 0.6, 3)
    assert box_agreement([boxes(face, hand)], [boxes(face, hand)])["f1"] == 1.0
    nudged = (12, 10, 52, 50, 0.8, 1)  # IoU 38*40 / (2*1600 - 1520) = 0.905
    r = box_agreement([boxes(face, hand)], [boxes(nudged)])
    assert r["precision"] == 1.0 and r["recall"] == 0.5 and r["f1"] == pytest.approx(2 / 3)
    assert r["mean_iou"] == pytest.approx(38 * 40 / (2 * 1600 - 38 * 40))
    relabeled = (10, 10, 50, 50, 0.9, 2)  # the same place, another label: no match
    far = (30, 30, 70, 70, 0.9, 1)  # IoU 400 / 2800 < 0.5
    assert box_agreement([boxes(face)], [boxes(relabeled, far)]) | {"mean_iou": None} == {
        "rows": 1, "reference_boxes": 1, "artifact_boxes": 2, "matched": 0, "match_iou": 0.5, "precision": 0.0,
        "recall": 0.0, "f1": 0.0, "mean_iou": None, "confident_reference_boxes": 1, "confident_artifact_boxes": 2,
        "recall_confident": 0.0, "precision_confident": 0.0}
    # confident boxes (score >= 0.5 here): a hesitant reference box missed, a hesitant artifact box added, count
    # against F1 but not against the confident rates
    shy = (200, 200, 240, 240, 0.3, 1)
    r = box_agreement([boxes(face, shy)], [boxes(face, (300, 300, 340, 340, 0.3, 2))])
    assert r["f1"] == 0.5 and r["recall_confident"] == 1.0 and r["precision_confident"] == 1.0
    assert r["confident_reference_boxes"] == 1 and r["confident_artifact_boxes"] == 1
    # two artifact boxes on one reference box: the better-scored one matches, the other is a false positive
    twice = box_agreement([boxes(face)], [boxes((10, 10, 50, 50, 0.5, 1), (11, 10, 51, 50, 0.7, 1))])
    assert twice["matched"] == 1 and twice["precision"] == 0.5 and twice["mean_iou"] < 1.0
    assert box_agreement([boxes()], [boxes()])["f1"] == 1.0  # nothing to find, nothing found
    assert box_agreement([boxes()], [boxes(face)])["f1"] == 0.0  # a box the reference does not see


def test_topk_agreement_compares_the_best_label_and_the_set() -> None:
    ref = [(3, [(7, 0.6), (2, 0.3), (5, 0.1)]), (3, [(1, 0.5), (4, 0.5), (0, 0.0)])]  # the 2nd row is tied
    got = [(3, [(7, 0.5), (5, 0.3), (9, 0.2)]), (3, [(4, 0.6), (1, 0.4), (0, 0.0)])]
    assert topk_agreement(ref, got) == {"k": 3, "rows": 1, "top1": 1.0, "topk_overlap": pytest.approx(2 / 3)}


def test_answer_thresholds_are_stricter_at_higher_precision() -> None:
    for key in ("min_topk_overlap", "min_box_f1", "min_box_iou", "min_exact_match"):
        assert DEFAULTS["fp32"][key] >= DEFAULTS["fp16"][key] >= DEFAULTS["bf16"][key] >= DEFAULTS["int8"][key]
    assert DEFAULTS["int8"]["min_box_f1"] == 0.9 and DEFAULTS["fp16"]["min_box_f1"] == 0.95
    assert DEFAULTS["fp32"]["max_cer"] <= DEFAULTS["fp16"]["max_cer"] <= DEFAULTS["int8"]["max_cer"]


# ---- trained models, real photos ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return yolov8_detector_example(tmp_path_factory.mktemp("yolov8_detector"))


def with_blocks(folder: Path, text: str) -> None:
    """The example's gpux.yml with its verify: block (its last) replaced by `text`."""
    yml = folder / "gpux.yml"
    yml.write_text((ROOT / "examples" / folder.name.rstrip("0123456789") / "gpux.yml").read_text()
                   .split("\nverify:")[0] + "\n" + text)


def answers_of(stdout: str) -> dict:
    return json.loads(stdout)["targets"][-1]["verification"]["outputs"]


@pytest.mark.slow
def test_detector_builds_report_box_agreement_and_a_broken_int8_fails_by_it(detector: Path) -> None:
    with_blocks(detector, "verify: {data: photos.npz}\nproviders:\n  cpu: {precision: fp16}\n")
    r = gpux("build", str(detector), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    out = answers_of(r.stdout)["output0"]
    boxes_ = out["answers"]
    assert boxes_["kind"] == "boxes" and boxes_["judged"] and boxes_["reference_boxes"] >= 50, boxes_
    assert boxes_["f1"] >= 0.95 and boxes_["mean_iou"] > 0.95 and "top1" not in out  # no argmax over anchors
    text = gpux("build", str(detector), "-p", "cpu")
    assert f"box F1 {boxes_['f1']:.3f} ({boxes_['reference_boxes']} boxes" in text.stdout, text.stdout
    shown = gpux("inspect", str(detector))
    assert "box F1" in shown.stdout, shown.stdout
    # static int8 collapses the class scores: verification names the answers it breaks (slices judged apart)
    with_blocks(detector, "verify:\n  data: photos.npz\n  outputs: {output0: {min_slice_cosine: 0}}\n"
                             "providers:\n  cpu: {precision: int8, quantization: static, calibration: photos.npz}\n")
    r = gpux("build", str(detector), "-p", "cpu")
    assert r.returncode == 1, r.stderr
    assert "output0: box F1 0." in r.stderr and "< min_box_f1 0.9 (answers after NMS: " in r.stderr, r.stderr
    assert "slices" not in r.stderr


@pytest.mark.slow
def test_detector_answers_on_generated_inputs_are_recorded_not_judged(detector: Path, tmp_path: Path) -> None:
    shutil.copy(detector / "model.onnx", tmp_path / "model.onnx")
    (tmp_path / "gpux.yml").write_text((detector / "gpux.yml").read_text().split("\nverify:")[0] + "\n")
    r = gpux("build", str(tmp_path), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert answers_of(r.stdout)["output0"]["answers"]["judged"] is False


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mobilenet_v2_example(tmp_path_factory.mktemp("mobilenet_v2"))


@pytest.mark.slow
def test_classifier_int8_is_judged_on_rows_enough_to_show_its_floor(mobilenet: Path) -> None:
    """The example's static int8 passed on its 11 held-out crops without showing anything: the rows derived from
    them show it changes confident classes far more often than 1 in 100."""
    r = gpux("build", str(mobilenet), "-p", "cpu")  # the example: static int8, per channel, derive: {rows: 700}
    assert r.returncode == 1, r.stderr
    assert "calibration hold-out (11 of 44 samples, not calibrated on) + 689 derived from them" in r.stderr, r.stderr
    assert re.search(r"logits: confident top-1 \d+ of \d+ rows \([\d.]+ %\): the rows show at most [\d.]+ % "
                     r"\(95% one-sided\), floor 99 %", r.stderr), r.stderr
    yml = mobilenet / "gpux.yml"
    yml.write_text("\n".join(line for line in yml.read_text().splitlines() if "derive:" not in line and
                             "to show a 99 % floor" not in line) + "\n")
    r = gpux("build", str(mobilenet), "-p", "cpu", "--json")  # 11 rows: nothing it sees fails, nothing is shown
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)["targets"][-1]["verification"]
    assert v["status"] == "unverified" and v["rows"] == 11, v
    assert re.fullmatch(r"\d+ judged rows \(logits: [a-z0-9 -]+\) show at most [\d.]+ %; about \d+ more are needed "
                        r"for the 99 % floor", v["unverified"]), v["unverified"]
    answers = v["outputs"]["logits"]["answers"]
    assert answers["kind"] == "topk" and answers["k"] == 5 and answers["rows"] == 11 and answers["judged"]
    shown = gpux("inspect", str(mobilenet))
    assert "UNVERIFIED at int8" in shown.stdout and "shown >= " in shown.stdout, shown.stdout
