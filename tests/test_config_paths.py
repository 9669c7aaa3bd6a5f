"""Paths and values as users write them: broken model files, -1 dims, YAML booleans as modes, relative paths
from any folder, bare .onnx files named in errors, `PATH: message` lines, `gpux schema --check`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpux.config.load import load_config
from gpux.errors import ConfigError
from tests.conftest import MLP_YML, ROOT, gpux, make_mlp, write


def _one_error(stderr: str) -> str:
    """The single `error:` line of a user error (no traceback, no second line)."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# ---- 1. truncated or invalid model files ------------------------------------------------------------
@pytest.fixture(params=["truncated", "garbage"])
def broken_project(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    model = make_mlp(tmp_path / "model.onnx")
    data = model.read_bytes()
    model.write_bytes(data[: len(data) // 2] if request.param == "truncated" else b"\xff\xfe not a model \x07" * 40)
    (tmp_path / "gpux.yml").write_text(MLP_YML.format(name="broken"))
    return tmp_path


@pytest.mark.parametrize("args", [("validate",), ("validate", "--check-model"), ("build",)])
def test_a_broken_model_file_is_a_config_error_naming_it(broken_project: Path, args: tuple[str, ...]) -> None:
    r = gpux(*args, str(broken_project))
    assert r.returncode == 3, r.stderr
    line = _one_error(r.stderr)
    assert "model.onnx" in line and "not a readable ONNX model" in line, line


@pytest.mark.parametrize("command", ["validate", "build"])
def test_a_broken_bare_model_file_is_a_config_error_naming_it(broken_project: Path, command: str) -> None:
    model = broken_project / "model.onnx"
    r = gpux(command, str(model))
    assert r.returncode == 3, r.stderr
    assert _one_error(r.stderr).startswith(f"error: {model}: not a readable ONNX model")


def test_the_wire_reader_fails_cleanly_at_every_truncation(tmp_path: Path) -> None:
    from gpux.model.wire import WireError, read_io

    data = make_mlp(tmp_path / "full.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    failures = 0
    for size in range(1, len(data)):
        cut.write_bytes(data[:size])
        try:
            read_io(cut)
        except WireError:
            failures += 1
    assert failures > 0
    assert [t.name for t in read_io(tmp_path / "full.onnx").inputs] == ["x"]


# ---- 2. dims written as -1 ----------------------------------------------------------------------------
def make_minus_one(path: Path) -> Path:
    """x float32 [-1, 3, -1, -1] -> y = relu(x), dims stored as dim_value -1 (as some exporters write)."""
    import onnx
    from onnx import TensorProto, helper

    shape = [-1, 3, -1, -1]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "minus_one",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


MINUS_ONE_YML = """\
name: minus-one
model:
  source: model.onnx
inputs:
  x: {dtype: float32, shape: [batch, 3, h, w]}
runtime:
  backend: cpu
"""


def test_minus_one_dims_are_dynamic_in_both_readers(tmp_path: Path) -> None:
    from gpux.model import io, wire

    model = make_minus_one(tmp_path / "model.onnx")
    for read in (wire.read_io, io.read_io):
        found = read(model)
        assert [t.shape for t in (*found.inputs, *found.outputs)] == [(None, 3, None, None)] * 2, read


def test_minus_one_dims_take_declared_names(tmp_path: Path) -> None:
    make_minus_one(tmp_path / "model.onnx")
    write(tmp_path / "gpux.yml", MINUS_ONE_YML)
    r = gpux("validate", str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = gpux("build", str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = gpux("run", str(tmp_path), "--input", '{"x": [[[[1.0, -2.0]], [[-3.0, 4.0]], [[5.0, -6.0]]]]}', "--json")
    assert r.returncode == 0, r.stderr
    assert '"y"' in r.stdout and "-2.0" not in r.stdout and "4.0" in r.stdout, r.stdout


def test_a_bare_model_with_minus_one_dims_runs(tmp_path: Path) -> None:
    model = make_minus_one(tmp_path / "model.onnx")
    r = gpux("run", str(model), "-p", "cpu", "--input", '{"x": [[[[-1.0]], [[2.0]], [[3.0]]]]}')
    assert r.returncode == 0, r.stderr


# ---- 3. YAML 1.1 booleans as mode names ---------------------------------------------------------------
TORCH_YML = """\
name: modes
model:
  source: model.pt
inputs:
  x: {{dtype: float32, shape: [batch, 4]}}
providers:
  cpu:
    runtime: torch
    torch: {{compile: {compile}}}
"""


@pytest.mark.parametrize(("written", "mode"), [("off", "off"), ("no", "off"), ("false", "off"), ("on", "default"),
                                               ("yes", "default"), ("max-autotune", "max-autotune")])
def test_compile_accepts_yaml_booleans(tmp_path: Path, written: str, mode: str) -> None:
    (tmp_path / "model.pt").write_bytes(b"")
    project = load_config(write(tmp_path / "gpux.yml", TORCH_YML.format(compile=written)))
    assert project.config.providers.cpu.torch.compile == mode


def test_other_mode_fields_accept_off(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    yml = MLP_YML.format(name="modes") + "providers:\n  cpu: {optimization: off}\n  coreml: {compression: off}\n"
    config = load_config(write(tmp_path / "gpux.yml", yml)).config
    assert (config.providers.cpu.optimization, config.providers.coreml.compression) == ("disabled", "none")


def test_a_boolean_without_a_mode_is_still_an_error(tmp_path: Path) -> None:
    make_mlp(tmp_path / "model.onnx")
    yml = MLP_YML.format(name="modes") + "providers:\n  cpu: {optimization: on}\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path / "gpux.yml", yml))
    [line] = caught.value.lines()
    assert "providers.cpu.optimization" in line and "disabled, basic, extended, all" in line, line


# ---- 4. paths relative to gpux.yml, whatever the working folder ---------------------------------------
def test_a_loaded_project_holds_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "models").mkdir()
    make_mlp(tmp_path / "models" / "model.onnx")
    write(tmp_path / "gpux.yml", MLP_YML.format(name="rel").replace("model.onnx", "models/model.onnx"))
    monkeypatch.chdir(tmp_path)
    project = load_config("gpux.yml")
    assert project.path == tmp_path / "gpux.yml" and project.root == tmp_path
    monkeypatch.chdir(tmp_path / "models")  # as a build step does: the same files still
    assert project.source == tmp_path / "models" / "model.onnx" and project.source.is_file()
    shown = str(load_config("../gpux.yml").problem(("inputs",), "checked"))
    assert shown == "../gpux.yml:6:3 inputs: checked"


def test_build_dot_inside_the_project(mlp_project: Path) -> None:
    r = gpux("build", ".", cwd=mlp_project)
    assert r.returncode == 0, r.stderr
    r = gpux("run", ".", "--input", '{"x": [[1, 2, 3, 4, 5, 6, 7, 8]]}', cwd=mlp_project)
    assert r.returncode == 0, r.stderr


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit.script: still the TorchScript way
def test_build_dot_inside_a_torch_project(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2

    torch.jit.script(Double()).save(str(tmp_path / "model.pt"))
    write(tmp_path / "gpux.yml", TORCH_YML.format(compile="off") + "runtime: {backend: cpu}\n")
    r = gpux("build", ".", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "torch-cpu-fp32" in r.stdout + r.stderr


# ---- 5. a bare .onnx file: errors name it -------------------------------------------------------------
def make_invalid_graph(path: Path) -> Path:
    """Two nodes writing the same output: the onnx checker rejects it (not in SSA form)."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "twice", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("args", [("build",), ("validate", "--check-model"),
                                  ("run", "--input", '{"x": [1.0]}')])
def test_errors_about_a_bare_model_name_the_model_file(tmp_path: Path, args: tuple[str, ...]) -> None:
    model = make_invalid_graph(tmp_path / "twice.onnx")
    r = gpux(args[0], str(model), *args[1:])
    assert r.returncode == 3, r.stderr
    line = _one_error(r.stderr)
    assert line.startswith(f"error: {model}: invalid ONNX graph"), line
    assert ".gpux.yml" not in r.stderr


def test_validate_reads_a_bare_model_as_a_model(tmp_path: Path) -> None:
    model = make_mlp(tmp_path / "model.onnx")
    r = gpux("validate", str(model))
    assert r.returncode == 0, r.stderr
    assert f"ok: {model}" in r.stdout


# ---- 6. `error: PATH: message` -------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "expected"), [(("build", "../nowhere"), "error: ../nowhere: file not found"),
                                                (("run", "/nonexistent"), "error: /nonexistent: file not found"),
                                                (("validate", "nope.onnx"), "error: nope.onnx: file not found")])
def test_path_errors_put_a_colon_after_the_path(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    (tmp_path / "here").mkdir()
    r = gpux(*args, cwd=tmp_path / "here")
    assert r.returncode == 3, r.stderr
    assert _one_error(r.stderr) == expected


# ---- 7. gpux schema --check ------------------------------------------------------------------------------
def test_schema_check_compares_with_the_checked_in_file() -> None:
    r = gpux("schema", "--check", cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "schemas/gpux.schema.json is up to date\n"


def test_schema_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    stale = tmp_path / "schemas" / "gpux.schema.json"
    stale.parent.mkdir()
    shutil.copy(ROOT / "schemas" / "gpux.schema.json", stale)
    stale.write_text(stale.read_text().replace('"title"', '"TITLE"', 1))
    r = gpux("schema", "--check", cwd=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    assert _one_error(r.stderr).startswith("error: schemas/gpux.schema.json: out of date")


def test_schema_check_without_a_file_asks_for_one(tmp_path: Path) -> None:
    r = gpux("schema", "--check", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert "pass -o FILE" in _one_error(r.stderr)
    r = gpux("schema", "--check", "-o", "mine.json", cwd=tmp_path)
    assert r.returncode == 1 and _one_error(r.stderr).startswith("error: mine.json: does not exist")


@pytest.mark.parametrize("store", ["file", "under-a-file"])
def test_a_store_no_folder_can_be_made_at_is_one_line_not_a_traceback(mlp_project: Path, tmp_path: Path,
                                                                      store: str) -> None:
    """--store (or $GPUX_STORE) naming a file, or a folder under one: build, run, use and tune each say the folder in
    one line (exit 2) and nothing is written."""
    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    where = tmp_path / "file" if store == "file" else tmp_path / "file" / "store"
    x = '{"x": [[0, 0, 0, 0, 0, 0, 0, 0]]}'
    for args in (["build", str(mlp_project)], ["run", str(mlp_project), "--input", x], ["use", "cpu", str(mlp_project)],
                 ["tune", str(mlp_project), "--seconds", "0.1"]):
        r = gpux(*args, "--store", str(where))
        said = "is a file" if store == "file" else "cannot create the folder"  # a file: click's own check says it
        assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = gpux("run", str(mlp_project), "--input", x, env={"GPUX_STORE": str(where)})
    assert r.returncode == 2 and "cannot create the folder" in r.stderr and "--store or $GPUX_STORE" in r.stderr, \
        r.stderr
    assert (tmp_path / "file").read_text(encoding="utf-8") == "not a folder"
