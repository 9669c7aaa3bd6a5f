"""Model problems named as model problems: broken files, versions newer than the installed runtimes,
dtypes gpux cannot exchange, inputs the model rejects; never a traceback, always a documented exit code."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import gpux as cli
from .conftest import write

FLOAT = TensorProto.FLOAT


def vi(name: str, elem: int = FLOAT, shape: list | None = None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [1, 4] if shape is None else shape)


def save(folder: Path, nodes: list, inputs: list, outputs: list, opset: int = 17, inits: list | None = None,
         **save_kw) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)])
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "model.onnx"), **save_kw)
    write(folder / "gpux.yml", "name: m\nmodel: {source: model.onnx}\n")
    return folder / "model.onnx"


def relu(folder: Path) -> Path:
    return save(folder, [helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")])


def restamp(path: Path, ir: int | None = None, opset: int | None = None) -> None:
    model = onnx.load(str(path))
    if ir is not None:
        model.ir_version = ir
    if opset is not None:
        model.opset_import[0].version = opset
    onnx.save(model, str(path))


def broken(kind: str, folder: Path) -> str:
    """A broken model of `kind`; returns a phrase its one-line error must contain."""
    if kind == "empty":
        relu(folder)
        (folder / "model.onnx").write_bytes(b"")
        return "no graph"
    if kind == "undefined-input":
        save(folder, [helper.make_node("Add", ["x", "missing"], ["y"])], [vi("x")], [vi("y")])
        return "missing"
    if kind == "opset-99":
        restamp(relu(folder), ir=10, opset=99)
        return "opset 99"
    if kind == "float8-output":
        save(folder, [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)], [vi("x")],
             [vi("y", TensorProto.FLOAT8E4M3FN)], opset=19)
        return "float8e4m3fn"
    if kind == "truncated-external-data":
        w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
        save(folder, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[1, 64])],
             [vi("y", shape=[1, 64])], inits=[w], save_as_external_data=True, location="weights.bin",
             size_threshold=0)
        data = folder / "weights.bin"
        data.write_bytes(data.read_bytes()[:100])
        return "weights.bin is truncated"
    raise AssertionError(kind)


KINDS = ("empty", "undefined-input", "opset-99", "float8-output", "truncated-external-data")


@pytest.mark.parametrize("kind", KINDS)
def test_check_model_build_and_run_name_a_broken_model(kind: str, tmp_path: Path) -> None:
    phrase = broken(kind, tmp_path)
    for args in (("validate", "--check-model"), ("build", "-p", "cpu"), ("build", "-p", "openvino")):
        r = cli(*args, str(tmp_path))
        assert r.returncode == 3, (kind, args, r.stderr)
        assert "Traceback" not in r.stderr and phrase in r.stderr, (kind, args, r.stderr)
        assert "model.source" in r.stderr
    r = cli("run", str(tmp_path), "-p", "cpu", "--input", json.dumps({"x": [[0.0] * 4]}))
    assert r.returncode == 3 and "Traceback" not in r.stderr and phrase in r.stderr


def test_plain_validate_checks_the_model_when_present_and_skips_it_on_request(tmp_path: Path) -> None:
    relu(tmp_path)
    write(tmp_path / "gpux.yml", "name: m\nmodel: {source: model.onnx}\ninputs:\n  x: {dtype: int64}\n")
    r = cli("validate", str(tmp_path))
    assert r.returncode == 3 and "declared int64 but the model has float32" in r.stderr
    assert cli("validate", "--no-model", str(tmp_path)).returncode == 0
    r = cli("validate", "--json", str(tmp_path))
    assert r.returncode == 3 and json.loads(r.stdout)["invalid"] == 1
    (tmp_path / "model.onnx").unlink()  # fetched later: plain validate checks the config alone
    r = cli("validate", str(tmp_path))
    assert r.returncode == 0, r.stderr
    r = cli("validate", "--check-model", str(tmp_path))
    assert r.returncode == 3 and "not found" in r.stderr


def test_an_ir_version_onnx_runtime_cannot_read_is_lowered_in_gpux_artifacts(tmp_path: Path) -> None:
    src = relu(tmp_path)
    restamp(src, ir=99)  # opset 17 needs only IR 8
    before = src.read_bytes()
    r = cli("validate", "--check-model", str(tmp_path))
    assert r.returncode == 0 and "warning:" in r.stderr and "lowers it to" in r.stderr, r.stderr
    r = cli("run", str(tmp_path), "-p", "cpu", "--json", "--input", json.dumps({"x": [[-1.0, 2.0, -3.0, 4.0]]}))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["outputs"]["y"]["data"] == [[0.0, 2.0, 0.0, 4.0]]
    assert "lowers it to" in r.stderr
    assert src.read_bytes() == before, "the user's model is never rewritten"
    assert not list(tmp_path.glob("*.onnx.data")) and sorted(p.name for p in tmp_path.iterdir() if
                                                              not p.name.startswith(".")) == ["gpux.yml", "model.onnx"]


def test_an_ir_version_that_cannot_be_lowered_is_refused_with_what_to_do(tmp_path: Path) -> None:
    from gpux.model.compat import ort_limits

    limits = ort_limits()
    assert limits is not None
    src = relu(tmp_path)
    restamp(src, ir=99, opset=limits[1] + 1)  # an opset newer than ONNX Runtime reads: no safe lowering
    r = cli("build", str(tmp_path), "-p", "cpu")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "newer than onnxruntime" in r.stderr and "version_converter" in r.stderr


def test_static_zero_dims_are_static_and_scalars_stay_scalars(tmp_path: Path) -> None:
    from gpux.model.inputs import cast
    from gpux.model.io import Tensor, read_io

    save(tmp_path, [helper.make_node("Identity", ["x"], ["y"])], [vi("x", shape=[0, 3])], [vi("y", shape=[0, 3])])
    assert read_io(tmp_path / "model.onnx").inputs[0].shape == (0, 3)
    scalar = cast(2.5, Tensor("s", "float32", ()))
    assert scalar.shape == () and scalar.dtype == np.float32


def test_a_scalar_input_keeps_its_rank_on_cpu_and_openvino(tmp_path: Path) -> None:
    save(tmp_path, [helper.make_node("Mul", ["x", "s"], ["y"])], [vi("x"), vi("s", shape=[])], [vi("y")])
    for provider in ("cpu", "openvino"):
        r = cli("run", str(tmp_path), "-p", provider, "--strict", "--json",
                "--input", json.dumps({"x": [[1.0, 2.0, 3.0, 4.0]], "s": 2.0}))
        assert r.returncode == 0, (provider, r.stderr)
        assert json.loads(r.stdout)["outputs"]["y"]["data"] == [[2.0, 4.0, 6.0, 8.0]]


def range_model(tmp_path: Path) -> None:
    """Range(0, n, 1): the output's length is the scalar input's value (a scalar, int64)."""
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    save(tmp_path, [helper.make_node("Range", ["zero", "n", "one"], ["y"])],
         [vi("n", TensorProto.INT64, [])], [vi("y", TensorProto.INT64, ["len"])], inits=[zero, one])


def test_generated_inputs_the_model_rejects_are_one_line_naming_what_to_declare(tmp_path: Path) -> None:
    """A lossless build is built and said unverified (fp32 runs what the model runs), --strict refuses it in one
    line naming what to declare, and the input in hand runs with the warning."""
    # Reshape to [2, 2] needs 4 elements: the generated batch=1 feed [1, 3] cannot be reshaped
    shape = numpy_helper.from_array(np.array([2, -1], np.int64), "shape")
    save(tmp_path, [helper.make_node("Reshape", ["x", "shape"], ["y"])], [vi("x", shape=["n", 3])],
         [vi("y", shape=[2, "m"])], inits=[shape])
    for provider in ("cpu", "openvino"):
        r = cli("build", str(tmp_path), "-p", provider)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert "UNVERIFIED at fp32 (the model rejects generated inputs: declare shapes:" in r.stdout, r.stdout
        strict = cli("build", str(tmp_path), "-p", provider, "--strict")
        assert strict.returncode == 1 and "generated verification inputs (dims n=1)" in strict.stderr
        assert strict.stderr.count("error:") == 1 and "[E:onnxruntime" not in strict.stderr, strict.stderr
        assert "reshape_helper.h" not in strict.stderr and "shapes:" in strict.stderr
    np.savez(tmp_path / "real.npz", x=np.arange(6, dtype=np.float32).reshape(2, 3))
    r = cli("run", str(tmp_path), "-p", "cpu", "--json", "--file", str(tmp_path / "real.npz"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["outputs"]["y"]["shape"] == [2, 3] and doc["verification"]["status"] == "unverified"
    (tmp_path / "gpux.yml").write_text((tmp_path / "gpux.yml").read_text() + "verify: {data: real.npz}\n")
    r = cli("run", str(tmp_path), "-p", "cpu", "--json", "--file", str(tmp_path / "real.npz"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verification"]["status"] == "verified"


def test_the_wire_reader_sees_what_onnx_sees(tmp_path: Path) -> None:
    from gpux.model import wire as onnxwire
    from gpux.model.io import _parse_io

    from .conftest import make_mlp, make_two_inputs

    for make in (make_mlp, make_two_inputs):
        path = make(tmp_path / f"{make.__name__}.onnx")
        wire, full = onnxwire.read_io(path), _parse_io(path)
        assert (wire.inputs, wire.outputs, wire.ir_version) == (full.inputs, full.outputs, full.ir_version)


def test_a_checked_model_opens_without_onnx_and_the_runtime_limits_are_kept_per_version(tmp_path: Path) -> None:
    """What ONNX Runtime reads is probed once (onnx and a session per try) and kept in the store per installed
    version: a process that opens an already checked model imports no onnx (a server's memory and start-up)."""
    import subprocess
    import sys

    relu(tmp_path)
    assert cli("build", str(tmp_path), "-p", "cpu").returncode == 0  # a first build: it makes the store and keeps
    assert (tmp_path / ".gpux" / ".model-io.json").is_file()     # what it read about the model there
    kept = json.loads((tmp_path / ".gpux" / ".ort-limits.json").read_text())
    [(key, limits)] = kept.items()
    assert key.startswith("onnxruntime ") and ", onnx " in key and limits[0] >= 7 and limits[1] >= 7
    code = ("import sys, numpy as np, gpux\n"
            f"s = gpux.load({str(tmp_path)!r}, provider='cpu')\n"
            "assert s.run({'x': np.array([[-1, 2, -3, 4]], np.float32)})['y'].tolist() == [[0, 2, 0, 4]]\n"
            "print('onnx' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr[-2000:]
    (tmp_path / ".gpux" / ".ort-limits.json").write_text(json.dumps({"onnxruntime 0.0, onnx 0.0": [7, 7]}))
    assert cli("validate", "--check-model", str(tmp_path)).returncode == 0
    assert len(json.loads((tmp_path / ".gpux" / ".ort-limits.json").read_text())) == 2, "another version's kept"


def test_a_remembered_reading_is_not_trusted_once_an_external_data_file_changes(tmp_path: Path) -> None:
    """The model's I/O is remembered by the .onnx file's size and mtime; a reading made while its external data
    file was missing must not hide that the file, once there, is truncated."""
    from gpux.model.io import read_io

    phrase = broken("truncated-external-data", tmp_path)
    data = tmp_path / "weights.bin"
    kept = data.read_bytes()
    data.unlink()
    memo = tmp_path / "memo.json"
    assert read_io(tmp_path / "model.onnx", memo).external_data == ("weights.bin",)
    assert memo.is_file()
    data.write_bytes(kept)  # back, and truncated
    assert any(phrase in p for p in read_io(tmp_path / "model.onnx", memo).problems)


def test_a_project_checks_its_model_again_once_an_external_data_file_changes(tmp_path: Path) -> None:
    """The checked model kept on an opened project is keyed by its external data files too: a file truncated
    (or replaced) between two opens in one process is noticed by the second."""
    from gpux.config.load import load_config
    from gpux.errors import ConfigError
    from gpux.model.io import check_model

    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"])], [vi("x", shape=[1, 64])],
         [vi("y", shape=[1, 64])], inits=[w], save_as_external_data=True, location="weights.bin", size_threshold=0)
    project = load_config(tmp_path)
    store = tmp_path / "store"
    store.mkdir()
    first = check_model(project, store)
    assert check_model(project, store) is first, "unchanged: kept"
    data = tmp_path / "weights.bin"
    kept = data.read_bytes()
    data.write_bytes(kept[:100])
    with pytest.raises(ConfigError, match=r"weights\.bin is truncated"):
        check_model(project, store)
    data.write_bytes(kept)  # replaced by whole data again: checked again, and fine
    assert check_model(project, store).io.external_data == ("weights.bin",)
