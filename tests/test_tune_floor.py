"""`gpux tune` never locks a candidate slower than the untuned default: the default (what `gpux build` picks with no
lock) is measured first, beside the lock in force, and beaten only by a candidate clearly faster in the same rounds;
a search cut short says what it left unmeasured and its lock says it is partial (run and inspect too); a lock made
on another CPU is not trusted; `gpux tune --table` prints the accuracy-gated table (text, JSON, CSV)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from gpux.bench import rounds
from gpux.bench.floor import DEFAULT, LOCK, ordered, said
from gpux.bench.table import FAILED, KEPT_NOT, VERIFIED, TableRow, to_csv
from gpux.bench.tune import Outcome, pick_best
from gpux.machine import cpu_model
from gpux.plan.lock import LOCK_NAME

from .conftest import gpux as cli

X = json.dumps({"x": [[0.5] * 8]})


def auto(project: Path, extra: str = "") -> Path:
    yml = project / "gpux.yml"
    yml.write_text(yml.read_text().replace("backend: cpu", "backend: auto") + extra)
    return project


def timed(provider: str, precision: str, scores: list[float], role: str = "") -> Outcome:
    """A measured candidate with these per-round median latencies (s)."""
    p50 = sorted(scores)[len(scores) // 2]
    return Outcome(provider=provider, precision=precision, options={"precision": precision}, status="ok", role=role,
                   row={"stats": {"p50": p50, "throughput": 1 / p50}, "round_scores": scores,
                        "verification_status": "verified"})


def test_the_default_is_kept_unless_a_candidate_is_clearly_faster_in_the_same_rounds() -> None:
    default = timed("openvino", "fp32", [1.0, 1.0, 1.0, 1.0, 1.0], role=DEFAULT)
    near = timed("cpu", "fp32", [0.97, 0.99, 0.96, 1.02, 0.98])  # faster in its median, but within 5 %
    assert pick_best([default, near], "latency") is default
    assert default.why.startswith("chosen: the untuned default; nothing measured was clearly faster (fastest: cpu fp32")
    assert near.why.startswith("within noise of the chosen one")
    default = timed("openvino", "fp32", [1.0, 1.0, 1.0, 1.0, 1.0], role=DEFAULT)
    clear = timed("cpu", "fp32", [0.5, 0.6, 0.55, 1.1, 0.5])  # lost one round of five: still clearly faster
    assert pick_best([default, clear], "latency") is clear
    assert "slower than the chosen one" in default.why
    # the one preferred among those within noise of the fastest is too noisy to clear the floor, the fastest does:
    # the fastest is locked, not the default (magika_filetype's rounds in docs/benchmarks.md)
    default = timed("openvino", "fp32", [8.3, 9.9, 8.9, 5.1, 10.0], role=DEFAULT)
    noisy = timed("openvino", "fp32", [5.3, 8.0, 10.2, 9.9, 5.5])
    fastest = timed("cpu", "fp32", [7.8, 7.9, 7.9, 8.1, 8.1])
    assert not rounds.clearly_faster(noisy.row["round_scores"], default.row["round_scores"], "latency")
    assert pick_best([default, noisy, fastest], "latency") is fastest
    unverified = timed("openvino", "fp32", [1.0] * 5, role=DEFAULT)
    unverified.row["verification_status"] = "unverified"  # what runs without a lock anyway: still the floor
    assert pick_best([unverified, timed("cpu", "fp32", [0.99] * 5)], "latency") is unverified


def test_the_default_is_built_as_declared_its_int8_calibration_kept(tmp_path: Path) -> None:
    """The default's candidate (no options of its own) and a lock of it build the declared block whole: fields that
    need another declared field beside them (calibration and keep_fp32 beside precision int8) are kept."""
    from gpux.bench.candidates import block_of
    from gpux.bench.floor import with_floor
    from gpux.bench.tune import TuneRequest, candidates
    from gpux.config.locate import open_project
    from gpux.plan.targets import fitted_options

    from .conftest import MLP_YML, make_mlp

    make_mlp(tmp_path / "model.onnx")
    (tmp_path / "cal.npz").write_bytes(b"")  # named files must exist to load (config.files); not read here
    yml = MLP_YML.format(name="m").replace("backend: cpu", "backend: auto")
    (tmp_path / "gpux.yml").write_text(yml + "providers:\n  openvino: {precision: int8, keep_fp32: 0.05, calibration: "
                                       "cal.npz}\n")
    project = open_project(str(tmp_path))
    provider = "openvino"
    declared = getattr(project.config.providers, provider)
    assert fitted_options(project, "openvino", {}) == {}
    assert fitted_options(project, "openvino", {"hint": "throughput"}) == {"hint": "throughput"}
    assert fitted_options(project, "openvino", {"precision": "fp32"}) == {"precision": "fp32", "calibration": None,
                                                                         "keep_fp32": 0}
    req = TuneRequest(target=str(tmp_path))
    outcomes, floor = with_floor(project, candidates(project, req), req)
    default = next(o for o in outcomes if o.role == DEFAULT)
    assert (floor.provider, floor.precision, default.provider) == ("openvino", "int8", "openvino")
    assert block_of(project, "openvino", default.options) == declared, "the default is what `gpux build` builds"


def test_the_likeliest_rows_come_first_and_refinements_last() -> None:
    cpu = [Outcome(provider="cpu", precision=p, options={"precision": p}) for p in ("fp32", "int8")]
    ov = [Outcome(provider="openvino", precision=p, options={"precision": p}) for p in ("fp32", "bf16", "int8")]
    refine = Outcome(provider="cpu", precision="int8", options={"keep_fp32": 0.05}, refines=cpu[1])
    got = ordered([cpu[0], cpu[1], refine, *ov], "openvino")
    assert got == [ov[0], cpu[0], ov[1], cpu[1], ov[2], refine]


def test_a_search_cut_short_never_locks_below_the_default_and_says_what_it_left_out(mlp_project: Path) -> None:
    auto(mlp_project)
    (mlp_project / LOCK_NAME).unlink(missing_ok=True)
    first = json.loads(cli("tune", str(mlp_project), "--providers", "cpu", "--precisions", "fp32", "--seconds", "0.1",
                           "--json").stdout)  # a lock to replace (cpu only: the default, openvino, is outside it)
    assert first["default"]["outside"] == "--providers cpu" and not any(c["role"] == DEFAULT
                                                                        for c in first["candidates"])
    r = cli("tune", str(mlp_project), "--seconds", "0.1", "--budget", "1", "--json")
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    roles = {c["role"]: c for c in lock["candidates"] if c["role"]}
    assert set(roles) == {DEFAULT, LOCK} and lock["candidates"][0]["role"] == DEFAULT
    default = roles[DEFAULT]
    assert (default["provider"], default["p50_ms"] is not None) == (lock["default"]["provider"], True)
    assert roles[LOCK]["options"] == first["choice"]["options"] and roles[LOCK]["p50_ms"] is not None
    chosen = next(c for c in lock["candidates"] if c["why"].startswith("chosen"))
    assert chosen is default or rounds.clearly_faster(chosen["round_scores"], default["round_scores"], "latency"), \
        "locked only if clearly faster than the default, measured in the same rounds"
    assert lock["choice"]["default"] == (chosen is default)
    cut = [c for c in lock["candidates"] if c["status"] == "over budget"]
    search = lock["search"]
    assert cut and search["partial"] and len(search["unmeasured"]) == len(cut) and search["candidates"] == len(
        lock["candidates"])
    assert all(c["p50_ms"] is None for c in cut)
    summary = said(lock)  # the lines the text summary prints after the table
    assert any(line.startswith(f"partial search: {len(cut)} of {len(lock['candidates'])} candidates not measured")
               for line in summary), summary
    assert json.loads((mlp_project / LOCK_NAME).read_text())["search"]["partial"]
    run = json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)
    assert run["request_source"] == LOCK_NAME and any("came from a partial search" in w for w in run["warnings"])
    inspected = json.loads(cli("inspect", str(mlp_project), "--json").stdout)
    assert inspected["lock"]["partial"].startswith(f"{len(cut)} of ")
    # the same lock measured on another CPU is not trusted here: run selects as usual and says on which it was
    doc = json.loads((mlp_project / LOCK_NAME).read_text())
    doc["fingerprint"]["cpu"] = "Some Other CPU @ 5GHz"
    (mlp_project / LOCK_NAME).write_text(json.dumps(doc))
    run = json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)
    assert run["request_source"] == "auto"
    assert any("measured on 'Some Other CPU @ 5GHz'" in w and "not trusted" in w for w in run["warnings"])
    assert json.loads(cli("inspect", str(mlp_project), "--json").stdout)["lock"] is None
    # this CPU's model, other instruction sets (AMX or AVX-512 on or off): not trusted either, the flags named
    doc["fingerprint"]["cpu"] = cpu_model()
    doc["fingerprint"]["cpu_flags"] = ["amx_tile", "no_such_flag"]
    (mlp_project / LOCK_NAME).write_text(json.dumps(doc))
    run = json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)
    assert run["request_source"] == "auto"
    assert any("cpu flags (measured with amx_tile no_such_flag;" in w for w in run["warnings"]), run["warnings"]
    # a lock written before the flags were recorded is judged on the rest
    del doc["fingerprint"]["cpu_flags"]
    (mlp_project / LOCK_NAME).write_text(json.dumps(doc))
    assert json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)["request_source"] == LOCK_NAME


def test_the_table_marks_each_row_and_the_one_tune_would_lock(mlp_project: Path) -> None:
    rng = np.random.default_rng(2)
    np.savez(mlp_project / "real.npz", x=rng.standard_normal((8, 1, 8)).astype(np.float32))
    auto(mlp_project, "verify: {min_cosine: 0.9999999, data: real.npz}\n")  # int8 cannot meet it; fp32 does
    page = mlp_project / "table.html"
    r = cli("tune", str(mlp_project), "--table", "--providers", "cpu", "--precisions", "fp32,int8", "--seconds", "0.1",
            "--json", "--report", str(page))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert not (mlp_project / LOCK_NAME).exists(), "--table writes no lock"
    rows: list[TableRow] = doc["table"]
    marks = {row["mark"] for row in rows}
    assert VERIFIED in marks and KEPT_NOT in marks
    assert all(row["p50_ms"] and row["vs_plain"] and row["size"] for row in rows if row["mark"] == VERIFIED)
    failed = [row for row in rows if row["status"] == "failed verification"]
    assert failed and all(row["mark"] == KEPT_NOT and "min_cosine 0.9999999" in row["detail"] for row in failed)
    assert all(row["metric"] == "cosine" and (row["value"] or 1.0) < 0.9999999 for row in failed)
    locked = [row for row in rows if row["locked"]]
    assert len(locked) == 1 and locked[0]["mark"] == VERIFIED
    assert (locked[0]["provider"], locked[0]["precision"]) == (doc["choice"]["provider"], doc["choice"]["precision"])
    absent = [row for row in rows if row["provider"] == "tensorrt"]
    assert absent and absent[0]["mark"] == FAILED and absent[0]["detail"], "a provider not here: why"
    html = page.read_text(encoding="utf-8")  # the tune page: each row with its mark, the one tune would lock
    assert "tune would lock" in html and f"{VERIFIED} ok" in html and f"{KEPT_NOT} failed verification" in html
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert [p["mark"] for p in parsed] == [row["mark"] for row in rows] and "vs_plain" in parsed[0]
    text = cli("tune", str(mlp_project), "--table", "--providers", "cpu", "--precisions", "fp32", "--seconds", "0.1",
               "--csv")
    assert text.returncode == 0, text.stderr
    table = list(csv.DictReader(io.StringIO(text.stdout)))
    assert {t["mark"] for t in table if t["provider"] == "cpu"} == {VERIFIED}
    assert sum(t["locked"] == "True" for t in table) == 1
    assert cli("tune", str(mlp_project), "--csv").returncode == 2, "--csv without --table is a usage error"
    both = cli("tune", str(mlp_project), "--table", "--csv", "--json")
    assert both.returncode == 2 and "--csv and --json both given" in both.stderr, both.stderr


def test_a_lossy_build_screened_by_its_speed_is_not_verified_published_or_remembered(mlp_project: Path) -> None:
    """Within tune's speed screen a lossy artifact is timed beside the plain session before it is verified; one
    under the screen in every round stops there (screened here at 100×, which every artifact is under), leaves
    nothing in the store and nothing remembered: the same build outside the screen is verified as ever."""
    import pytest

    from gpux.artifacts.build import build
    from gpux.bench.table import NOT_MEASURED, row_of
    from gpux.config.load import load_config
    from gpux.errors import TooSlow
    from gpux.quality.speed import screened

    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "providers:\n  cpu: {precision: int8, quantization: dynamic}\n")
    with screened(100.0), pytest.raises(TooSlow) as caught:
        build(load_config(mlp_project), "cpu")
    assert "× a plain fp32 session here" in caught.value.message and "under 100× in every round: not verified" \
        in caught.value.message, caught.value.message
    store = mlp_project / ".gpux" / "tiny-mlp"
    assert not [p for p in store.glob("*int8*") if (p / "manifest.json").exists()], "nothing published"
    built = build(load_config(mlp_project), "cpu").final.artifact
    assert built.manifest["verification"]["status"] not in ("skipped", None) and built.manifest["info"]["vs_plain"]
    row = row_of({"status": "too slow", "provider": "cpu", "precision": "int8", "why": caught.value.message})
    assert (row["mark"], row["status"], row["detail"]) == (NOT_MEASURED, "not measured", caught.value.message)
