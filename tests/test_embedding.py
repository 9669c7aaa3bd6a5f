"""Embeddings (`postprocess: {embedding: {normalize: true}}`) on a head built in the test (an image flattened and
projected by a seeded matrix, onnx.helper): `gpux run` and `Session.predict` answer each file's vector of unit
length (the projection computed here with numpy), `gpux serve` answers a batch as one FP32 tensor and says so in
its metadata, and verification judges each row's cosine with the reference's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .conftest import gpux, write

CONFIG = """\
name: embedder
version: 1.0.0
model: {source: model.onnx}
inputs:
  image:
    dtype: float32
    shape: [batch, 3, 8, 8]
    preprocess:
      image: {resize: {exact: 8}, scale: 1/255}
outputs:
  vector:
    dtype: float32
    shape: [batch, 16]
    postprocess:
      embedding: {normalize: true}
providers:
  cpu: {precision: fp32}
verify: {data: data.npz}
"""
WEIGHTS = np.random.default_rng(7).normal(size=(192, 16)).astype(np.float32)
FILES = ("a.png", "b.png")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from PIL import Image

    folder = tmp_path_factory.mktemp("embedder")
    nodes = [helper.make_node("Flatten", ["image"], ["flat"], axis=1), helper.make_node("MatMul", ["flat", "w"],
                                                                                        ["vector"])]
    graph = helper.make_graph(nodes, "embedder",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
                              [helper.make_tensor_value_info("vector", TensorProto.FLOAT, ["batch", 16])],
                              [numpy_helper.from_array(WEIGHTS, "w")])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), folder / "model.onnx")
    write(folder / "gpux.yml", CONFIG)
    rng = np.random.default_rng(1)
    for name in FILES:
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / name)
    np.savez(folder / "data.npz", image=rng.uniform(0, 1, (30, 1, 3, 8, 8)).astype(np.float32))
    return folder


def expected(path: Path) -> Any:
    """The vector computed here: the image's pixels / 255 (CHW) times the matrix, divided by its length."""
    from PIL import Image

    v = (np.asarray(Image.open(path).convert("RGB"), np.float64).transpose(2, 0, 1).reshape(-1) / 255) @ WEIGHTS
    return v / np.linalg.norm(v)


def test_run_and_predict_answer_unit_vectors(project: Path) -> None:
    import gpux as api

    r = gpux("run", str(project), *(str(project / n) for n in FILES), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    vectors = [json.loads(line)["answers"]["vector"]["vector"] for line in r.stdout.splitlines()]
    for v, name in zip(vectors, FILES, strict=True):
        assert np.allclose(v, expected(project / name), atol=1e-5)
    with api.load(project, provider="cpu", strict=True) as session:
        got = session.predict(str(project / FILES[0]))["vector"]["vector"]
    assert np.allclose(got, vectors[0], atol=1e-6)
    text = gpux("run", str(project), str(project / FILES[0]), "-p", "cpu")
    assert "vector: vector of 16 [" in text.stdout, text.stderr


def test_serve_answers_fp32_vectors_and_says_so(project: Path) -> None:
    import base64

    from .serving import ServerThread, post

    data = [base64.b64encode((project / n).read_bytes()).decode() for n in FILES]
    body = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2], "data": data}]})
    with ServerThread([project], provider="cpu") as server:
        status, _, reply = post(server.http, "/v2/models/embedder/infer", body)
        _, _, meta = post(server.http, "/v2/models/embedder", "", method="GET")
    assert status == 200, reply
    out = json.loads(reply)["outputs"][0]
    assert out["datatype"] == "FP32" and out["shape"] == [2, 16]
    assert np.allclose(np.reshape(out["data"], (2, 16)), [expected(project / n) for n in FILES], atol=1e-5)
    described = json.loads(meta)["outputs"][0]
    assert described["datatype"] == "FP32" and described["shape"] == [-1, 16], described


def test_verification_judges_each_rows_cosine(project: Path) -> None:
    from gpux.quality.agreement import vector_agreement

    r = gpux("build", str(project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    found = r.stdout
    assert '"kind": "embedding"' in found and '"close": 1.0' in found, found[:3000]
    rng = np.random.default_rng(3)
    ref = rng.normal(size=(10, 16))
    turned = ref.copy()
    turned[:3] += rng.normal(size=(3, 16)) * 2  # three rows turned well away from their reference
    record = vector_agreement(list(ref), list(turned))
    assert record["rows"] == 10 and record["close"] == pytest.approx(0.7) and record["least_cosine"] < 0.9
