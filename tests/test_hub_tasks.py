"""The other two tasks a transformers checkpoint is exported for, offline from a hub cache this test builds:
token-classification (entities with character offsets, against transformers' token-classification pipeline) and
image-classification (the checkpoint's preprocessor_config.json as the image preprocess, against transformers'
image-classification pipeline on real photos from scikit-image). Each through `gpux init hf://... --task` +
`gpux build` + `gpux run NAME INPUT`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from .hub_checkpoints import checkpoint, image_checkpoint, place
from .test_hub import Hub

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

TOK_REV, VIT_REV, CONVNEXT_REV = "c" * 40, "d" * 40, "e" * 40
TEXT = "A man is playing a guitar on the stage in Paris"  # 'Paris' is not in the vocabulary: [UNK], its offsets kept
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "stereo_motorcycle")


@pytest.fixture(scope="session")
def tasks_hub(tmp_path_factory: pytest.TempPathFactory) -> Hub:
    h = Hub(tmp_path_factory.mktemp("hub_tasks"))
    place(h.cache, "tiny/ner", checkpoint(h.root / "ner", "tok", seed=4), TOK_REV)
    place(h.cache, "tiny/ner-pieces", checkpoint(h.root / "ner-pieces", "tok_pieces", seed=4), TOK_REV)
    place(h.cache, "tiny/vit", image_checkpoint(h.root / "vit", "vit"), VIT_REV)
    place(h.cache, "tiny/convnext", image_checkpoint(h.root / "convnext", "convnext", seed=1), CONVNEXT_REV)
    return h


@pytest.fixture(scope="session")
def photos(tasks_hub: Hub) -> Path:
    """scikit-image's photos as PNG files (decoded exactly alike by gpux and by the pipeline's PIL)."""
    data = pytest.importorskip("skimage.data")
    from PIL import Image

    folder = tasks_hub.root / "photos"
    folder.mkdir()
    for name in PHOTOS:
        Image.fromarray(getattr(data, name)() if name != "stereo_motorcycle" else data.stereo_motorcycle()[0]).save(
            folder / f"{name}.png")
    return folder


@pytest.fixture(scope="session")
def ner(tasks_hub: Hub) -> Path:
    project = tasks_hub.project("ner", "hf://tiny/ner", "token-classification")
    code, _, err = tasks_hub.run("build", str(project), "--provider", "cpu")
    assert code == 0, err
    return project


def _pipeline_entities(folder: Path, text: str, aggregation: str) -> list[dict[str, Any]]:
    from transformers import pipeline

    return pipeline("token-classification", model=str(folder), aggregation_strategy=aggregation)(text)


def test_token_classification_init_writes_labels_and_tokens_block(ner: Path) -> None:
    text = (ner / "gpux.yml").read_text()
    assert "task: token-classification" in text and "shape: [batch, tokens, 5]" in text
    assert 'labels: ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]' in text
    assert "postprocess: {softmax: true, tokens: {aggregation: simple}}" in text


def test_entities_of_wordpiece_pieces_match_transformers_pipeline(tasks_hub: Hub) -> None:
    """A word split into ## pieces (BERT's WordPiece, as NER checkpoints tokenize): each piece labelled, pieces
    joined by their labels as the pipeline joins them, offsets into the text as it was written."""
    project = tasks_hub.project("ner-pieces", "hf://tiny/ner-pieces", "token-classification")
    text = "A man is playing a guitar on the stage in Paris, quickly!"
    got = tasks_hub.answer(str(project), text)["logits"]
    want = _pipeline_entities(tasks_hub.root / "ner-pieces", text, "simple")
    assert any(w["word"].startswith("##") for w in want)  # a piece of a word answered apart from its word
    assert [(a["label"], a["start"], a["end"]) for a in got] == [(w["entity_group"], w["start"], w["end"])
                                                                  for w in want]
    assert np.allclose([a["score"] for a in got], [float(w["score"]) for w in want], atol=1e-5)
    assert [a["text"] for a in got] == [text[w["start"]:w["end"]] for w in want]


def test_entities_match_transformers_pipeline_simple(tasks_hub: Hub, ner: Path) -> None:
    """Entities joined as aggregation_strategy="simple" joins them: labels, spans and scores equal at fp32; the text
    of each is the input's characters at its offsets."""
    got = tasks_hub.answer(str(ner), TEXT)["logits"]
    want = _pipeline_entities(tasks_hub.root / "ner", TEXT, "simple")
    assert isinstance(got, list) and len(want) >= 2 and any(" " in w["word"] for w in want)  # a multi-token entity
    assert [(a["label"], a["start"], a["end"]) for a in got] == [(w["entity_group"], w["start"], w["end"])
                                                                  for w in want]
    assert np.allclose([a["score"] for a in got], [float(w["score"]) for w in want], atol=1e-5)
    assert [a["text"] for a in got] == [TEXT[w["start"]:w["end"]] for w in want]
    assert any(a["text"] == "Paris" for a in got)  # an unknown word keeps its characters
    code, out, err = tasks_hub.run("run", "ner", TEXT, "--provider", "cpu")
    assert code == 0, err
    first = got[0]
    assert f"logits: {len(got)} entities" in out and \
        f"{first['label']} {first['score']:.3f} [{first['start']}, {first['end']}) {first['text']!r}" in out


def test_tokens_on_an_output_of_another_shape_is_one_line(tasks_hub: Hub, ner: Path) -> None:
    """tokens: declared on [batch, labels] logits (a text classifier's) is refused at its line before anything
    runs, exit 3."""
    project = tasks_hub.root / "cls-tokens"
    project.mkdir(exist_ok=True)
    (project / "tokenizer.json").write_bytes((ner / "tokenizer.json").read_bytes())
    yml = (ner / "gpux.yml").read_text().replace("name: ner", "name: cls-tokens").split("outputs:")[0]
    (project / "gpux.yml").write_text(yml.replace("token-classification", "text-classification").replace(
        "hf://tiny/ner", "hf://tiny/cls") + "outputs:\n  logits: {dtype: float32, postprocess: {tokens: {}}}\n")
    place(tasks_hub.cache, "tiny/cls", checkpoint(tasks_hub.root / "cls", "cls"), "f" * 40)
    code, _, err = tasks_hub.run("run", str(project), TEXT, "--provider", "cpu")
    [line] = err.strip().splitlines()
    assert code == 3 and "postprocess.tokens" in line and "[batch, tokens, labels]" in line, err


def test_an_image_task_on_a_text_checkpoint_is_one_line(tasks_hub: Hub) -> None:
    code, _, err = tasks_hub.run("init", "hf://tiny/ner", "--task", "image-classification", "--folder",
                                 str(tasks_hub.root / "wrong"))
    [line] = err.strip().splitlines()
    assert code == 1 and "hf://tiny/ner" in line and "preprocessor_config.json" in line, err


def test_tokens_without_aggregation_match_the_pipeline_per_token(tasks_hub: Hub, ner: Path) -> None:
    project = tasks_hub.root / "ner-none"
    project.mkdir(exist_ok=True)
    for f in ("tokenizer.json",):
        (project / f).write_bytes((ner / f).read_bytes())
    (project / "gpux.yml").write_text((ner / "gpux.yml").read_text().replace("name: ner", "name: ner-none").replace(
        "aggregation: simple", "aggregation: none"))
    got = tasks_hub.answer(str(project), TEXT)["logits"]
    want = _pipeline_entities(tasks_hub.root / "ner", TEXT, "none")
    assert [(a["label"], a["token"], a["start"], a["end"]) for a in got] == \
        [(w["entity"], w["index"], w["start"], w["end"]) for w in want]
    assert np.allclose([a["score"] for a in got], [float(w["score"]) for w in want], atol=1e-5)
    assert all(a["label"] != "O" for a in got) and len(got) > 0


def test_token_classification_build_verifies_tokens(tasks_hub: Hub, ner: Path) -> None:
    code, out, err = tasks_hub.run("build", str(ner), "--provider", "cpu", "--json")
    assert code == 0, err
    [target] = json.loads(out)["targets"]
    manifest = json.loads((Path(target["path"]).parent / "manifest.json").read_text())
    assert manifest["key_parts"]["origin"] == {"repo": "tiny/ner", "revision": TOK_REV,
                                               "task": "token-classification"}
    answers = manifest["verification"]["outputs"]["logits"]["answers"]  # the tokens kind's own comparison
    assert answers["kind"] == "tokens" and answers["token_match"] == 1.0 and answers["tokens"] > answers["rows"] > 0


def _image_project(tasks_hub: Hub, name: str) -> Path:
    project = tasks_hub.root / name
    code, _, err = tasks_hub.run("init", f"hf://tiny/{name}", "--task", "image-classification", "--folder",
                                 str(project))
    assert code == 0 and err.strip().splitlines() == [f"wrote {project / 'gpux.yml'} (hf://tiny/{name} at "
                                                      f"{(VIT_REV if name == 'vit' else CONVNEXT_REV)[:12]}, "
                                                      "image-classification)"], err  # transformers' warnings kept in
    code, _, err = tasks_hub.run("build", str(project), "--provider", "cpu")
    assert code == 0, err
    return project


@pytest.mark.parametrize(("name", "steps"), [
    ("vit", "image: {resize: {exact: [32, 32], filter: bilinear}, color: rgb, scale: 1/255, mean: [0.5, 0.5, 0.5], "
            "std: [0.5, 0.5, 0.5]}"),
    ("convnext", "image: {resize: {shorter: 36, filter: bicubic}, crop: [32, 32], color: rgb, scale: 1/255, mean: "
                 "[0.5, 0.5, 0.5], std: [0.5, 0.5, 0.5]}"),  # 32 / crop_pct 0.875, then the crop
])
def test_image_classification_matches_transformers_pipeline_on_photos(tasks_hub: Hub, photos: Path, name: str,
                                                                      steps: str) -> None:
    """init reads preprocessor_config.json into the image preprocess; `gpux run NAME FOLDER` answers each photo's
    labels as the pipeline does: the same ranking, every score within 1e-5."""
    from PIL import Image
    from transformers import pipeline

    project = _image_project(tasks_hub, name)
    text = (project / "gpux.yml").read_text()
    assert steps in text and "shape: [batch, 3, 32, 32]" in text
    assert 'labels: ["cat", "astronaut", "coffee", "rocket", "motorcycle"]' in text
    code, out, err = tasks_hub.run("run", name, str(photos), "--provider", "cpu", "--json")
    assert code == 0, err
    answers = {Path(d["file"]).stem: d["answers"]["logits"] for d in map(json.loads, out.strip().splitlines())}
    classify = pipeline("image-classification", model=str(tasks_hub.root / name), top_k=5)
    for photo in PHOTOS:
        want = classify(Image.open(photos / f"{photo}.png"))
        got = answers[photo]
        assert [a["label"] for a in got] == [w["label"] for w in want], photo  # top-1 and the whole ranking
        assert np.allclose([a["score"] for a in got], [w["score"] for w in want], atol=1e-5), (photo, got, want)
    assert len({answers[p][0]["label"] for p in PHOTOS}) > 1  # the photos are told apart


def test_predict_answers_the_entities_of_gpux_run(tasks_hub: Hub, ner: Path, monkeypatch: pytest.MonkeyPatch
                                                  ) -> None:
    """`session.predict` (one text, a list of texts) answers what `gpux run` answers: each text its own offsets."""
    import gpux
    from gpux.sources.checkpoint import read_facts
    from gpux.sources.torch_onnx import tokenized

    for k, v in tasks_hub.env.items():
        monkeypatch.setenv(k, v)
    other = "where is the nearest train station"
    want = tasks_hub.answer(str(ner), TEXT)["logits"]
    with gpux.load(ner, provider="cpu") as session:
        alone = session.predict(other)["logits"]
        assert session.predict([TEXT, other]) == [{"logits": want}, {"logits": alone}]
        tensors = tokenized(read_facts(tasks_hub.root / "ner", str), [TEXT], ["input_ids", "attention_mask",
                                                                              "token_type_ids"])
        [row] = session.predict(tensors)  # tensors: every token of the row, no characters to point at
    assert alone != want and all(a["text"] == other[a["start"]:a["end"]] for a in alone)
    assert row["logits"] and all(a["start"] is None and a["text"] is None for a in row["logits"])


@pytest.mark.parametrize(("processor", "settings", "steps"), [
    ("CLIPImageProcessor", {"size": {"shortest_edge": 40}, "crop_size": 32},
     {"resize": {"shorter": 40, "filter": "bicubic"}, "crop": [32, 32]}),
    ("ConvNextImageProcessor", {"size": {"shortest_edge": 384}},
     {"resize": {"exact": [384, 384], "filter": "bicubic"}}),
    ("ViTImageProcessor", {"size": {"height": 20, "width": 30}, "resample": 0, "do_normalize": False,
                           "rescale_factor": 0.5}, {"resize": {"exact": [20, 30], "filter": "nearest"}, "scale": 0.5}),
])
def test_preprocessor_configs_become_image_steps(tmp_path: Path, processor: str, settings: dict[str, Any],
                                                 steps: dict[str, Any]) -> None:
    """The processors' own rules: a shorter side and a centre crop (CLIP's), ConvNext's square resize from 384, a
    fixed size with PIL's nearest filter; no mean and std where do_normalize is off."""
    import transformers

    from gpux.sources.vision import image_steps

    getattr(transformers, processor)(**settings).save_pretrained(str(tmp_path))
    got = image_steps(tmp_path, str)
    assert {k: got[k] for k in steps} == steps and got["color"] == "rgb"
    assert ("mean" in got) == settings.get("do_normalize", True)


def test_a_preprocessor_size_gpux_lacks_is_one_line(tmp_path: Path) -> None:
    from transformers import ViTImageProcessor

    from gpux.errors import GpuxError
    from gpux.sources.vision import image_steps

    ViTImageProcessor(size={"longest_edge": 40}).save_pretrained(str(tmp_path))
    with pytest.raises(GpuxError, match=r"resizes to \{'longest_edge': 40\}; gpux reads height and width, or "
                       "shortest_edge"):
        image_steps(tmp_path, str)
