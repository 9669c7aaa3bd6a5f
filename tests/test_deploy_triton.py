"""Triton model repositories: configs parsed with Triton's own ModelConfig protobuf (from tritonclient's grpc
package) and checked against Triton's rules the proto does not enforce; real artifacts in the version folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import model_config_pb2

from gpux.config.load import load_config
from gpux.deploy import triton
from gpux.errors import UsageError

from .conftest import MLP_YML, make_mlp
from .conftest import gpux as cli

PROVIDER_BLOCKS = {
    "cpu": "  cpu: {precision: fp32}",
    "openvino": "  openvino: {hint: throughput, streams: 2}",
    "cuda": "  cuda: {device_id: 1}",
    "tensorrt": "  tensorrt: {precision: fp16, workspace: 2GB, device_id: 0}",
}


def make_static(path: Path) -> Path:
    """x float32 [3, 4] -> y float32 [3, 4]: no symbolic dim, so nothing to batch along."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "static",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    onnx.save(helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def project(root: Path, provider: str, batch: int, static: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if static:
        make_static(root / "model.onnx")
        text = "name: static-relu\nversion: 1.0.0\nmodel: {source: model.onnx}\n"
    else:
        make_mlp(root / "model.onnx")
        text = MLP_YML.format(name="tiny-mlp")
    text += f"serve: {{max_batch_size: {batch}, max_queue_delay_us: 250, instances: 2}}\n"
    (root / "gpux.yml").write_text(text + f"providers:\n{PROVIDER_BLOCKS[provider]}\n")
    return root


def parsed(folder: Path) -> dict[str, Any]:
    message = text_format.Parse((folder / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return MessageToDict(message, preserving_proto_field_name=True)


@pytest.mark.parametrize("provider", list(PROVIDER_BLOCKS))
@pytest.mark.parametrize("static", [False, True], ids=["dynamic-batch", "static"])
def test_repositories_parse_with_tritons_model_config_and_pass_the_rules(tmp_path: Path, provider: str,
                                                                         static: bool) -> None:
    proj = load_config(project(tmp_path / "p", provider, 0 if static else 8, static))
    out = triton.export(proj, provider, tmp_path / "repo")
    cfg = parsed(out.folder)
    ranks = {"x": 2, "y": 2, "probs": 2}
    assert triton.check(cfg, out.folder, ranks) == []
    assert cfg["name"] == out.folder.name == proj.name
    assert int(cfg.get("max_batch_size", 0)) == (0 if static else 8)
    first = cfg["input"][0]
    assert first["data_type"] == "TYPE_FP32"
    assert [int(d) for d in first["dims"]] == ([3, 4] if static else [8]), "batch dim dropped when batching"
    assert ("dynamic_batching" in cfg) is not static
    [group] = cfg["instance_group"]
    assert int(group["count"]) == 2
    if provider in ("cuda", "tensorrt"):
        assert group["kind"] == "KIND_GPU" and [int(g) for g in group["gpus"]] == [1 if provider == "cuda" else 0]
    else:
        assert group.get("kind", "KIND_AUTO") == "KIND_CPU"
    files = sorted(p.name for p in (out.folder / "1").iterdir())
    if provider == "openvino":
        assert cfg["backend"] == "openvino" and files == ["model.bin", "model.xml"]
        assert cfg["parameters"]["PERFORMANCE_HINT"]["string_value"] == "THROUGHPUT"
        assert cfg["parameters"]["NUM_STREAMS"]["string_value"] == "2"
    else:
        assert cfg["platform"] == "onnxruntime_onnx" and files == ["model.onnx"]
    if provider == "tensorrt":
        [acc] = cfg["optimization"]["execution_accelerators"]["gpu_execution_accelerator"]
        assert acc["name"] == "tensorrt" and acc["parameters"]["precision_mode"] == "FP16"
        assert acc["parameters"]["max_workspace_size_bytes"] == "2000000000"


def test_the_exported_onnx_runs_like_gpux(tmp_path: Path) -> None:
    import numpy as np
    import onnxruntime as ort

    proj = load_config(project(tmp_path / "p", "cpu", 8))
    out = triton.export(proj, "cpu", tmp_path / "repo")
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    [got] = ort.InferenceSession(str(out.folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    with __import__("gpux").load(tmp_path / "p", provider="cpu") as s:
        np.testing.assert_allclose(got, s.run({"x": x})["probs"], rtol=1e-6)


@pytest.mark.parametrize("mistake,expected", [
    (lambda c: c["input"][0].update(dims=["-1", "8"]), "dims must leave out the batch dim"),
    (lambda c: c.update(name="other"), "differs from its folder"),
    (lambda c: c.update(max_batch_size=0), "dynamic_batching needs max_batch_size > 0"),
    (lambda c: c["output"][0].update(dims=["0"]), "positive or -1"),
    (lambda c: c.update(backend="openvino"), "exactly one of platform and backend"),
])
def test_wrong_configs_are_caught_by_the_rules(tmp_path: Path, mistake: Any, expected: str) -> None:
    out = triton.export(load_config(project(tmp_path / "p", "cpu", 8)), "cpu", tmp_path / "repo")
    cfg = parsed(out.folder)
    mistake(cfg)
    assert any(expected in p for p in triton.check(cfg, out.folder, {"x": 2, "probs": 2}))


def test_missing_files_and_bad_version_folders_are_caught(tmp_path: Path) -> None:
    out = triton.export(load_config(project(tmp_path / "p", "openvino", 0)), "openvino", tmp_path / "repo")
    (out.folder / "1" / "model.bin").unlink()
    (out.folder / "v2").mkdir()
    found = triton.check(parsed(out.folder), out.folder)
    assert "1/model.bin is missing" in found and any("'v2' is not a positive integer" in f for f in found)


def test_batching_a_model_without_a_batch_dim_is_refused(tmp_path: Path) -> None:
    proj = load_config(project(tmp_path / "p", "cpu", 4, static=True))
    with pytest.raises(UsageError, match="do not share a symbolic leading"):
        triton.export(proj, "cpu", tmp_path / "repo")
    assert not (tmp_path / "repo" / "static-relu").exists()


def test_cli_writes_several_models_and_refuses_providers_triton_lacks(tmp_path: Path) -> None:
    a = project(tmp_path / "a", "cpu", 8)
    b = project(tmp_path / "b", "openvino", 0, static=True)
    r = cli("export", "triton", str(a), str(b), "-o", str(tmp_path / "repo"), "--version", "3", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [(m["name"], m["version"]) for m in doc["models"]] == [("tiny-mlp", 3), ("static-relu", 3)]
    assert (tmp_path / "repo" / "tiny-mlp" / "3" / "model.onnx").is_file()
    r = cli("export", "triton", str(a), "-o", str(tmp_path / "repo2"), "-p", "directml")
    assert r.returncode == 2 and "cannot package directml" in r.stderr
    r = cli("export", "triton", str(a), "-o", str(tmp_path / "repo2"), "-p", "rocm")
    assert r.returncode == 2 and "Triton has no backend" in r.stderr


def test_declared_steps_are_named_as_not_carried(tmp_path: Path) -> None:
    """A project with postprocess exports its tensors and says which declared steps Triton lacks."""
    proj = tmp_path / "p"
    proj.mkdir()
    make_mlp(proj / "model.onnx")
    text = MLP_YML.format(name="steps").replace("labels: [", "postprocess: {{softmax: true, topk: 3}}, labels: [")
    (proj / "gpux.yml").write_text(text.replace("{{", "{").replace("}}", "}"))
    r = cli("export", "triton", str(proj), "-o", str(tmp_path / "repo"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    [model] = json.loads(r.stdout)["models"]
    assert model["not_carried"] == ["outputs.probs.postprocess"]
    r = cli("export", "triton", str(proj), "-o", str(tmp_path / "repo"), "-p", "cpu")
    assert r.returncode == 0 and "outputs.probs.postprocess declared in gpux.yml are not carried" in r.stderr
