"""`gpux init` on fully convolutional nets whose symbolic dims (height, width) cannot be 1 or 64: a chain of 3x3
stride-2 convolutions, then a max pool (the shape of MTCNN's PNet, deeper). It tries the documented larger size, takes
sizes from --shape NAME=SIZE, and says in one line which dims to size when none runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .conftest import gpux


def strided(folder: Path, convs: int) -> Path:
    """x float32 [1, 3, height, width] -> `convs` Conv 3x3 stride 2 (no padding) + Relu, then MaxPool 2x2: it runs
    only where height and width are at least about 2**(convs + 1)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev, channels = [], [], "x", 3
    for i in range(convs):
        w = (rng.standard_normal((8, channels, 3, 3)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], strides=[2, 2]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev, channels = f"r{i}", 8
    nodes.append(helper.make_node("MaxPool", [prev], ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    graph = helper.make_graph(
        nodes, "strided", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, None, None])], inits)
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(folder / "model.onnx"))
    return folder


def test_a_net_that_needs_more_than_64_gets_the_larger_default_and_builds_verified(tmp_path: Path) -> None:
    folder = strided(tmp_path / "six", 6)  # at least 190 x 190
    r = gpux("init", "model.onnx", "--json", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shapes"] == {"height": 256, "width": 256}
    assert "runs at height=256, width=256, written under shapes:" in r.stderr
    text = (folder / "gpux.yml").read_text()
    assert "shapes:" in text and "  height: 256" in text and "  width: 256" in text
    built = gpux("build", ".", "-p", "cpu", "--json", cwd=folder)
    assert built.returncode == 0, built.stderr
    verification = json.loads(built.stdout)["targets"][0]["verification"]
    assert verification["status"] == "verified" and verification["shapes"]["height"] == 256


def test_sizes_come_from_shape_and_a_net_no_default_fits_is_one_line_naming_the_dims(tmp_path: Path) -> None:
    folder = strided(tmp_path / "nine", 9)  # at least 1534 x 1534: no default fits
    r = gpux("init", "model.onnx", cwd=folder)
    assert r.returncode == 2 and not (folder / "gpux.yml").exists()
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "height, width at 1, 64 or 256" in line, line
    assert "gpux init model.onnx --shape height=SIZE --shape width=SIZE" in line and "Traceback" not in r.stderr
    small = gpux("init", "model.onnx", "--shape", "height=48", "--shape", "width=64", cwd=folder)
    assert small.returncode == 2 and "with height=48, width=64" in small.stderr, small.stderr
    typo = gpux("init", "model.onnx", "--shape", "hieght=2048", cwd=folder)
    assert typo.returncode == 2 and "no symbolic input dim 'hieght' (its dims: height, width)" in typo.stderr
    ok = gpux("init", "model.onnx", "--shape", "height=1600", "--shape", "width=1700", "--json", cwd=folder)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["shapes"] == {"height": 1600, "width": 1700} and "height" not in doc["fill_in"]
    assert "  height: 1600" in (folder / "gpux.yml").read_text()
    assert gpux("validate", ".", cwd=folder).returncode == 0


def test_a_net_that_runs_at_the_probe_size_is_written_as_before(tmp_path: Path) -> None:
    folder = strided(tmp_path / "two", 2)  # runs at 64 (and at 1 it would not)
    r = gpux("init", "model.onnx", "--json", cwd=folder)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shapes"] == {} and "\nshapes:" not in (folder / "gpux.yml").read_text()
