"""Images in, answers out: declared preprocess/postprocess on trained models and real photos (torchvision's
ImageNet MobileNetV2, a YOLOv8n detector from the nudenet wheel, skimage's photos), through `gpux run NAME FILE`
and `Session.predict`; bad files and misdeclared steps give one-line errors."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpux.answers.post import decode_boxes, softmax, topk
from gpux.answers.pre import image_tensor
from gpux.config.steps import Boxes, ImageSteps

from .conftest import gpux
from .trained import imagenet_crops, mobilenet_v2_example, package_file, prebuilt, yolov8_detector_example

CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian cat
MEAN, STD = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)


def photo(name: str) -> Path:
    return package_file("skimage", "data", name)


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mobilenet_v2 example as committed (its gpux.yml) with the model and crops make_model.py writes, built for
    openvino (its int8 build is tests/test_answer_agreement.py's subject, made once per session)."""
    return prebuilt(mobilenet_v2_example(tmp_path_factory.mktemp("mobilenet_v2")), "openvino")


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prebuilt(yolov8_detector_example(tmp_path_factory.mktemp("yolov8_detector")), "cpu")  # once a session


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def test_classifier_answers_a_cat_photo_and_a_folder(mobilenet: Path, tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    shutil.copy(photo("chelsea.png"), folder / "cat.png")
    (folder / "notes.txt").write_text("not a photo")  # skipped: a folder gives its image files
    r = gpux("run", str(mobilenet), str(photo("chelsea.png")), str(photo("astronaut.png")), str(folder),
             "-p", "openvino", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    lines = json_lines(r.stdout)
    assert [Path(x["file"]).name for x in lines] == ["chelsea.png", "astronaut.png", "cat.png"]
    cat = lines[0]["answers"]["logits"]
    assert len(cat) == 5 and cat[0]["index"] in CATS, cat
    assert cat[0]["label"] in ("tabby", "tiger cat", "Persian cat", "Siamese cat", "Egyptian cat"), cat
    scores = [a["score"] for a in cat]
    assert scores == sorted(scores, reverse=True) and 0.3 < sum(scores) <= 1 + 1e-5  # softmax probabilities
    assert lines[2]["answers"] == lines[0]["answers"]
    assert lines[1]["answers"]["logits"][0]["index"] not in CATS
    text = gpux("run", str(mobilenet), str(photo("chelsea.png")), "-p", "openvino")
    assert text.returncode == 0, text.stderr
    assert f"logits: {cat[0]['label']} {cat[0]['score']:.4f}" in text.stdout


def test_image_steps_match_the_hand_written_torchvision_path() -> None:
    """Resize the shorter side to 256 (torchvision's size rule), centre crop 224, /255, ImageNet mean/std, CHW."""
    from PIL import Image

    steps = ImageSteps(resize={"shorter": 256}, crop=224, scale="1/255", mean=list(MEAN), std=list(STD))
    got, placement = image_tensor(photo("chelsea.png"), steps, "float32", "chelsea.png")
    img = Image.open(photo("chelsea.png")).convert("RGB")  # 451 x 300
    w, h = int(256 * img.width / img.height), 256
    img = img.resize((w, h), Image.Resampling.BILINEAR)
    x, y = round((w - 224) / 2), round((h - 224) / 2)
    want = ((np.asarray(img.crop((x, y, x + 224, y + 224)), np.float32) / 255 - MEAN) / STD).transpose(2, 0, 1)
    assert got.shape == (1, 3, 224, 224) and got.dtype == np.float32
    np.testing.assert_allclose(got[0], want, atol=1e-5)
    assert (placement.width, placement.height, placement.offset_x) == (451, 300, -x)
    plain = steps.model_copy(update={"mean": None, "std": None})
    rgb, _ = image_tensor(photo("chelsea.png"), plain, "float32", "c")
    bgr, _ = image_tensor(photo("chelsea.png"), plain.model_copy(update={"color": "bgr"}), "float32", "c")
    np.testing.assert_array_equal(bgr[0], rgb[0, ::-1])
    nhwc, _ = image_tensor(photo("chelsea.png"), steps.model_copy(update={"layout": "nhwc", "mean": None,
                                                                          "std": None, "scale": None}), "uint8", "c")
    assert nhwc.shape == (1, 224, 224, 3) and nhwc.dtype == np.uint8  # integer inputs: pixels as they are
    np.testing.assert_array_equal(nhwc[0], np.asarray(img.crop((x, y, x + 224, y + 224))))


def test_predict_takes_a_path_bytes_a_pil_image_an_array_or_a_tensor(mobilenet: Path) -> None:
    from PIL import Image

    import gpux as api

    path = photo("chelsea.png")
    with api.load(mobilenet, provider="openvino") as session:
        answers = [session.predict(x)["logits"] for x in
                   (str(path), path.read_bytes(), Image.open(path), np.asarray(Image.open(path).convert("RGB")))]
        tensor = session.predict(imagenet_crops(per_photo=1)[1:2])  # a ready [1, 3, 224, 224] tensor: per row
        listed = session.predict([path, path])
    assert answers[0][0]["index"] in CATS
    for other in answers[1:]:
        assert [a["index"] for a in other] == [a["index"] for a in answers[0]]
        np.testing.assert_allclose([a["score"] for a in other], [a["score"] for a in answers[0]], rtol=1e-5)
    assert len(tensor) == 1 and tensor[0]["logits"][0]["index"] in CATS  # the example's own chelsea crop
    assert [x["logits"] for x in listed] == [answers[0], answers[0]]


def face(answers: dict) -> dict:
    faces = [a for a in answers["output0"] if a["label"] == "FACE_FEMALE"]
    assert faces, answers
    return faces[0]


def test_detector_finds_the_astronauts_face_in_her_photo(detector: Path) -> None:
    r = gpux("run", str(detector), str(photo("astronaut.png")), "-p", "cpu", "--strict", "--json")
    assert r.returncode == 0, r.stderr
    (line,) = json_lines(r.stdout)
    box = face(line["answers"])
    x1, y1, x2, y2 = box["box"]
    assert box["score"] > 0.5 and box["index"] == 1
    assert 0 <= x1 < x2 <= 512 and 0 <= y1 < y2 <= 512  # in the 512 x 512 photo's own pixels
    assert 150 < (x1 + x2) / 2 < 300 and 50 < (y1 + y2) / 2 < 200 and 60 < x2 - x1 < 160  # her face


def test_boxes_map_back_through_letterbox_exif_and_jpeg_draft(detector: Path) -> None:
    from PIL import Image

    import gpux as api

    upright = Image.open(photo("astronaut.png")).convert("RGB")
    canvas = Image.new("RGB", (900, 600), (40, 40, 40))
    canvas.paste(upright, (300, 50))  # padded wide: a different letterbox
    turned = io.BytesIO()  # stored on its side, EXIF orientation 6 (rotate 90° clockwise to view)
    exif = Image.Exif()
    exif[0x0112] = 6
    upright.transpose(Image.Transpose.ROTATE_90).save(turned, "JPEG", quality=95, exif=exif)
    big = io.BytesIO()  # 4x larger JPEG: decoded at a reduced scale (draft), boxes in its own pixels
    upright.resize((2048, 2048), Image.Resampling.BICUBIC).save(big, "JPEG", quality=95)
    with api.load(detector, provider="cpu") as session:
        base = np.array(face(session.predict(upright))["box"])
        padded = np.array(face(session.predict(canvas))["box"])
        rotated = np.array(face(session.predict(turned.getvalue()))["box"])
        large = np.array(face(session.predict(big.getvalue()))["box"])
    np.testing.assert_allclose(padded, base + np.array([300, 50, 300, 50]), atol=6)
    np.testing.assert_allclose(rotated, base, atol=6)
    np.testing.assert_allclose(large / 4, base, atol=6)


def test_nms_keeps_the_best_box_per_object_and_class() -> None:
    # columns: anchors; rows: cx, cy, w, h, score of class 0, score of class 1
    pred = np.array([[50, 52, 50, 200], [50, 50, 50, 200], [40, 40, 40, 30], [40, 40, 40, 30],
                     [0.9, 0.8, 0.1, 0.2], [0.0, 0.1, 0.7, 0.1]], np.float32)
    boxes, scores, classes = decode_boxes(pred, Boxes(score=0.25, iou=0.45))
    assert classes.tolist() == [0, 1]  # the overlapping class-0 box is suppressed, class 1's overlap is not
    np.testing.assert_allclose(scores, [0.9, 0.7])
    np.testing.assert_allclose(boxes[0], [30, 30, 70, 70])
    assert decode_boxes(pred, Boxes(score=0.25, iou=0.95))[2].tolist() == [0, 0, 1]
    assert decode_boxes(pred, Boxes(score=0.95))[0].shape == (0, 4)
    best = topk(softmax(np.array([1.0, 3.0, 2.0])), 2, ["a", "b", "c"])
    assert [(a["label"], a["index"]) for a in best] == [("b", 1), ("c", 2)]
    assert best[0]["score"] == pytest.approx(np.exp(3) / np.exp([1, 2, 3]).sum())


@pytest.mark.parametrize("kind", ["truncated", "text", "missing"])
def test_a_bad_file_is_one_line_naming_it(detector: Path, tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "photo.png"
    if kind == "truncated":
        data = photo("astronaut.png").read_bytes()
        bad.write_bytes(data[:len(data) // 3])
    elif kind == "text":
        bad.write_text("name,score\ncat,1\n")
    r = gpux("run", str(detector), str(bad), "-p", "cpu")
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr, r.stderr


def variant(detector: Path, tmp_path: Path, old: str, new: str) -> Path:
    shutil.copy(detector / "model.onnx", tmp_path / "model.onnx")
    (tmp_path / "photos.npz").symlink_to(detector / "photos.npz")
    text = (detector / "gpux.yml").read_text()
    assert old in text
    (tmp_path / "gpux.yml").write_text(text.replace(old, new))
    return tmp_path


def test_labels_that_do_not_fit_the_output_are_config_errors(detector: Path, tmp_path: Path) -> None:
    folder = variant(detector, tmp_path, "labels: [FEMALE_GENITALIA_COVERED, ", "labels: [")
    r = gpux("validate", str(folder / "gpux.yml"))
    assert r.returncode == 3 and "17 labels for 18 classes (shape [1, 22, 2100])" in r.stderr, r.stderr
    assert "gpux.yml:17:" in r.stderr
    # a labels file, the shape read from the model: found before anything is built
    text = (detector / "gpux.yml").read_text().replace("    shape: [1, 22, 2100]", "")
    start = text.index("    labels: [")
    end = text.index("]", start) + 1
    (folder / "gpux.yml").write_text(text[:start] + "    labels: classes.txt" + text[end:])
    (folder / "classes.txt").write_text("\n".join(f"class{i}" for i in range(20)) + "\n")
    r = gpux("run", str(folder), str(photo("astronaut.png")), "-p", "cpu")
    assert r.returncode == 3 and "20 labels for 18 classes (output0 has 22 on axis 1" in r.stderr, r.stderr
    assert not (folder / ".gpux").exists()


@pytest.mark.parametrize(("old", "new", "said"), [
    ("resize: {letterbox: 320, fill: 114}", "resize: {letterbox: 320, shorter: 300}",
     "expected exactly one of shorter, height, width, exact, letterbox, side_limit; got shorter, letterbox"),
    ("color: rgb", "colour: rgb",
     "gpux.yml:12:52 inputs.images.preprocess.image.colour: unknown field (did you mean 'color'?)"),
    ("scale: 1/255", "scale: 1/255, mean: [0.5, 0.5]", "2 values for 3 channel(s) (rgb)"),
    ("letterbox: 320,", "letterbox: 256,", "the steps give 256x256 images, shape [1, 3, 320, 320] takes 320x320"),
    ("color: rgb", "color: gray", "color gray gives 1 channel(s)"),
    ("iou: 0.45,", "iou: 0.45, image: pixels,", "'pixels' is not an image input (inputs with preprocess: images)"),
])
def test_misdeclared_steps_are_errors_at_their_line(detector: Path, tmp_path: Path, old: str, new: str,
                                                   said: str) -> None:
    r = gpux("validate", str(variant(detector, tmp_path, old, new) / "gpux.yml"))
    assert r.returncode == 3 and said in r.stderr, r.stderr
    assert "gpux.yml:" in r.stderr and "Traceback" not in r.stderr


def test_without_steps_outputs_pass_through_and_files_are_refused(detector: Path, tmp_path: Path) -> None:
    import gpux as api

    text = (detector / "gpux.yml").read_text()
    folder = variant(detector, tmp_path, "outputs:", "")
    (folder / "gpux.yml").write_text(text[:text.index("outputs:")])  # no postprocess: the output as it is
    with api.load(folder, provider="cpu") as session:
        out = session.predict(photo("astronaut.png"))
    assert isinstance(out["output0"], np.ndarray) and out["output0"].shape == (22, 2100)
    (folder / "gpux.yml").write_text(text[:text.index("    preprocess:")])  # no preprocess: tensors only
    r = gpux("run", str(folder), str(photo("astronaut.png")), "-p", "cpu")
    assert r.returncode == 2 and "declares no preprocess for its inputs" in r.stderr, r.stderr


BLOCK_PIL = """
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "PIL":
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from gpux.cli.main import main
main(sys.argv[1:])
"""


def test_without_pillow_the_error_names_the_install_command(detector: Path) -> None:
    r = subprocess.run([sys.executable, "-c", BLOCK_PIL, "run", str(detector), str(photo("astronaut.png")), "-p",
                        "cpu"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 4, r.stderr
    assert "PIL.Image is not installed" in r.stderr and "pip install 'gpux-ml[images]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
