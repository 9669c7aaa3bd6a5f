"""Python steps (`python: module:function`) on a trained model end to end: the ppocr_python example (PP-OCRv4's
recognizer from the rapidocr_onnxruntime wheel, PaddleOCR's own resize and decoding in ocr_steps.py) read by
`gpux run`, `gpux serve` and a build's verification, matching rapidocr's reading; an error in the user's code is
theirs, at its file and line."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from .conftest import gpux
from .test_answers_outputs import paddle_reading
from .trained import ROOT, _example

OUT = "softmax_11.tmp_0"
LINES = ("heading.png", "body.png")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ppocr_python")
    for name in ("gpux.yml", "ocr_steps.py"):
        shutil.copy(ROOT / "examples" / "ppocr_python" / name, folder)
    make = _example("ppocr_python")
    try:
        make.export(folder / "model.onnx")
    except make.Missing as exc:
        pytest.skip(str(exc))
    return folder


def test_run_reads_what_rapidocr_reads(example: Path) -> None:
    from PIL import Image

    r = gpux("run", str(example), *(str(example / n) for n in LINES), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    got = [json.loads(line)["answers"][OUT] for line in r.stdout.splitlines()]
    for answer, name in zip(got, LINES, strict=True):
        _, (text, score) = paddle_reading(example / "model.onnx", Image.open(example / name))
        assert answer["text"] == text and abs(answer["score"] - score) < 1e-4, (answer, text, score)
    assert got[0]["text"] == "Region-based segmentation"


def test_serve_answers_each_line_through_the_python_steps(example: Path) -> None:
    import gpux as api

    from .serving import ServerThread, post

    with api.load(example, provider="cpu", strict=True) as session:
        want = [session.predict(str(example / n))[OUT] for n in LINES]
    data = [base64.b64encode((example / n).read_bytes()).decode() for n in LINES]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [2], "data": data}]})
    with ServerThread([example], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/ppocr-python/infer", body)
    assert status == 200, reply
    assert [json.loads(x) for x in json.loads(reply)["outputs"][0]["data"]] == want


def test_a_build_verifies_the_python_answers(example: Path) -> None:
    r = gpux("build", str(example), "-p", "cpu", "--force", "--json")
    assert r.returncode == 0, r.stderr
    verification = json.loads(r.stdout)["targets"][0]["verification"]
    answers = verification["outputs"][OUT]["answers"]
    assert answers == {"kind": "python", "rows": 2, "exact_match": 1.0, "judged": True}, answers


def test_an_error_in_the_users_code_is_named_at_its_line(example: Path, tmp_path: Path) -> None:
    for name in ("gpux.yml", "model.onnx", "charset.txt", "lines"):
        (tmp_path / name).symlink_to(example / name)
    code = (example / "ocr_steps.py").read_text()
    broken = code.replace("    best, p = row.argmax(axis=1), row.max(axis=1)\n",
                          "    best, p = row.argmax(axis=1), row.max(axis=1)\n    raise ValueError('no text here')\n")
    assert broken != code
    (tmp_path / "ocr_steps.py").write_text(broken)
    line = next(n for n, x in enumerate(broken.splitlines(), 1) if "no text here" in x)
    r = gpux("run", str(tmp_path), str(example / "heading.png"), "-p", "cpu")
    assert r.returncode == 1, r.stderr
    assert f"the python step ocr_steps:text raised: ocr_steps.py:{line}: ValueError: no text here" in r.stderr
    assert "Traceback" not in r.stderr
    (tmp_path / "gpux.yml").unlink()
    (tmp_path / "gpux.yml").write_text((example / "gpux.yml").read_text().replace("ocr_steps:text", "ocr_steps:txt"))
    r = gpux("run", str(tmp_path), str(example / "heading.png"), "-p", "cpu")
    assert r.returncode == 3 and "postprocess.python: cannot import ocr_steps:txt" in r.stderr, r.stderr
