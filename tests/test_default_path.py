"""The default path: an artifact is opened for the machine that opens it (ONNX Runtime's full online optimizations),
apart from how it is saved; providers that run the same file share it; many files use the machine (decoded in
threads, batched) and answer as one file at a time does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import gpux, write
from tests.trained import mobilenet_v2_onnx, package_file, photos


def test_cpu_artifact_is_saved_portable_and_opened_at_all(mlp_project: Path) -> None:
    import gpux as api

    session = api.load(mlp_project, "cpu", strict=True)
    try:
        native = session.runner.native
        import onnxruntime as ort

        assert native.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        assert session.build.final.artifact.manifest["info"]["optimization"] == "basic"  # the file stays portable
        assert session.report()["runtime"]["opened"]["graph_optimization"] == "all"
    finally:
        session.close()
    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "providers:\n  cpu: {online_optimization: basic}\n")
    session = api.load(mlp_project, "cpu", strict=True)
    try:
        assert session.runner.native.get_session_options().graph_optimization_level == \
            ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    finally:
        session.close()


def test_how_an_artifact_opens_is_shown_by_inspect_and_run_v(mlp_project: Path) -> None:
    doc = json.loads(gpux("inspect", str(mlp_project), "--json").stdout)
    assert doc["would_run_on"] == "cpu" and doc["opens_with"]["graph_optimization"] == "all"
    text = gpux("inspect", str(mlp_project)).stdout
    assert "cpu opens its artifact with: graph_optimization=all" in text
    r = gpux("-v", "run", str(mlp_project), "-p", "cpu", "--input", json.dumps({"x": [[0.5] * 8]}))
    assert r.returncode == 0, r.stderr
    assert "opened with: graph_optimization=all" in r.stderr


def test_the_session_level_is_not_part_of_the_artifact_and_cpu_shares_cudas_file(mlp_project: Path) -> None:
    from gpux.artifacts.plan import keyed_targets
    from gpux.config.locate import open_project
    from gpux.model.io import check_model

    def key(provider: str, extra: str = "") -> str:
        yml = mlp_project / "gpux.yml"
        yml.write_text(yml.read_text().split("providers:")[0] + extra)
        project = open_project(str(mlp_project))
        inputs = check_model(project).inputs
        (planned,) = keyed_targets(project, provider, inputs, "digest", {})
        return planned.key

    plain = key("cpu")
    assert key("cuda") == plain  # one onnx-fp32-basic file for every ONNX Runtime provider
    assert key("cpu", "providers:\n  cpu: {online_optimization: extended}\n") == plain
    assert key("cpu", "providers:\n  cpu: {optimization: all}\n") != plain  # a file saved otherwise is another


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained MobileNetV2 at fp32 with the example's image steps and labels, and a folder of real photos."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("classifier")
    mobilenet_v2_onnx(folder / "model.onnx")
    shutil.copy(Path(__file__).parents[1] / "examples" / "mobilenet_v2" / "imagenet_labels.txt", folder)
    write(folder / "gpux.yml", """\
        name: classifier
        version: 1.0.0
        model: {source: model.onnx}
        inputs:
          x:
            dtype: float32
            shape: [batch, 3, 224, 224]
            preprocess:
              image: {resize: {shorter: 256}, crop: 224, scale: 1/255, mean: [0.485, 0.456, 0.406],
                      std: [0.229, 0.224, 0.225]}
        outputs:
          logits: {dtype: float32, shape: [batch, 1000], labels: imagenet_labels.txt,
                   postprocess: {softmax: true, topk: 3}}
        runtime: {backend: cpu}
        """)
    shots = folder / "photos"
    shots.mkdir()
    for i, rgb in enumerate(photos()):  # unlike sizes: batches break where the shape changes (none here: cropped)
        Image.fromarray(rgb).save(shots / f"{i:02d}.png")
        Image.fromarray(rgb[:, ::-1]).save(shots / f"{i:02d}-flipped.jpg")
    shutil.copy(package_file("skimage", "data", "camera.png"), shots / "zz-gray.png")
    return folder


def test_a_folder_is_answered_in_batches_as_one_file_at_a_time(classifier: Path) -> None:
    shots = classifier / "photos"
    batched = gpux("run", str(classifier), str(shots), "--json")
    single = gpux("run", str(classifier), str(shots), "--json", "--batch", "1")
    assert batched.returncode == 0 and single.returncode == 0, batched.stderr + single.stderr
    a, b = ([json.loads(line) for line in r.stdout.splitlines()] for r in (batched, single))
    files = sorted(str(p) for p in shots.iterdir())
    assert [d["file"] for d in a] == files == [d["file"] for d in b]  # every file once, in order
    for x, y in zip(a, b, strict=True):
        assert [t["label"] for t in x["answers"]["logits"]] == [t["label"] for t in y["answers"]["logits"]]
        np.testing.assert_allclose([t["score"] for t in x["answers"]["logits"]],
                                   [t["score"] for t in y["answers"]["logits"]], atol=1e-4)
    assert f"{len(files)} files in " in batched.stderr and "files/s" in batched.stderr


def test_answer_many_batches_runs_of_one_shape_and_keeps_order(classifier: Path) -> None:
    import gpux as api
    from gpux.answers.many import answer_many, batch_size
    from gpux.answers.steps import Steps

    session = api.load(classifier, "cpu")
    calls: list[int] = []
    run = session.run_feeds
    session.run_feeds = lambda feeds: calls.append(len(feeds["x"])) or run(feeds)  # type: ignore[method-assign]
    steps = Steps.of(session.project, session.inputs, session.outputs)
    assert batch_size(steps, None) == 8 and batch_size(steps, 3) == 3
    rng = np.random.default_rng(0)
    rows = [1, 1, 1, 1, 1, 2, 1]  # a shape change ends a batch; an item of two rows runs on its own
    tensors = [rng.random((n, 3, 224, 224), dtype=np.float32) for n in rows]
    done = list(answer_many(session, steps, tensors, lambda i: ({"x": tensors[i]}, None), batch=4))
    assert calls == [4, 1, 2, 1]
    assert [i for i, _ in done] == list(range(len(rows)))
    alone = [steps.file_answers(dict(zip(session.output_names, run({"x": t}), strict=True)), None) for t in tensors]
    for (_, got), want in zip(done, alone, strict=True):
        assert [a["label"] for a in got["logits"]] == [a["label"] for a in want["logits"]]
    boom = [*tensors[:2], None]

    def decode(i: int) -> tuple[dict, None]:
        if boom[i] is None:
            raise ValueError("cannot decode item 2")
        return {"x": boom[i]}, None

    seen = []
    with pytest.raises(ValueError, match="item 2"):
        for i, _ in answer_many(session, steps, boom, decode, batch=8, workers=0):
            seen.append(i)
    assert seen == [0, 1]  # the answers before a bad item are given, then its error
    session.close()


def test_a_lossy_build_is_timed_beside_a_plain_session_and_said_slower_only_when_every_round_is(
        mlp_project: Path) -> None:
    from gpux.report import slower_note

    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "providers:\n  cpu: {precision: int8}\n")
    r = gpux("build", str(mlp_project), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    vs = json.loads(r.stdout)["targets"][-1]["vs_plain"]
    assert vs["speedup"] > 0 and vs["low"] <= vs["speedup"] <= vs["high"] and "plain onnxruntime" in vs["against"]
    inspected = json.loads(gpux("inspect", str(mlp_project), "--json").stdout)
    assert inspected["artifacts"][0]["info"]["vs_plain"] == vs
    assert "vs plain fp32" in gpux("inspect", str(mlp_project)).stdout
    assert slower_note({"speedup": 0.8, "low": 0.7, "high": 0.9}).startswith("slower than a plain fp32 session")
    assert slower_note({"speedup": 0.9, "low": 0.5, "high": 1.2}) is None  # one round faster: noise, not said
