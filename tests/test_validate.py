"""`gpux validate`: many files at once, text/JSON/GitHub reports, and --check-model against the real model."""

from __future__ import annotations

import json
import runpy
import shutil
from pathlib import Path

import pytest

from gpux.cli.validate import expand, validate_paths
from gpux.config.load import load_config
from gpux.errors import ConfigError, ExitCode
from gpux.model.io import load_checked
from tests.conftest import ROOT, gpux, make_mlp, make_two_inputs, write
from tests.test_lazy_imports import run_blocked

VALID = "name: {name}\nmodel: {{source: model.onnx}}\n"
INVALID = "name: bad\nmodel: {source: model.onnx}\nruntime:\n  backend: cdua\n"
CDUA = ("runtime.backend: unknown provider 'cdua' (did you mean 'cuda'?); expected one of tensorrt, cuda, rocm, "
        "coreml, mps, directml, openvino, cpu, auto")


def project(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    make_mlp(folder / "model.onnx")
    return write(folder / "gpux.yml", text)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """a, b valid; c invalid; nested/deep/d valid (found by walking a folder); the working directory."""
    project(tmp_path / "a", VALID.format(name="a"))
    project(tmp_path / "b", VALID.format(name="b"))
    project(tmp_path / "c", INVALID)
    project(tmp_path / "nested" / "deep" / "d", VALID.format(name="d"))
    project(tmp_path / "nested" / ".hidden", INVALID)  # hidden folders are not searched
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *paths: str, fmt: str = "text",
        check_model: bool = False, model: bool = True) -> tuple[int, str, str]:
    code = validate_paths(list(paths), fmt, check_model, model)
    out, err = capsys.readouterr()
    return code, out, err


def test_files_globs_and_folders_at_once(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "a/gpux.yml", "[bc]/gpux.yml", "nested", "./a/gpux.yml")
    assert code == ExitCode.CONFIG
    assert out.splitlines() == ["ok: a/gpux.yml", "ok: b/gpux.yml", "ok: nested/deep/d/gpux.yml", "3 valid, 1 invalid"]
    assert err.splitlines() == [f"error: c/gpux.yml:4:12 {CDUA}"]


def test_all_valid_exits_0(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "a", "b")[0] == 0


def test_paths_that_name_no_config(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tree / "empty").mkdir()
    code, out, err = run(capsys, "nope.yml", "zz*/gpux.yml", "empty", "a")
    assert code == ExitCode.CONFIG
    assert err.splitlines() == ["error: nope.yml: file not found", "error: zz*/gpux.yml: no file matches this pattern",
                                "error: empty: no gpux.yml in this folder or below"]
    assert out.splitlines() == ["ok: a/gpux.yml", "1 valid, 3 invalid"]


def test_a_folder_with_its_own_config_is_not_searched_further(tree: Path) -> None:
    project(tree / "a" / "fixtures" / "broken", INVALID)
    assert expand(["a"]) == [Path("a/gpux.yml")]
    assert expand(["."]) == [Path("a/gpux.yml"), Path("a/fixtures/broken/gpux.yml"), Path("b/gpux.yml"),
                             Path("c/gpux.yml"), Path("nested/deep/d/gpux.yml")]


def test_json_document(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tree / "old" / "gpux.yml", "name: old\nmodel: {source: ../a/model.onnx}\nruntime:\n  timeout: 30\n")
    code, out, err = run(capsys, "a", "c", "old", fmt="json")
    assert code == ExitCode.CONFIG and err == ""
    doc = json.loads(out)
    assert doc == {
        "valid": False, "checked": 3, "invalid": 1,
        "files": [
            {"file": "a/gpux.yml", "valid": True, "problems": [], "warnings": []},
            {"file": "c/gpux.yml", "valid": False, "warnings": [],
             "problems": [{"line": 4, "column": 12, "field": "runtime.backend", "message": CDUA.split(": ", 1)[1]}]},
            {"file": "old/gpux.yml", "valid": True, "problems": [],
             "warnings": [{"line": 4, "column": 3, "field": "runtime.timeout",
                           "message": "ignored: gpux.yml v1 has no timeout; remove it"}]},
        ],
    }


def test_github_annotations(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tree / "old" / "gpux.yml", "name: old\nmodel: {source: later.onnx}\n")
    code, out, _ = run(capsys, "c", "old", "nope.yml", fmt="github")
    assert code == ExitCode.CONFIG
    assert out.splitlines() == [
        f"::error file=c/gpux.yml,line=4,col=12::{CDUA}",
        f"::warning file=old/gpux.yml,line=2,col=17::model.source: file not found: later.onnx (looked for "
        f"{tree / 'old' / 'later.onnx'}; paths are relative to gpux.yml); build, run and validate --check-model "
        "need it",
        "::error file=nope.yml::file not found",
        "1 valid, 2 invalid",
    ]


def test_github_annotations_escape_what_github_requires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """%, CR and LF in a message; also ',' and ':' in a property (the file name)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"placeholder")
    write(tmp_path / "a,b:c.yml", 'name: m\nmodel: {source: model.onnx}\n"50%\\r\\nup": 1\n')
    code, out, _ = run(capsys, "a,b:c.yml", fmt="github")
    assert code == ExitCode.CONFIG
    line = out.splitlines()[0]
    assert line.startswith("::error file=a%2Cb%3Ac.yml,line=3,col=1::50%25%0D%0Aup: unknown field; expected one of")
    assert "\r" not in out


# --check-model: the declared inputs/outputs against the model, located on the gpux.yml line of the field


def checked(folder: Path, text: str) -> list[str]:
    write(folder / "gpux.yml", text)
    with pytest.raises(ConfigError) as caught:
        load_checked(load_config(folder / "gpux.yml"), folder / ".gpux")
    return [str(p).removeprefix(f"{folder}/") for p in caught.value.problems]


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    make_mlp(tmp_path / "model.onnx")  # x float32 [batch, 8] -> probs float32 [batch, 4]
    return tmp_path


def test_declared_input_not_in_the_model(mlp: Path) -> None:
    lines = checked(mlp, """\
        name: m
        model: {source: model.onnx}
        inputs:
          X: {dtype: float32, shape: [batch, 8]}
        """)
    assert lines[0] == "gpux.yml:4:3 inputs.X: the model has no input 'X' (did you mean 'x'?); it has x"


def test_dtype_rank_and_static_dim_mismatches(mlp: Path) -> None:
    assert checked(mlp, """\
        name: m
        model: {source: model.onnx}
        inputs:
          x:
            dtype: float16
            shape: [batch, 16]
        outputs:
          probs: {dtype: float32, shape: [batch, 4, 1]}
        """) == [
        "gpux.yml:5:12 inputs.x.dtype: declared float16 but the model has float32",
        "gpux.yml:6:20 inputs.x.shape.1: dim 1 is 16 but the model fixes it to 8 [batch, 8]",
        "gpux.yml:8:34 outputs.probs.shape: declared rank 3 but the model has rank 2 [batch, 4]",
    ]


def test_undeclared_model_input(tmp_path: Path) -> None:
    make_two_inputs(tmp_path / "model.onnx")  # ids int64 [batch, seq], scale float32 [batch, 1]
    lines = checked(tmp_path, "name: m\nmodel: {source: model.onnx}\ninputs: {ids: {dtype: int64, shape: [b, s]}}\n")
    assert len(lines) == 1
    assert lines[0].startswith("gpux.yml:3:") and lines[0].endswith(" inputs: model inputs not declared: scale")


def test_plain_validate_checks_declared_io_against_a_present_model(mlp: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(mlp)
    write(mlp / "gpux.yml", "name: m\nmodel: {source: model.onnx}\ninputs:\n  x: {dtype: int64, shape: [batch, 8]}\n")
    assert run(capsys, "gpux.yml", model=False) == (0, "ok: gpux.yml\n1 valid, 0 invalid\n", "")
    for check_model in (False, True):
        code, _, err = run(capsys, "gpux.yml", check_model=check_model)
        assert code == ExitCode.CONFIG
        assert err == "error: gpux.yml:4:14 inputs.x.dtype: declared int64 but the model has float32\n"
    (mlp / "model.onnx").write_bytes(b"placeholder")
    code, _, err = run(capsys, "gpux.yml")
    assert code == ExitCode.CONFIG and "not a readable ONNX model" in err


def test_build_stops_on_an_io_mismatch_with_exit_3(mlp: Path) -> None:
    write(mlp / "gpux.yml", "name: m\nmodel: {source: model.onnx}\ninputs:\n  x: {dtype: float32, shape: [batch, 9]}\n")
    r = gpux("build", ".", "--provider", "cpu", cwd=mlp)
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert "Traceback" not in r.stderr
    assert "gpux.yml:4:38 inputs.x.shape.1: dim 1 is 9 but the model fixes it to 8 [batch, 8]" in r.stderr


# The shipped examples


def test_examples_are_valid_without_their_models(capsys: pytest.CaptureFixture[str]) -> None:
    """Plain validate checks the configs; a model not generated yet is a warning, not an error."""
    examples = sorted((ROOT / "examples").glob("*/gpux.yml"))
    assert len(examples) >= 3
    code, out, err = run(capsys, str(ROOT / "examples" / "*" / "gpux.yml"))
    assert code == 0, err
    assert out.splitlines() == [*(f"ok: {p}" for p in examples), f"{len(examples)} valid, 0 invalid"]
    for line in err.splitlines():  # files make_model.py writes: the model, and real samples where it makes them
        assert line.startswith("warning: ") and (" model.source: file not found: " in line or
                                                 " verify.data: file not found: " in line or
                                                 "postprocess.ctc.charset: file not found: " in line or
                                                 ".labels: labels file not found: " in line or
                                                 ".calibration: file not found: " in line), line


def test_examples_check_model(tmp_path: Path) -> None:
    """mlp and multi_input match the models make_model.py writes; resnet50 (100 MB, not generated here) is
    reported as missing with --check-model."""
    for name in ("mlp", "multi_input", "resnet50"):
        (tmp_path / name).mkdir()
        shutil.copy(ROOT / "examples" / name / "gpux.yml", tmp_path / name / "gpux.yml")
    for name in ("mlp", "multi_input"):  # each script's make(OUT_PATH), as `python make_model.py OUT_PATH` runs it
        runpy.run_path(str(ROOT / "examples" / name / "make_model.py"))["make"](tmp_path / name / "model.onnx")
    r = gpux("validate", "--check-model", "mlp", "multi_input", "resnet50", cwd=tmp_path)
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert r.stdout.splitlines() == ["ok: mlp/gpux.yml", "ok: multi_input/gpux.yml", "2 valid, 1 invalid"]
    assert r.stderr.splitlines() == [
        f"error: resnet50/gpux.yml:6:11 model.source: file not found: model.onnx (looked for "
        f"{tmp_path / 'resnet50' / 'model.onnx'}; paths are relative to gpux.yml)"]


def test_validate_many_files_imports_nothing_heavy(tree: Path) -> None:
    write(tree / "old" / "gpux.yml", "name: old\nmodel: {source: m.onnx}\ninputs: [{name: x, type: float32}]\n")
    r = run_blocked("validate", "--format", "github", "a", "c", "old", "nested", cwd=tree)
    assert r.returncode == ExitCode.CONFIG, r.stderr
    assert "LOADED=\n" in r.stderr


def test_no_model_checks_the_config_alone_without_missing_model_warnings(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "gpux.yml", "name: later\nmodel: {source: fetched-later.onnx}\n")
    code, out, err = run(capsys, str(tmp_path / "gpux.yml"), model=False)
    assert code == 0 and "warning" not in err and out.splitlines()[-1] == "1 valid, 0 invalid"
    code, out, err = run(capsys, str(tmp_path / "gpux.yml"))
    assert code == 0 and "file not found" in err, "without --no-model the missing file is still said"
