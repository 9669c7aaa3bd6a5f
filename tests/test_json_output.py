"""`--json` says what the text says: a fallback's skipped providers in `warnings`, one document on failure too;
where a provider choice came from; third-party libraries' output only with -v."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import gpux
from gpux.errors import UsageError

from .conftest import gpux as cli
from .conftest import make_mlp

X = json.dumps({"x": [[0.5] * 8]})
SKIPPED_CUDA = "skipped cuda (probe): "


def backend(project: Path, value: str, extra: str = "") -> Path:
    p = project / "gpux.yml"
    p.write_text(re.sub(r"backend: .*", f"backend: {value}", p.read_text()) + extra)
    return project


# -- 1. a fallback is in the JSON warnings, as in the text ----------------------------------------------
def test_run_json_warns_of_the_fallback_and_the_text_still_does(mlp_project: Path) -> None:
    backend(mlp_project, "[cuda, cpu]")  # no CUDA here: the run falls back to cpu
    r = cli("run", str(mlp_project), "--input", X, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["provider"] == "cpu" and doc["fell_back"]
    assert [w for w in doc["warnings"] if w.startswith(SKIPPED_CUDA)], doc["warnings"]
    text = cli("run", str(mlp_project), "--input", X)
    assert text.returncode == 0 and f"warning: {SKIPPED_CUDA}" in text.stderr, text.stderr


def test_a_provider_list_on_the_command_line_warns_too(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "-p", "tensorrt,cpu", "--input", X, "--json")
    assert r.returncode == 0, r.stderr
    assert any(w.startswith("skipped tensorrt (probe): ") for w in json.loads(r.stdout)["warnings"])


def test_no_fallback_no_warning(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--input", X, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == []


def test_benchmark_json_and_text_warn_of_the_fallback(mlp_project: Path) -> None:
    backend(mlp_project, "[cuda, cpu]")
    args = ("run", str(mlp_project), "--benchmark", "--runs", "3", "--warmup", "0", "--duration", "0")
    r = cli(*args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["results"][0]["status"] == "fell back to cpu"
    assert any(w.startswith(f"cpu fp32: {SKIPPED_CUDA}") for w in doc["warnings"]), doc["warnings"]
    text = cli(*args)
    assert text.returncode == 0 and f"warning: cpu fp32: {SKIPPED_CUDA}" in text.stderr, text.stderr


def test_build_and_inspect_json_warn_of_the_fallback(mlp_project: Path) -> None:
    backend(mlp_project, "[cuda, cpu]")
    built = cli("build", str(mlp_project), "--json")
    assert built.returncode == 0, built.stderr
    warnings = json.loads(built.stdout)["warnings"]
    assert any(w.startswith(SKIPPED_CUDA) for w in warnings) and "built for cpu instead of cuda" in warnings
    replayed = cli("build", str(mlp_project))  # an unchanged build, answered from its record: said once
    assert replayed.stderr.count("built for cpu instead of cuda") == 1, replayed.stderr
    seen = cli("inspect", str(mlp_project), "--json")
    assert seen.returncode == 0, seen.stderr
    assert any(w.startswith(SKIPPED_CUDA) for w in json.loads(seen.stdout)["warnings"])
    assert f"warning: {SKIPPED_CUDA}" in cli("inspect", str(mlp_project)).stderr


# -- 2. a failing --json command prints one document --------------------------------------------------
def error_of(r: object, code: int) -> dict[str, object]:
    assert r.returncode == code, (r.returncode, r.stderr)  # type: ignore[attr-defined]
    assert "error" in r.stderr.lower()  # type: ignore[attr-defined]
    doc = json.loads(r.stdout)  # type: ignore[attr-defined]  # exactly one document: json.loads refuses more
    assert set(doc) == {"error"} and doc["error"]["exit_code"] == code
    return doc["error"]


def test_missing_project_json_is_an_error_document(tmp_path: Path) -> None:
    err = error_of(cli("run", str(tmp_path / "nowhere"), "--input", X, "--json"), 3)
    assert "not found" in err["message"] and err["lines"]
    error_of(cli("inspect", str(tmp_path / "nowhere"), "--json"), 3)
    error_of(cli("build", str(tmp_path / "nowhere"), "--json"), 3)


def test_bad_input_json_is_an_error_document(mlp_project: Path) -> None:
    r = cli("run", str(mlp_project), "--input", json.dumps({"x": [[1.0]]}), "--json")
    err = error_of(r, 2)
    assert err["type"] == "InputError" and "dim 1 must be 8" in err["message"]
    assert "error: --input" in r.stderr


def test_usage_and_config_errors_are_documents_too(mlp_project: Path) -> None:
    err = error_of(cli("run", str(mlp_project), "--benchmark", "--runs", "0", "--json"), 2)
    assert "--runs" in err["message"] and err["hint"] == "see 'gpux run --help'"
    error_of(cli("validate", str(mlp_project), "--json", "--format", "github"), 2)
    bad = mlp_project / "gpux.yml"
    bad.write_text(bad.read_text().replace("backend: cpu", "backend: cdua"))
    err = error_of(cli("run", str(mlp_project), "--input", X, "--json"), 3)
    assert err["problems"] and "cdua" in json.dumps(err["problems"])


def test_validate_json_keeps_its_own_document_for_invalid_files(mlp_project: Path) -> None:
    bad = mlp_project / "gpux.yml"
    bad.write_text(bad.read_text().replace("backend: cpu", "backend: cdua"))
    r = cli("validate", str(bad), "--json")
    assert r.returncode == 3
    doc = json.loads(r.stdout)
    assert doc["valid"] is False and "error" not in doc


def test_without_json_stdout_stays_empty_on_failure(tmp_path: Path) -> None:
    r = cli("run", str(tmp_path / "nowhere"), "--input", X)
    assert r.returncode == 3 and r.stdout == "" and "error:" in r.stderr


# -- 3. where the provider choice came from --------------------------------------------------------------
def test_request_source_says_argument_for_the_api_and_flag_for_the_cli(mlp_project: Path) -> None:
    with gpux.load(mlp_project, provider="cpu") as session:
        assert session.report()["request_source"] == "argument"
    with gpux.load(mlp_project) as session:
        assert session.report()["request_source"] == "runtime.backend"
    r = cli("run", str(mlp_project), "--provider", "cpu", "--input", X, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["request_source"] == "--provider"
    with pytest.raises(UsageError, match=r"^argument: unknown provider 'cdua'"):
        gpux.load(mlp_project, provider="cdua")


# -- 4. third-party output only with -v ---------------------------------------------------------------------
def qdq_mlp(path: Path) -> Path:
    """An MLP whose input already passes a QuantizeLinear/DequantizeLinear pair: ONNX Runtime's quantizer
    warns on the root logger that the model may already be quantized."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    make_mlp(path)
    model = onnx.load(str(path))
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0.05, np.float32), "sc"),
                                    numpy_helper.from_array(np.array(0, np.int8), "zp")])
    qdq = [helper.make_node("QuantizeLinear", ["x", "sc", "zp"], ["xq"]),
           helper.make_node("DequantizeLinear", ["xq", "sc", "zp"], ["xd"])]
    model.graph.node[0].input[0] = "xd"
    nodes = qdq + list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(path))
    return path


def test_int8_build_keeps_the_quantizers_noise_for_verbose(mlp_project: Path) -> None:
    qdq_mlp(mlp_project / "model.onnx")
    backend(mlp_project, "cpu", "providers:\n  cpu: {precision: int8}\n")
    noise = "already quantized"
    quiet = cli("build", str(mlp_project), "--no-verify")
    assert quiet.returncode == 0, quiet.stderr
    assert noise not in quiet.stderr and "WARNING:root" not in quiet.stderr, quiet.stderr
    assert all(line.startswith(("warning: ", "note: ")) for line in quiet.stderr.splitlines()), quiet.stderr
    as_json = cli("build", str(mlp_project), "--no-verify", "--force", "--json")
    assert as_json.returncode == 0 and noise not in as_json.stderr, as_json.stderr
    json.loads(as_json.stdout)
    verbose = cli("build", str(mlp_project), "--no-verify", "--force", "-v")
    assert verbose.returncode == 0, verbose.stderr
    assert f"[onnxruntime.quantization] WARNING root: Please check if the model is {noise}" in verbose.stderr
