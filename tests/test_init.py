"""`gpux init`: each example's model (made by its make_model.py: ONNX, traced TorchScript, a torch.export program,
a trained detector from a wheel) gets a gpux.yml that validates and builds; what init cannot read is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import ROOT, gpux
from .trained import built

# example -> (extra init arguments, the I/O its committed gpux.yml declares: the init must find the same)
EXAMPLES = {
    "mlp": (), "multi_input": (), "torch_native": (), "yolov8_detector": (),
    "torch_cnn": ("--input", "image=float32[batch,3,32,32]"),
    "mobilenet_v2": (), "magika_filetype": (), "silero_vad": (), "ppocr_recognizer": (), "resnet50": (),
}
SLOW = {"mobilenet_v2", "torch_native", "yolov8_detector", "magika_filetype", "silero_vad", "ppocr_recognizer",
        "resnet50"}


def made(example: str, tmp_path: Path) -> Path:
    """A copy of the example with its model made by its make_model.py (run once per session) and its gpux.yml
    moved aside (returned parsed beside)."""
    def make(folder: Path) -> None:
        shutil.copytree(ROOT / "examples" / example, folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".gpux", "*.onnx", "*.pt*", "crops.npz"))
        r = subprocess.run([sys.executable, "make_model.py"], cwd=folder, capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0 and "is not installed" in r.stderr + r.stdout:
            pytest.skip(r.stderr.strip().splitlines()[-1])
        assert r.returncode == 0, r.stderr

    folder = shutil.copytree(built(example, "make_model.py", make), tmp_path / example)
    (folder / "gpux.yml").rename(folder / "committed.yml")
    for extra in ("make_model.py", "sample_input.py", "labels.txt", "charset.txt"):
        (folder / extra).unlink(missing_ok=True)
    return folder


@pytest.mark.parametrize("example", [pytest.param(e, marks=pytest.mark.slow) if e in SLOW else e for e in EXAMPLES])
def test_init_writes_a_config_that_validates_and_builds(example: str, tmp_path: Path) -> None:
    folder = made(example, tmp_path)
    r = gpux("init", *EXAMPLES[example], "--json", cwd=folder)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    written = yaml.safe_load((folder / "gpux.yml").read_text())
    committed = yaml.safe_load((folder / "committed.yml").read_text())
    assert (folder / "gpux.yml").read_text().startswith("# yaml-language-server: $schema=.gpux/gpux.schema.json")
    assert json.loads((folder / ".gpux" / "gpux.schema.json").read_text())["$id"] == "https://gpux.dev/schemas/gpux.schema.json"
    assert list(written["inputs"]) == list(committed["inputs"])
    for name, spec in committed["inputs"].items():
        assert written["inputs"][name]["dtype"] == spec["dtype"]
        assert len(written["inputs"][name]["shape"]) == len(spec["shape"])
        assert all(d == spec["shape"][i] for i, d in enumerate(written["inputs"][name]["shape"])
                   if isinstance(d, int))  # a size init read from the model is the one the example declares
    assert [len(o["shape"]) for o in written["outputs"].values()] == \
        [len(o["shape"]) for o in committed["outputs"].values()]
    assert "cpu" in report["providers"] and "cpu" in written["providers"]
    assert gpux("validate", "gpux.yml", cwd=folder).returncode == 0
    build = gpux("build", ".", "-p", "cpu", cwd=folder)
    assert build.returncode == 0, build.stderr
    assert "verified at fp32" in build.stdout + build.stderr


def test_symbolic_dims_are_listed_to_fill_in(tmp_path: Path) -> None:
    folder = made("multi_input", tmp_path)
    r = gpux("init", cwd=folder)
    assert r.returncode == 0 and "fill in the sizes of seq under benchmark.shapes" in r.stderr
    assert "  #   seq: 128" in (folder / "gpux.yml").read_text()


def test_init_refuses_to_overwrite_and_says_what_it_cannot_read(tmp_path: Path) -> None:
    folder = made("torch_cnn", tmp_path)
    r = gpux("init", cwd=folder)  # a saved TorchScript module keeps no input shapes
    assert r.returncode == 2 and "records no input dtypes and shapes" in r.stderr
    assert "--input image=float32[batch,...]" in r.stderr and "Traceback" not in r.stderr
    bad = gpux("init", "--input", "image=float32[batch,3,7]", cwd=folder)
    assert bad.returncode == 2 and "fails on zeros of the declared inputs" in bad.stderr
    assert gpux("init", "--input", "image=f32[1]", cwd=folder).returncode == 2
    ok = gpux("init", "--input", "image=float32[batch,3,32,32]", cwd=folder)
    assert ok.returncode == 0, ok.stderr
    again = gpux("init", "--input", "image=float32[batch,3,32,32]", cwd=folder)
    assert again.returncode == 2 and "exists; gpux init does not overwrite it" in again.stderr
    assert gpux("init", "--force", "--input", "image=float32[batch,3,32,32]", cwd=folder).returncode == 0
    (folder / "other.onnx").write_bytes(b"not a model")
    several = gpux("init", "--force", cwd=folder)
    assert several.returncode == 2 and "several model files (model.pt, other.onnx)" in several.stderr
    unreadable = gpux("init", "other.onnx", "--force", cwd=folder)
    assert unreadable.returncode == 3 and "not a readable ONNX model" in unreadable.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    none = gpux("init", "--folder", str(empty))
    assert none.returncode == 2 and "no model file" in none.stderr


def test_shell_completion_completes_commands_and_providers() -> None:
    """click's own completion (`_GPUX_COMPLETE=bash_source gpux`, docs/cli.md): commands, then provider names."""
    def complete(words: str) -> list[str]:
        env = {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1), "_GPUX_COMPLETE": "bash_complete"}
        r = gpux(env=env)
        assert r.returncode == 0, r.stderr
        return [line.split(",", 1)[1] for line in r.stdout.splitlines()]

    assert "init" in complete("gpux in") and "inspect" in complete("gpux in")
    assert complete("gpux run x --provider op") == ["openvino"]
    assert complete("gpux build . -p cuda,c") == ["cuda,cuda", "cuda,coreml", "cuda,cpu"]
    script = gpux(env={"_GPUX_COMPLETE": "bash_source"})
    assert "_gpux_completion()" in script.stdout


def misstated(path: Path) -> Path:
    """x [batch, 4, 3] -> y = x transposed to [4, batch, 3], while the metadata says y is [1, seqlen]."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2])], "lie",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seqlen"])])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_init_writes_what_the_model_returns_beside_the_link_named(tmp_path: Path) -> None:
    import os

    model = misstated(tmp_path / "models" / "lie.onnx")
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "model.onnx").symlink_to(model)
    old = os.umask(0o022)
    try:
        r = gpux("init", str(tmp_path / "project" / "model.onnx"))
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    written = tmp_path / "project" / "gpux.yml"
    assert written.is_file() and not (tmp_path / "models" / "gpux.yml").exists()
    assert yaml.safe_load(written.read_text())["outputs"]["y"]["shape"] == [4, "batch", 3]  # not [1, seqlen]
    assert yaml.safe_load(written.read_text())["model"]["source"] == "model.onnx"
    for f in (written, tmp_path / "project" / ".gpux" / "gpux.schema.json"):
        assert f.stat().st_mode & 0o777 == 0o644, oct(f.stat().st_mode)
    r = gpux("validate", "--check-model", str(written))
    assert r.returncode == 0 and "metadata says y is [1, seqlen] but it returns [4, 1, 3]" in r.stderr, r.stderr
    r = gpux("init", str(tmp_path / "project" / "model.onnx"))
    assert r.returncode == 2 and f"{written}: exists" in r.stderr, r.stderr


def test_init_on_a_file_that_is_no_model_is_the_models_error(tmp_path: Path) -> None:
    """An empty .onnx, or one that is no ONNX model, is exit 3 (the model itself) as build and run say it."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "text.onnx").write_text("not a model", encoding="utf-8")
    for name in ("empty.onnx", "text.onnx"):
        r = gpux("init", name, cwd=tmp_path)
        assert r.returncode == 3 and f"{name}: not" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert gpux("build", name, cwd=tmp_path).returncode == 3
    assert not (tmp_path / "gpux.yml").exists()
