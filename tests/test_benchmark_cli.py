"""`gpux run --benchmark` end to end on real runtimes: document shape, all-providers table, CSV, baseline gate."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from .conftest import gpux as cli

QUICK = ("--runs", "20", "--warmup", "2", "--duration", "0")
X = json.dumps({"x": [[0.0] * 8]})


def test_json_document_carries_timings_and_environment(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--benchmark", *QUICK, "--batch", "4", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    env = doc["environment"]
    for key in ("gpux", "config_sha256", "cpu_model", "logical_cores", "os", "python", "threads", "protocol"):
        assert env[key] is not None, key
    [row] = doc["results"]
    assert row["provider"] == "cpu" and row["status"] == "ok" and row["runs_on"] == "CPUExecutionProvider"
    stats = row["stats"]
    assert stats["count"] >= 20 and len(row["latencies_ms"]) == stats["count"]
    assert stats["batch"] == 4 and row["shapes"] == {"x": [4, 8]}
    assert stats["percentile_method"] == "linear (type 7)"
    assert stats["min"] <= stats["p50"] <= stats["p99"] <= stats["max"]
    phases = row["phases"]
    assert phases["time_to_ready_s"] == phases["load_s"] + phases["first_inference_s"]
    assert row["artifact_sha256"] and row["versions"]["onnxruntime"]


def test_all_providers_table_names_every_provider_and_precision(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--benchmark", "--provider", "all", *QUICK, "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    got = {(x["provider"], x["precision"]): x for x in rows}
    for p in ("tensorrt", "cuda", "rocm", "coreml", "directml"):
        assert got[(p, "-")]["status"] == "unavailable" and got[(p, "-")]["error"]
    for p in ("cpu", "openvino"):
        for precision in ("fp32", "fp16", "int8"):
            row = got[(p, precision)]
            assert row["status"] == "ok", row
            assert row["artifact_size"] > 0 and row["accuracy"]["min_cosine"] > 0.9
    plain = got[("plain onnxruntime", "fp32")]  # what a user would write instead, measured beside gpux's rows
    assert plain["status"] == "baseline" and plain["stats"]["count"] >= 20
    text = cli("run", str(mlp_project), "--benchmark", "--provider", "all", *QUICK)
    assert "unavailable" not in text.stdout and "openvino" in text.stdout and "int8" in text.stdout
    assert "not on this machine: tensorrt, cuda, rocm, coreml, directml" in text.stderr
    assert "plain onnxruntime" in text.stdout and "against a plain onnxruntime session" in text.stderr
    warned = [line for line in text.stderr.splitlines() if line.startswith("warning:")]
    assert all("unverified" in line for line in warned), "providers absent from this machine are the normal case"
    assert any("int8" in line for line in warned), "int8 on generated data is said to be unverified"


def test_csv_output(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--benchmark", *QUICK, "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows[0]["provider"] == "cpu" and float(rows[0]["p50_ms"]) > 0
    assert float(rows[0]["median_ci_low_ms"]) <= float(rows[0]["p50_ms"]) <= float(rows[0]["median_ci_high_ms"])


GATED = ("--runs", "300", "--warmup", "20", "--duration", "0.5")
# a shared 2-core machine can halve a rerun's speed: the gate is tested with room for that, against a model
# ~4000x heavier, which no load on this machine hides
ROOMY = ("--max-regression", "300")


def test_baseline_gate_passes_a_rerun_and_fails_a_slower_model(mlp_project: Path, tmp_path: Path) -> None:
    """Two runs back to back: the second, gated on the first, passes. The same project with a far heavier
    model file (same provider and precision rows) fails the gate, labelled as an error, exit 1."""
    from .conftest import make_mlp

    first = cli("run", str(mlp_project), "--benchmark", *GATED, "--json")
    assert first.returncode == 0, first.stderr
    base = tmp_path / "base.json"
    base.write_text(first.stdout)
    again = cli("run", str(mlp_project), "--benchmark", *GATED, *ROOMY, "--baseline", str(base))
    assert again.returncode == 0, again.stderr
    assert "no regression" in again.stderr
    make_mlp(mlp_project / "model.onnx", hidden=65536)  # ~4000× the multiply-adds
    slow = cli("run", str(mlp_project), "--benchmark", *GATED, *ROOMY, "--baseline", str(base))
    assert slow.returncode == 1, slow.stderr
    assert "error: regression against" in slow.stderr and "cpu/fp32 median" in slow.stderr
    assert "warning: regression" not in slow.stderr


def test_a_baseline_that_is_not_a_benchmark_document_is_a_usage_error(mlp_project: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"results": 3}')
    r = cli("run", str(mlp_project), "--benchmark", *QUICK, "--baseline", str(bad))
    assert r.returncode == 2 and "not a gpux benchmark document" in r.stderr


def test_inputs_from_file_and_symbolic_shapes(tmp_path: Path) -> None:
    import numpy as np

    from .conftest import make_two_inputs, write

    make_two_inputs(tmp_path / "m.onnx")
    write(tmp_path / "gpux.yml", """\
        name: two
        model: {source: m.onnx}
        inputs:
          ids: {dtype: int64, shape: [batch, seq], range: [0, 10]}
          scale: {dtype: float32, shape: [batch, 1]}
        """)
    r = cli("run", str(tmp_path), "--benchmark", *QUICK, "--shape", "seq=16", "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["results"][0]["shapes"] == {"ids": [2, 16], "scale": [2, 1]}
    np.savez(tmp_path / "in.npz", ids=np.ones((3, 5), np.int64), scale=np.ones((3, 1), np.float32))
    r = cli("run", str(tmp_path), "--benchmark", *QUICK, "--file", str(tmp_path / "in.npz"), "--json")
    assert json.loads(r.stdout)["results"][0]["shapes"] == {"ids": [3, 5], "scale": [3, 1]}


@pytest.mark.parametrize(("args", "said"), [
    (["--input", X, "--runs", "5", "--csv"], "--runs, --csv are read by --benchmark, not by a run on --input"),
    (["--input", X, "--shape", "batch=2"], "--shape is read by --benchmark, not by a run on --input or --file"),
    (["--input", X, "--concurrency", "2"], "--concurrency is read by --benchmark or answering FILES on Ray, not by"),
    (["--benchmark", "--input", X], "--input is read by a run on --input or --file, not by --benchmark"),
    (["--benchmark", "--placement"], "--placement is read by a run on --input or --file or answering FILES, not by"),
    (["--benchmark", "--csv", "--json"], "--csv and --json both given: pick the one to write on stdout"),
])
def test_an_option_the_way_of_running_does_not_read_is_refused_not_ignored(mlp_project: Path, args: list[str],
                                                                             said: str) -> None:
    r = cli("run", str(mlp_project), *args)
    assert r.returncode == 2 and said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len([x for x in r.stderr.splitlines() if x.startswith("error:")]) == 1
    assert not any(mlp_project.rglob("manifest.json")), "refused before anything is built"
