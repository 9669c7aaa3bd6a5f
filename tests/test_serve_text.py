"""Texts in, answers out over `gpux serve` for models whose `text:` preprocess fills several inputs (ids, attention
mask, token type ids): the tiny transformers checkpoints of tests/hub_checkpoints.py made into projects by `gpux
init` (a sentence encoder, its embedding kind, a text classifier, a token classifier), served in-process; texts sent
as one BYTES input named as the text input (OIP JSON strings, the binary extension, gRPC) answer what
`session.predict` and `gpux run NAME "a sentence"` answer; the int64 tensors still work; metadata shows the BYTES
input; bad texts are 400 / INVALID_ARGUMENT naming the input."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from .hub_checkpoints import checkpoint
from .serving import ServerThread, error_of, post
from .test_hub import Hub

pytest.importorskip("transformers")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

TEXTS = ["the weather is lovely today", "a bad movie", "where is the nearest train station in Paris"]
SAME_LENGTH = ["a good film", "a bad movie", "a good movie"]  # one token count: one batch
FILLED = ["attention_mask", "token_type_ids"]
VECTOR = "embedding: {dtype: float32, shape: [batch, 32]}"


@pytest.fixture(scope="module")
def text_hub(tmp_path_factory: pytest.TempPathFactory) -> Hub:
    """Projects `gpux init` writes from three local checkpoints, built once: st (its embedding a tensor, as init
    writes it), vec (the same encoder with the embedding kind declared), cls (labels), ner (entities)."""
    hub = Hub(tmp_path_factory.mktemp("serve_text"))
    for name, kind, task in (("st", "st", "feature-extraction"), ("cls", "cls", "text-classification"),
                             ("ner", "tok", "token-classification")):
        checkpoint(hub.root / f"{name}-checkpoint", kind, seed=4)
        code, _, err = hub.run("init", str(hub.root / f"{name}-checkpoint"), "--task", task, "--folder",
                               str(hub.root / name))
        assert code == 0, err
    shutil.copytree(hub.root / "st", hub.root / "vec")
    yml = hub.root / "vec" / "gpux.yml"
    text = yml.read_text().replace("name: st-checkpoint", "name: vec")
    yml.write_text(text.replace(VECTOR, VECTOR[:-1] + ", postprocess: {embedding: {normalize: true}}}"))
    for name in ("st", "vec", "cls", "ner"):
        code, _, err = hub.run("build", str(hub.root / name), "--provider", "cpu")
        assert code == 0, err
    return hub


@pytest.fixture(scope="module")
def served(text_hub: Hub) -> Iterator[tuple[ServerThread, dict[str, str]]]:
    """The four projects served on cpu, and the name each serves under."""
    names = {p: re.search(r"^name: (\S+)", (text_hub.root / p / "gpux.yml").read_text(), re.M).group(1)  # type: ignore[union-attr]
             for p in ("st", "vec", "cls", "ner")}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in text_hub.env.items():
            mp.setenv(k, v)
        with ServerThread([text_hub.root / p for p in names], provider="cpu") as server:
            yield server, names


@pytest.fixture(scope="module")
def predicted(text_hub: Hub, served: Any) -> dict[str, list[Any]]:
    """`session.predict` of each text, per project (its answers per output)."""
    import gpux

    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in text_hub.env.items():
            mp.setenv(k, v)
        for project in ("st", "vec", "cls", "ner"):
            with gpux.load(text_hub.root / project, provider="cpu") as session:
                out[project] = [session.predict(t) for t in TEXTS + SAME_LENGTH]
    return out


def json_body(texts: list[str], **extra: Any) -> str:
    return json.dumps({"inputs": [{"name": "input_ids", "datatype": "BYTES", "shape": [len(texts)], "data": texts}],
                       **extra})


def infer_json(server: ServerThread, model: str, body: str) -> tuple[int, Any]:
    status, _, reply = post(server.http, f"/v2/models/{model}/infer", body)
    return status, json.loads(reply)


def output(reply: dict[str, Any], name: str) -> dict[str, Any]:
    return next(o for o in reply["outputs"] if o["name"] == name)


def answers_of(entry: dict[str, Any]) -> list[Any]:
    """A BYTES output's JSON texts, read."""
    assert entry["datatype"] == "BYTES", entry
    return [json.loads(t) for t in entry["data"]]


def test_metadata_describes_the_text_input_not_the_int64_inputs(served: Any) -> None:
    server, names = served
    for project in ("st", "cls", "ner"):
        status, _, body = post(server.http, f"/v2/models/{names[project]}", "", method="GET")
        assert status == 200, body
        [described] = json.loads(body)["inputs"]
        assert described == {"name": "input_ids", "datatype": "BYTES", "shape": [-1], "parameters": {
            "content_type": "text", "tensor_datatype": "INT64", "tensor_shape": [-1, -1], "fills": FILLED}}
    meta = grpcclient.InferenceServerClient(server.grpc).get_model_metadata(names["cls"], as_json=True)
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [("input_ids", "BYTES", ["-1"])]


def test_texts_over_json_answer_what_predict_answers(served: Any, predicted: dict[str, list[Any]]) -> None:
    server, names = served
    status, reply = infer_json(server, names["cls"], json_body(TEXTS))
    assert status == 200, reply
    got = answers_of(output(reply, "logits"))
    want = [p["logits"] for p in predicted["cls"][:3]]
    assert [[a["label"] for a in g] for g in got] == [[a["label"] for a in w] for w in want]
    assert np.allclose([[a["score"] for a in g] for g in got], [[a["score"] for a in w] for w in want], atol=1e-5)
    status, reply = infer_json(server, names["ner"], json_body(TEXTS))
    assert status == 200, reply
    entities = answers_of(output(reply, "logits"))
    want = [p["logits"] for p in predicted["ner"][:3]]
    assert [[(e["label"], e["start"], e["end"], e["text"]) for e in g] for g in entities] == \
        [[(e["label"], e["start"], e["end"], e["text"]) for e in w] for w in want]
    assert all(e["text"] == t[e["start"]:e["end"]] for g, t in zip(entities, TEXTS, strict=True) for e in g)
    assert any(entities)


def test_embeddings_come_back_as_fp32_vectors(served: Any, predicted: dict[str, list[Any]]) -> None:
    """The encoder as init writes it (a plain output: its tensor) and with the embedding kind (its FP32 vectors):
    each text's row is its own predict's vector, one text at a time or the three of one length batched."""
    server, names = served
    for texts, rows in ((TEXTS, slice(0, 3)), (SAME_LENGTH, slice(3, 6))):
        for project in ("st", "vec"):
            status, reply = infer_json(server, names[project], json_body(texts))
            assert status == 200, reply
            entry = output(reply, "embedding")
            assert entry["datatype"] == "FP32" and entry["shape"] == [3, 32], entry
            got = np.reshape(entry["data"], (3, 32))
            want = [np.ravel(p["embedding"]["vector"] if project == "vec" else p["embedding"])
                    for p in predicted[project][rows]]
            assert np.allclose(got, want, atol=1e-5), project
            assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-4)
    assert not np.allclose(got[0], got[1], atol=1e-3)  # texts told apart


def test_same_length_texts_run_as_one_batch(served: Any) -> None:
    server, names = served
    client = httpclient.InferenceServerClient(server.http)
    before = client.get_inference_statistics(names["vec"])["model_stats"][0]
    status, _ = infer_json(server, names["vec"], json_body(SAME_LENGTH))
    assert status == 200
    after = client.get_inference_statistics(names["vec"])["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 3
    assert after["execution_count"] - before["execution_count"] == 1


def _texts_input(module: Any, texts: list[str], binary: bool | None = None) -> Any:
    item = module.InferInput("input_ids", [len(texts)], "BYTES")
    array = np.array([t.encode() for t in texts], dtype=object)
    if binary is None:
        item.set_data_from_numpy(array)
    else:
        item.set_data_from_numpy(array, binary_data=binary)
    return item


def test_binary_extension_and_grpc_answer_as_json(served: Any, predicted: dict[str, list[Any]]) -> None:
    server, names = served
    want = [p["logits"] for p in predicted["cls"][:3]]
    http = httpclient.InferenceServerClient(server.http)
    by_http = http.infer(names["cls"], [_texts_input(httpclient, TEXTS, binary=True)]).as_numpy("logits")
    by_grpc = grpcclient.InferenceServerClient(server.grpc).infer(
        names["cls"], [_texts_input(grpcclient, TEXTS)]).as_numpy("logits")
    for got in (by_http, by_grpc):
        answers = [json.loads(t) for t in got]
        assert [[a["label"] for a in g] for g in answers] == [[a["label"] for a in w] for w in want]
        assert np.allclose([[a["score"] for a in g] for g in answers], [[a["score"] for a in w] for w in want],
                           atol=1e-5)
    vectors = grpcclient.InferenceServerClient(server.grpc).infer(
        names["vec"], [_texts_input(grpcclient, TEXTS)]).as_numpy("embedding")
    assert vectors.dtype == np.float32 and np.allclose(
        vectors, [p["embedding"]["vector"] for p in predicted["vec"][:3]], atol=1e-5)


def test_gpux_run_answers_the_same(text_hub: Hub, served: Any) -> None:
    server, names = served
    want: Any = text_hub.answer(str(text_hub.root / "cls"), TEXTS[1])["logits"]
    status, reply = infer_json(server, names["cls"], json_body([TEXTS[1]]))
    assert status == 200, reply
    [got] = answers_of(output(reply, "logits"))
    assert [a["label"] for a in got] == [a["label"] for a in want]
    assert np.allclose([a["score"] for a in got], [a["score"] for a in want], atol=1e-5)


def test_the_int64_tensors_still_work(text_hub: Hub, served: Any, predicted: dict[str, list[Any]]) -> None:
    from gpux.sources.checkpoint import read_facts
    from gpux.sources.torch_onnx import tokenized

    server, names = served
    feeds = tokenized(read_facts(text_hub.root / "st-checkpoint", str), SAME_LENGTH, ["input_ids", *FILLED])
    client = httpclient.InferenceServerClient(server.http)
    items = []
    for name, array in feeds.items():
        item = httpclient.InferInput(name, list(array.shape), "INT64")
        item.set_data_from_numpy(array)
        items.append(item)
    got = client.infer(names["st"], items).as_numpy("embedding")
    assert np.allclose(got, [np.ravel(p["embedding"]) for p in predicted["st"][3:]], atol=1e-5)


@pytest.mark.parametrize(("body", "said"), [
    (json_body([]), "input 'input_ids' holds no texts; send one text per element"),
    (json_body(["a good film", ""]), "input 'input_ids' element 1: an empty text"),
    (json_body(["\ud800 film"]), "input 'input_ids' element 0: not UTF-8 text"),
    (json.dumps({"inputs": [{"name": "input_ids", "datatype": "FP32", "shape": [1, 2], "data": [1.0, 2.0]}]}),
     "input 'input_ids' has datatype FP32 but model '{cls}' expects INT64 (or BYTES: texts, one per element)"),
    (json.dumps({"inputs": [{"name": "input_ids", "datatype": "BYTES", "shape": [1], "data": ["a good film"]},
                            {"name": "attention_mask", "datatype": "INT64", "shape": [1, 5], "data": [1] * 5}]}),
     "input 'attention_mask' is filled from the texts sent to 'input_ids'"),
])
def test_bad_texts_are_400_naming_the_input(served: Any, body: str, said: str) -> None:
    server, names = served
    status, _, reply = post(server.http, f"/v2/models/{names['cls']}/infer", body)
    assert status == 400, reply
    assert error_of(reply).startswith(said.format(cls=names["cls"])), error_of(reply)


def test_bytes_that_are_not_utf8_are_400_over_binary_and_grpc(served: Any) -> None:
    server, names = served
    bad = np.array([b"a good film", b"\xff\xfe film"], dtype=object)
    for module, address in ((httpclient, server.http), (grpcclient, server.grpc)):
        item = module.InferInput("input_ids", [2], "BYTES")
        item.set_data_from_numpy(bad)
        with pytest.raises(InferenceServerException) as caught:
            module.InferenceServerClient(address).infer(names["cls"], [item])
        assert "input 'input_ids' element 1: not UTF-8 text" in caught.value.message(), caught.value.message()


def test_raw_outputs_of_texts_of_different_lengths_say_so(served: Any) -> None:
    """`answers: false` gives the tensors, which texts of one token count make, and others cannot."""
    server, names = served
    status, reply = infer_json(server, names["ner"], json_body(SAME_LENGTH, parameters={"answers": False}))
    assert status == 200, reply
    assert output(reply, "logits")["datatype"] == "FP32" and output(reply, "logits")["shape"][0] == 3
    status, reply = infer_json(server, names["ner"], json_body(TEXTS, parameters={"answers": False}))
    assert status == 400 and "for the texts sent (texts of different token counts)" in reply["error"], reply
