"""Several models, one runtime: the detect_classify example's matrix and offer, `gpux use` (refused outside
the offer, reset by the next build when it leaves it, refused while a benchmark holds the project), and its
pipeline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import gpux

from .conftest import gpux as cli


def edit(ws: Path, old: str, new: str) -> None:
    p = ws / "gpux.workspace.yml"
    text = p.read_text()
    assert old in text
    p.write_text(text.replace(old, new))


def no_classifier(ws: Path) -> None:
    """Disable the classifier (and its pipeline step, which would otherwise be a config error)."""
    edit(ws, "classifier: {path: classifier, enabled: true}", "classifier: {path: classifier, enabled: false}")
    edit(ws, "  - model: classifier\n    inputs: {features: detector.features}\n", "")


def test_inspect_shows_the_matrix_with_reasons_and_the_intersection(ws: Path) -> None:
    r = cli("inspect", str(ws), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["models"] == ["detector", "classifier"]
    assert doc["matrix"]["detector"]["openvino"] == {"ok": True, "why": None}
    assert "not in runtime.supported" in doc["matrix"]["classifier"]["openvino"]["why"]
    assert "PyTorch sources" in doc["matrix"]["detector"]["mps"]["why"], "ONNX cannot reach runtime torch"
    assert "openvino" not in doc["offer"] and "cpu" in doc["offer"]
    for p in doc["offer"]:
        assert all(doc["matrix"][m][p]["ok"] for m in doc["models"])
    assert doc["choice"] == {"provider": doc["offer"][0], "source": "auto"}
    assert doc["derived"]["classifier"]["artifact"].startswith("onnx-")
    text = cli("inspect", str(ws)).stdout
    assert "no: not in runtime.supported" in text and "offer (every enabled model runs it): " in text


def test_use_outside_the_offer_is_refused_naming_the_model(ws: Path) -> None:
    r = cli("use", "openvino", str(ws))
    assert r.returncode == 2
    assert "model 'classifier': not in runtime.supported" in r.stderr and "Traceback" not in r.stderr
    assert not (ws / ".gpux" / "detect-classify" / "use.json").exists()
    r = cli("build", str(ws), "--provider", "openvino", "--json")  # a one-off request is gated the same way
    assert r.returncode == 2 and "model 'classifier'" in r.stderr


def test_disabling_a_model_recomputes_the_offer_and_enabling_it_resets_the_saved_choice(ws: Path) -> None:
    no_classifier(ws)
    doc = json.loads(cli("inspect", str(ws), "--json").stdout)
    assert "openvino" in doc["offer"] and doc["disabled"] == ["classifier"]
    r = cli("use", "openvino", str(ws), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["saved"] == "openvino"
    assert json.loads(cli("inspect", str(ws), "--json").stdout)["choice"]["source"] == "gpux use"
    edit(ws, "enabled: false", "enabled: true")  # the classifier is back: openvino no longer fits both
    r = cli("inspect", str(ws), "--json")
    doc = json.loads(r.stdout)
    assert doc["choice"]["provider"] == doc["offer"][0] != "openvino"
    assert "(openvino) is no longer offered (model 'classifier': not in runtime.supported" in doc["warnings"][0]
    assert f"reset to {doc['offer'][0]}" in doc["warnings"][0]
    saved = ws / ".gpux" / "detect-classify" / "use.json"
    assert json.loads(saved.read_text())["provider"] == "openvino", "inspect reads only"
    r = cli("build", str(ws), "--json")  # a build settles the choice: the reset is saved
    assert r.returncode == 0, r.stderr
    assert json.loads(saved.read_text())["provider"] == doc["offer"][0]
    assert json.loads(cli("inspect", str(ws), "--json").stdout)["warnings"] == []
    r = cli("use", "auto", str(ws), "--json")
    assert json.loads(r.stdout)["saved"] is None


def test_pipeline_matches_running_the_two_models_by_hand(ws: Path, tmp_path: Path) -> None:
    image = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "in.npz", image=image)
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "--provider", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["source"] == "--provider"
    with gpux.load(ws / "detector", provider="cpu") as det, gpux.load(ws / "classifier", provider="cpu") as cls:
        by_hand = cls.run(features=det.run(image=image)["features"])["probs"]
    np.testing.assert_allclose(np.asarray(doc["outputs"]["classifier.probs"]), by_hand, rtol=1e-6, atol=1e-7)
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "-o", str(tmp_path / "out.npz"))
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["classifier.probs"], by_hand, rtol=1e-6, atol=1e-7)
    r = cli("run", str(ws), "--benchmark", "--csv")
    assert r.returncode == 2 and "--csv: not supported when running a workspace's pipeline" in r.stderr


def test_pipeline_benchmark_reports_each_step_and_end_to_end(ws: Path) -> None:
    r = cli("run", str(ws), "--benchmark", "--runs", "20", "--warmup", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["step"] for s in doc["steps"]] == ["detector", "classifier"] and doc["runs"] == 20
    e2e, steps = doc["end_to_end"], doc["steps"]
    assert e2e["mean_ms"] >= sum(s["mean_ms"] for s in steps) * 0.99  # the whole covers its parts


def test_use_is_refused_while_a_benchmark_runs_and_allowed_after_it_is_killed(ws: Path) -> None:
    bench = subprocess.Popen([sys.executable, "-m", "gpux", "run", str(ws), "--benchmark", "--runs", "2000000"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        refused = None
        for _ in range(120):  # bounded: up to about a minute for the benchmark to start
            r = cli("use", "cpu", str(ws))
            if r.returncode != 0:
                refused = r
                break
            assert bench.poll() is None, "the benchmark ended before it was seen holding the project"
            time.sleep(0.5)
        assert refused is not None and refused.returncode == 1
        assert "is in use by gpux run --benchmark (pid" in refused.stderr and str(bench.pid) in refused.stderr
    finally:
        bench.send_signal(signal.SIGKILL)
        bench.wait(timeout=30)
    r = cli("use", "cpu", str(ws))
    assert r.returncode == 0, r.stderr
    assert not list((ws / ".gpux" / "detect-classify" / ".in-use").iterdir()), "the dead holder's files tidied"


def test_single_project_use_is_followed_and_a_flag_never_changes_it(mlp_project: Path) -> None:
    assert cli("use", "cpu", str(mlp_project)).returncode == 0
    doc = json.loads(cli("inspect", str(mlp_project), "--json").stdout)
    assert doc["saved"] == "cpu" and doc["selection"]["source"] == "gpux use"
    r = cli("run", str(mlp_project), "--provider", "openvino", "--input", json.dumps({"x": [[0.0] * 8]}), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(cli("inspect", str(mlp_project), "--json").stdout)["saved"] == "cpu"
    r = cli("run", str(mlp_project), "--input", json.dumps({"x": [[0.0] * 8]}), "--json", env={"GPUX_PROVIDER": "cpu"})
    assert json.loads(r.stdout)["request_source"] == "GPUX_PROVIDER"


def test_a_saved_choice_the_model_no_longer_supports_is_reset_with_the_reason(mlp_project: Path) -> None:
    assert cli("use", "openvino", str(mlp_project)).returncode == 0
    p = mlp_project / "gpux.yml"
    p.write_text(p.read_text().replace("runtime:\n", "runtime:\n  supported: [cpu]\n"))
    r = cli("run", str(mlp_project), "--input", json.dumps({"x": [[0.0] * 8]}), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["request_source"] == "gpux use"
    assert any("(openvino) is no longer offered" in w and "reset to cpu" in w for w in doc["warnings"])


def test_serve_runs_every_model_and_the_pipeline_on_the_one_choice_and_holds_the_project(ws: Path) -> None:
    from tests.serving import post
    from tests.test_serve_cli import Process

    chosen = json.loads(cli("inspect", str(ws), "--json").stdout)["choice"]["provider"]
    p = Process(str(ws))
    try:
        p.start()
        for _ in range(120):  # bounded: every model loaded and warmed up
            if post(p.http, "/v2/health/ready", b"", method="GET")[0] == 200:
                break
            time.sleep(0.5)
        for name in ("detector", "classifier"):
            meta = json.loads(post(p.http, f"/v2/models/{name}", b"", method="GET")[2])
            assert meta["platform"] == f"gpux_{chosen}"
        image = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
        body = {"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 3, 32, 32],
                            "data": image.ravel().tolist()}]}
        status, _, raw = post(p.http, "/v2/models/detect-classify/infer", json.dumps(body))
        assert status == 200, raw
        (out,) = json.loads(raw)["outputs"]
        with gpux.load(ws / "detector", provider=chosen) as det, gpux.load(ws / "classifier", provider=chosen) as c:
            by_hand = c.run(features=det.run(image=image)["features"])["probs"]
        assert out["name"] == "classifier.probs" and out["shape"] == [1, 5]
        np.testing.assert_allclose(np.asarray(out["data"]).reshape(1, 5), by_hand, rtol=1e-5, atol=1e-6)
        r = cli("use", "cpu", str(ws))
        assert r.returncode == 1 and "in use by gpux serve" in r.stderr
    finally:
        p.stop()
    assert cli("use", "cpu", str(ws)).returncode == 0


def test_artifacts_are_built_on_first_use_unless_the_workspace_pins_them(ws: Path, tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 3, 32, 32), np.float32))
    edit(ws, "build_on_run: true", "build_on_run: false")
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"))
    assert r.returncode == 4 and "none built yet" in r.stderr and "gpux build" in r.stderr, r.stderr
    edit(ws, "build_on_run: false", "build_on_run: true")
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "-v")  # first use: built, and said so
    assert r.returncode == 0, r.stderr
    assert "building onnx-" in r.stderr and "classifier.probs" in r.stdout
    edit(ws, "build_on_run: true", "build_on_run: false")  # pinned again: what was built runs
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "-v")
    assert r.returncode == 0, r.stderr
    assert "building" not in r.stderr and "cached" in r.stderr


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("{features: detector.features}", "{features: detector.boxes}",
     "pipeline.1.inputs.features: 'detector.boxes' is not an output of an earlier step"),
    ("{features: detector.features}", "{feats: detector.features}", "'feats' is not an input of 'classifier'"),
    ("  - model: detector ", "  - model: detektor ", "no model 'detektor' in models:"),
])
def test_a_miswired_pipeline_is_a_config_error_naming_the_step(ws: Path, tmp_path: Path, old: str, new: str,
                                                                 expected: str) -> None:
    edit(ws, old, new)
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 3, 32, 32), np.float32))
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"))
    assert r.returncode == 3 and expected in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_triton_export_writes_each_model_and_the_pipeline_as_an_ensemble(ws: Path, tmp_path: Path) -> None:
    from google.protobuf import text_format
    from google.protobuf.json_format import MessageToDict
    from tritonclient.grpc import model_config_pb2

    r = cli("export", "triton", str(ws), "-o", str(tmp_path / "repo"), "-p", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert [m["name"] for m in json.loads(r.stdout)["models"]] == ["detector", "classifier", "detect-classify"]
    text = (tmp_path / "repo" / "detect-classify" / "config.pbtxt").read_text()
    cfg = MessageToDict(text_format.Parse(text, model_config_pb2.ModelConfig()), preserving_proto_field_name=True)
    assert cfg["platform"] == "ensemble" and (tmp_path / "repo" / "detect-classify" / "1").is_dir()
    steps = cfg["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["detector", "classifier"]
    known = {t["name"] for t in cfg["input"]}  # Triton's rule: a step reads ensemble inputs or earlier outputs
    for s in steps:
        assert set(s["input_map"].values()) <= known
        known |= set(s["output_map"].values())
    assert {t["name"] for t in cfg["output"]} == {"classifier.probs"} <= known
    import onnxruntime as ort

    image = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    tensors = {"image": image}
    for s in steps:  # the exported files, wired as the ensemble says, give what gpux's pipeline gives
        sess = ort.InferenceSession(str(tmp_path / "repo" / s["model_name"] / "1" / "model.onnx"))
        outs = dict(zip([o.name for o in sess.get_outputs()],
                        sess.run(None, {k: tensors[v] for k, v in s["input_map"].items()}), strict=True))
        tensors.update({v: outs[k] for k, v in s["output_map"].items()})
    np.savez(tmp_path / "in.npz", image=image)
    doc = json.loads(cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "-p", "cpu", "--json").stdout)
    np.testing.assert_allclose(tensors["classifier.probs"], np.asarray(doc["outputs"]["classifier.probs"]),
                               rtol=1e-5, atol=1e-6)


def test_validate_checks_the_workspace_file_and_other_commands_say_it_is_one(ws: Path) -> None:
    r = cli("validate", str(ws))
    assert r.returncode == 0 and "ok: " + str(ws / "gpux.workspace.yml") in r.stdout, r.stdout + r.stderr
    edit(ws, "detector: {path: detector}", "detector: {path: detector, enabeld: true}")
    r = cli("validate", str(ws))
    assert r.returncode == 3 and "models.detector.enabeld: unknown key 'enabeld' (did you mean 'enabled'?)" in r.stderr
    r = cli("package", str(ws), "--dockerfile-only", str(ws / "ctx"))
    assert r.returncode == 3 and "holds a workspace" in r.stderr


def test_package_follows_the_saved_choice(mlp_project: Path) -> None:
    assert cli("use", "openvino", str(mlp_project)).returncode == 0
    r = cli("package", str(mlp_project), "--dockerfile-only", str(mlp_project / "ctx"), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["provider"] == "openvino"


def test_a_dry_run_of_a_workspace_plans_and_builds_nothing(ws: Path) -> None:
    r = cli("build", str(ws), "--provider", "cpu", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plans = json.loads(r.stdout)["models"]
    assert set(plans) == {"detector", "classifier"} and all(p["targets"] and p["provider"] == "cpu"
                                                              for p in plans.values())
    assert not list(ws.rglob("manifest.json")), "a dry run builds nothing"
    text = cli("build", str(ws), "--provider", "cpu", "--dry-run")
    assert text.returncode == 0 and text.stdout.count("plan for ") == 2, text.stdout
    r = cli("build", str(ws), "--provider", "cpu", "--json")
    built = json.loads(r.stdout)["models"]
    for name, plan in plans.items():  # the plan's keys are the folders the build then made
        assert {f"{t['id']}-{t['key'][:12]}" for t in plan["targets"]} == \
            {Path(t["path"]).parent.name for t in built[name]["targets"]}, (plan, built[name])


def test_flag_and_env_win_over_the_saved_choice_without_changing_it(ws: Path) -> None:
    assert cli("use", "cpu", str(ws)).returncode == 0
    r = cli("build", str(ws), "--provider", "auto", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["source"] == "--provider", r.stderr
    r = cli("build", str(ws), "--json", env={"GPUX_PROVIDER": "openvino"})  # the env var is gated as well
    assert r.returncode == 2 and "GPUX_PROVIDER: openvino is not offered: model 'classifier'" in r.stderr
    doc = json.loads(cli("inspect", str(ws), "--json").stdout)
    assert doc["saved"] == "cpu" and doc["choice"] == {"provider": "cpu", "source": "gpux use"}


def test_cache_prune_keeps_the_saved_choice_and_in_use_locks(mlp_project: Path) -> None:
    from gpux.run.inuse import holders, holding

    assert cli("use", "cpu", str(mlp_project)).returncode == 0
    with holding("tiny-mlp", mlp_project, None, "a test"):
        assert cli("cache", "prune", "--all", str(mlp_project)).returncode == 0
        held = holders("tiny-mlp", mlp_project, None)  # this process holds it: still seen after the prune
        assert len(held) == 1 and f"a test (pid {os.getpid()}" in held[0]
    assert holders("tiny-mlp", mlp_project, None) == []
    assert json.loads(cli("inspect", str(mlp_project), "--json").stdout)["saved"] == "cpu"


def test_a_pipeline_run_without_inputs_is_refused_before_any_model_is_built(ws: Path, tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 3, 32, 32), np.float32))
    for given in ([], ["--input", '{"image": 0}', "--file", str(tmp_path / "in.npz")]):
        r = cli("run", str(ws), *given)
        assert r.returncode == 2 and "pass one of --input or --file (or --benchmark)" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and "building" not in r.stderr
    assert not any(ws.rglob("manifest.json")), "nothing was built for a run that could not start"


def test_a_shape_no_model_has_is_refused_before_anything_is_built(ws: Path, mlp_project: Path) -> None:
    """--shape NAME=SIZE names a symbolic dim of the model's inputs (in a workspace: of any of its models'); a
    misspelt one would key a new artifact sized as if it were not given."""
    r = cli("build", str(mlp_project), "--shape", "btach=4")
    assert r.returncode == 2 and "--shape btach=...: tiny-mlp has no symbolic input dim 'btach' (its dims: batch)" \
        in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not any(mlp_project.rglob("manifest.json"))
    r = cli("build", str(ws), "--shape", "btach=4")
    assert r.returncode == 2 and "detector or classifier has no symbolic input dim 'btach'" in r.stderr, r.stderr
    assert not any(ws.rglob("manifest.json"))
    assert cli("build", str(mlp_project), "--shape", "batch=4", "-p", "cpu").returncode == 0


def test_a_pipeline_option_its_run_does_not_read_is_refused(ws: Path, tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", image=np.zeros((1, 3, 32, 32), np.float32))
    r = cli("run", str(ws), "--file", str(tmp_path / "in.npz"), "--runs", "5")
    assert r.returncode == 2 and "--runs: not supported when running a workspace's pipeline once" in r.stderr
    r = cli("run", str(ws), "--benchmark", "--file", str(tmp_path / "in.npz"))
    assert r.returncode == 2 and "--file: not supported when running a workspace's pipeline" in r.stderr
    assert not any(ws.rglob("manifest.json"))
