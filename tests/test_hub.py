"""Hub ids and transformers checkpoints as sources, offline: tiny checkpoints made here, placed in a hub cache this
test builds (HF_HUB_OFFLINE=1), `gpux init hf://... --task` + build + `gpux run NAME "a sentence"` answering what
transformers and sentence-transformers' pooling answer; revisions in the key; a cold cache; the token kept out of
everything. The README's block runs in a shell once per session (its project is the session's sentence encoder);
the other commands run through the CLI's entry point in this process, where torch is imported once."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import ROOT, make_mlp, write
from .hub_checkpoints import checkpoint, place, sentence_embedding

pytest.importorskip("transformers")
pytest.importorskip("huggingface_hub")

ST_REV, CLS_REV = "a" * 40, "b" * 40
SECRET = "hf_" + "Sx7" * 10  # a token-shaped value: huggingface_hub reads HF_TOKEN; gpux must never show it
TEXT = "The weather is lovely today"
README_REPO = "sentence-transformers/all-MiniLM-L6-v2"


def cli(args: tuple[str, ...], cwd: Path | None, env: dict[str, str]) -> tuple[int, str, str]:
    """The CLI's own entry point (gpux.cli.main.main) in this process, under `env` and in `cwd`: torch and
    transformers, imported here once, are not imported again per command. huggingface_hub's settings are read
    at each call (gpux passes the cache and offline-ness), so each command sees its own."""
    from gpux.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for k, v in env.items():
            mp.setenv(k, v)
        if cwd is not None:
            mp.chdir(cwd)
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, out.getvalue(), err.getvalue()


class Hub:
    """The cache, its settings and what the session's commands printed."""

    def __init__(self, root: Path) -> None:
        self.root, self.cache = root, root / "hub"
        self.env = {"HF_HUB_CACHE": str(self.cache), "HF_HUB_OFFLINE": "1", "HF_TOKEN": SECRET,
                    "GPUX_HOME": str(root / "home")}
        self.printed: list[str] = []

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> tuple[int, str, str]:
        code, out, err = cli(args, cwd, {**self.env, **env})
        self.printed += [out, err]
        return code, out, err

    def project(self, name: str, model: str, task: str) -> Path:
        folder = self.root / name
        code, _, err = self.run("init", model, "--task", task, "--folder", str(folder))
        assert code == 0, err
        return folder

    def answer(self, target: str, text: str) -> dict[str, object]:
        """`gpux run TARGET "TEXT"` and the same text as a file in one command: the two answers are the same."""
        file = self.root / "in.txt"
        file.write_text(text)
        code, out, err = self.run("run", target, text, str(file), "--provider", "cpu", "--json")
        assert code == 0, err
        literal, from_file = (json.loads(line) for line in out.strip().splitlines()[-2:])
        assert literal["text"] == text and "file" not in literal and from_file["file"] == str(file)
        assert literal["answers"] == from_file["answers"]
        return literal["answers"]


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Hub:
    h = Hub(tmp_path_factory.mktemp("hub"))
    checkpoint(h.root / "st", "st")
    place(h.cache, "tiny/cls", checkpoint(h.root / "cls", "cls"), CLS_REV)
    place(h.cache, README_REPO, h.root / "st", ST_REV)  # the README's example, answered by the tiny encoder
    return h


@pytest.fixture(scope="session")
def readme(hub: Hub) -> subprocess.CompletedProcess[str]:
    """The README's hub block, line by line in one shell (the installed CLI, as a user runs it), offline on the
    tiny encoder placed under its repo id, in the session's folder: its project is the session's sentence encoder
    (one export of it per session)."""
    text = (ROOT / "README.md").read_text()
    [block] = [b for b in re.findall(r"```sh\n(.*?)```", text, flags=re.S) if "gpux init hf://" in b]
    lines = [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]
    bindir = Path(sys.executable).parent
    env = {**os.environ, **hub.env, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "-c", "set -e\n" + "\n".join(lines)], cwd=hub.root, env=env, capture_output=True,
                       text=True, timeout=600)
    hub.printed += [r.stdout, r.stderr]
    r.args = block  # what ran
    return r


@pytest.fixture(scope="session")
def st_project(hub: Hub, readme: subprocess.CompletedProcess[str]) -> Path:
    assert readme.returncode == 0, readme.stderr
    return hub.root / "minilm"


def cosine(a: object, b: object) -> float:
    x, y = np.ravel(np.asarray(a, dtype=np.float64)), np.ravel(np.asarray(b, dtype=np.float64))
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def test_init_fills_gpux_yml_from_the_checkpoint_files(hub: Hub, st_project: Path) -> None:
    text = (st_project / "gpux.yml").read_text()
    assert f"source: hf://{README_REPO}" in text and "task: feature-extraction" in text
    assert "max_length: 40" in text  # sentence_bert_config.json's max_seq_length
    assert "mask: attention_mask, type_ids: token_type_ids" in text
    assert "embedding: {dtype: float32, shape: [batch, 32]}" in text and "mean pooling, normalized" in text
    assert (st_project / "tokenizer.json").read_bytes() == (hub.root / "st" / "tokenizer.json").read_bytes()


def test_embedding_is_sentence_transformers_pooling_of_the_checkpoint(hub: Hub, st_project: Path) -> None:
    """init + build + `gpux run NAME "a sentence"` answers sentence-transformers' embedding, and the same as the
    sentence in a file."""
    assert "name: all-minilm-l6-v2" in (st_project / "gpux.yml").read_text()
    code, _, err = hub.run("build", str(st_project), "--provider", "cpu")  # built by the README's run: replayed
    assert code == 0, err
    got = hub.answer("all-minilm-l6-v2", TEXT)["embedding"]
    want = sentence_embedding(hub.root / "st", TEXT)
    assert cosine(got, want) >= 0.9999
    assert abs(np.linalg.norm(np.ravel(got)) - 1) < 1e-4  # normalised in the graph (2_Normalize)
    other = sentence_embedding(hub.root / "st", "a bad movie")
    assert cosine(got, other) < 0.9999  # a different sentence is answered differently


def test_manifest_names_the_commit_and_the_build_is_replayed(hub: Hub, st_project: Path) -> None:
    code, out, err = hub.run("build", str(st_project), "--provider", "cpu", "--json")
    assert code == 0, err
    [target] = json.loads(out)["targets"]
    assert target["cached"]  # the README's run built it
    manifest = json.loads((Path(target["path"]).parent / "manifest.json").read_text())
    origin = manifest["key_parts"]["origin"]
    assert origin == {"repo": README_REPO, "revision": ST_REV, "task": "feature-extraction"}


def test_text_classification_labels_match_transformers_pipeline(hub: Hub) -> None:
    from transformers import pipeline

    project = hub.project("cls-project", "hf://tiny/cls", "text-classification")
    assert 'labels: ["negative", "positive", "neutral"]' in (project / "gpux.yml").read_text()
    got = hub.answer(str(project), TEXT)["logits"]
    [want] = pipeline("text-classification", model=str(hub.root / "cls"), top_k=None)([TEXT])
    assert [a["label"] for a in got] == [w["label"] for w in want]
    assert np.allclose([a["score"] for a in got], [w["score"] for w in want], atol=1e-4)


def test_a_local_save_pretrained_folder_with_cls_pooling_and_no_type_ids(hub: Hub) -> None:
    folder = checkpoint(hub.root / "local" / "distil", "distil", seed=3)
    project = hub.root / "local"
    code, _, err = hub.run("init", str(folder), "--task", "feature-extraction", "--folder", str(project))
    assert code == 0, err
    text = (project / "gpux.yml").read_text()
    assert "source: distil" in text and "token_type_ids" not in text and "mean pooling (no modules.json" in text
    got = hub.answer(str(project), "a good film")["embedding"]
    assert cosine(got, sentence_embedding(folder, "a good film", normalize=False)) >= 0.9999


def _onnx_repo(hub: Hub, revision: str, seed: int) -> None:
    """An .onnx with its weights in external data, in the repo's onnx/ folder."""
    import onnx

    files = hub.root / f"onnx-{seed}"
    model = onnx.load(str(make_mlp(hub.root / f"plain-{seed}.onnx", seed=seed)))
    (files / "onnx").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(files / "onnx" / "model.onnx"), save_as_external_data=True, location="model.onnx_data",
              size_threshold=0)
    place(hub.cache, "tiny/mlp", files, revision)


def _built(hub: Hub, project: Path) -> tuple[bool, str]:
    code, out, err = hub.run("build", str(project), "--provider", "cpu", "--json")
    assert code == 0, err
    [target] = json.loads(out)["targets"]
    manifest = json.loads((Path(target["path"]).parent / "manifest.json").read_text())
    return target["cached"], manifest["key_parts"]["origin"]["revision"]


def test_a_moved_branch_rebuilds_and_a_pinned_revision_does_not(hub: Hub, tmp_path: Path) -> None:
    first, second = "1" * 40, "2" * 40
    _onnx_repo(hub, first, seed=1)
    yml = "name: {name}\nmodel: {{source: {source}}}\noutputs:\n  probs: {{dtype: float32, shape: [batch, 4]}}\n"
    moving = write(tmp_path / "moving" / "gpux.yml", yml.format(name="moving", source="hf://tiny/mlp/onnx/model.onnx"))
    pinned = write(tmp_path / "pinned" / "gpux.yml", yml.format(name="pinned",
                                                                source=f"hf://tiny/mlp@{first}/onnx/model.onnx"))
    assert _built(hub, moving.parent) == (False, first)
    assert _built(hub, pinned.parent) == (False, first)
    assert _built(hub, moving.parent) == (True, first)
    _onnx_repo(hub, second, seed=2)  # upstream moved main: the cache's refs/main names the new commit
    assert _built(hub, moving.parent) == (False, second)
    assert _built(hub, pinned.parent) == (True, first)


def test_package_carries_the_resolved_files_not_the_id(hub: Hub, tmp_path: Path) -> None:
    _onnx_repo(hub, "3" * 40, seed=3)
    project = write(tmp_path / "p" / "gpux.yml", "name: packed\nmodel: {source: hf://tiny/mlp/onnx/model.onnx}\n")
    out = tmp_path / "ctx"
    code, _, err = hub.run("package", str(project.parent), "--provider", "cpu", "--dockerfile-only", str(out),
                           DOCKER_HOST="unix:///nonexistent/docker.sock")
    assert code == 0, err
    assert (out / "model" / "model.onnx").is_file() and (out / "model" / "model.onnx_data").is_file()
    packaged = (out / "model" / "gpux.yml").read_text()
    assert "hf://" not in packaged and "source: model.onnx" in packaged and "3" * 40 in packaged


def test_a_cold_cache_offline_is_one_line_exit_1(hub: Hub, tmp_path: Path) -> None:
    project = write(tmp_path / "gpux.yml", "name: cold\nmodel: {source: hf://tiny/absent, task: feature-extraction}\n")
    code, _, err = hub.run("build", str(project.parent), HF_HUB_CACHE=str(tmp_path / "empty"))
    assert code == 1, err
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {project}:2:") and "hf://tiny/absent" in line and "HF_HUB_OFFLINE" in line
    assert "Traceback" not in err
    code, _, err = hub.run("validate", str(project), HF_HUB_CACHE=str(tmp_path / "empty"))
    assert code == 0, err  # the config alone: no hub, no export
    code, out, err = hub.run("validate", str(project), "--check-model", HF_HUB_CACHE=str(tmp_path / "empty"))
    [again] = err.strip().splitlines()
    assert code == 3 and again == line and out.strip() == "0 valid, 1 invalid", err  # the same line, the file once


@pytest.mark.parametrize(("model", "said"), [
    ("{source: 'hf://nothing'}", "is not a hub id"),
    ("{source: hf://org/name}", "names a checkpoint, not an .onnx file: add task"),
    ("{source: hf://org/name/model.onnx, task: feature-extraction}", "an ONNX or PyTorch file is taken as it is"),
])
def test_hub_sources_are_checked_at_their_line(tmp_path: Path, model: str, said: str) -> None:
    project = write(tmp_path / "gpux.yml", f"name: m\nmodel: {model}\n")
    code, _, err = cli(("validate", str(project)), None, {})
    assert code == 3 and re.search(rf"gpux.yml:2:\d+ model\.\w+: .*{re.escape(said)}", err), err


def test_the_token_appears_nowhere(hub: Hub, st_project: Path) -> None:
    """After the session's commands ran with HF_TOKEN set: not in what they printed, nor in any file they wrote."""
    hub.answer(str(st_project), "a good film")
    assert not [p for p in hub.printed if SECRET in p]
    written = [p for p in hub.root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not written, written


def test_readme_hub_example_runs_as_printed(hub: Hub, readme: subprocess.CompletedProcess[str]) -> None:
    """The README's hub block ran as printed (the `readme` fixture): the sentence given as it is answers its
    embedding, and the JSON line says it answered that text."""
    assert f"```sh\n{readme.args}```" in (ROOT / "docs" / "hub.md").read_text()  # docs/hub.md prints the same block
    assert readme.returncode == 0, readme.stderr
    doc = json.loads(readme.stdout.strip().splitlines()[-1])
    assert doc["text"] == "A man is playing a guitar." and "file" not in doc
    assert cosine(doc["answers"]["embedding"], sentence_embedding(hub.root / "st", "A man is playing a guitar.")) \
        >= 0.9999
    assert README_REPO in (hub.root / "minilm" / "gpux.yml").read_text()
