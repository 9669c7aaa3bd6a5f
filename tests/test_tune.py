"""`gpux tune` on real ONNX Runtime: candidates verified then measured, the fastest verified one locked, and
the lock followed only on the machine, runtimes, config and model it was measured with."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpux.bench.command import verification_status
from gpux.bench.tune import UNVERIFIED, Outcome, pick_best, why_cell
from gpux.plan.lock import LOCK_NAME

from .conftest import gpux as cli

X = json.dumps({"x": [[0.5] * 8]})
QUICK = ("--providers", "cpu", "--seconds", "0.2")


def auto(project: Path, extra: str = "") -> Path:
    yml = project / "gpux.yml"
    yml.write_text(yml.read_text().replace("backend: cpu", "backend: auto") + extra)
    return project


def test_tune_locks_the_fastest_verified_candidate_and_run_follows_it(mlp_project: Path) -> None:
    auto(mlp_project)
    r = cli("tune", str(mlp_project), *QUICK, "--precisions", "fp32,int8", "--json")
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    assert json.loads((mlp_project / LOCK_NAME).read_text())["choice"] == lock["choice"]
    measured = [c for c in lock["candidates"] if c["status"] in ("ok", "unverified")]  # int8 on generated data
    assert {c["precision"] for c in measured} == {"fp32", "int8"}
    assert all(c["accuracy"]["min_cosine"] > 0.98 and c["p50_ms"] > 0 for c in measured)
    fastest = max((c for c in measured if c["status"] == "ok"), key=lambda c: c["vs_plain_ort"]["paired"])  # tune's
    # own measure: the median round ratio over the plain session, which the rounds share
    chosen = next(c for c in measured if c["why"].startswith("chosen"))
    assert lock["choice"]["options"] == chosen["options"]
    assert chosen is fastest or "within noise of the fastest" in chosen["why"], chosen["why"]
    run = json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)
    assert run["request_source"] == LOCK_NAME and run["provider"] == "cpu"
    forced = json.loads(cli("run", str(mlp_project), "-p", "openvino", "--input", X, "--json").stdout)
    assert forced["request_source"] == "--provider", "a flag wins over the lock"
    inspected = json.loads(cli("inspect", str(mlp_project), "--json").stdout)
    assert inspected["lock"]["provider"] == "cpu"
    assert inspected["lock"]["options"]["precision"] == lock["choice"]["options"]["precision"]


def test_a_candidate_failing_its_tolerance_is_out_and_says_by_how_much(mlp_project: Path) -> None:
    import numpy as np

    np.savez(mlp_project / "real.npz", x=np.random.default_rng(2).standard_normal((8, 1, 8)).astype(np.float32))
    auto(mlp_project, "verify: {min_cosine: 0.9999999, data: real.npz}\n")  # int8 cannot meet it; fp32 does
    r = cli("tune", str(mlp_project), *QUICK, "--precisions", "fp32,int8", "--json")
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    failed = [c for c in lock["candidates"] if c["precision"] == "int8"]
    whole = r"probs: cosine 0\.\d{6} < min_cosine 0\.9999999"  # the failing metric, value and bound
    assert failed and all(c["status"] == "failed verification" and re.fullmatch(whole, c["why"]) for c in failed)
    assert all(c["accuracy"]["min_cosine"] < 0.9999999 and c["accuracy"]["status"] == "failed" for c in failed), \
        "a failed candidate's row holds every metric of its verification"
    assert lock["choice"]["options"]["precision"] == "fp32"
    none = cli("tune", str(mlp_project), *QUICK, "--precisions", "int8")
    assert none.returncode == 1 and "nothing locked" in none.stderr and "failed verification" in none.stdout
    int8_rows = [c for c in lock["candidates"] if c["precision"] == "int8"]
    assert len(re.findall(whole, none.stdout)) == len(int8_rows), none.stdout  # in the table too, each int8 row
    assert json.loads((mlp_project / LOCK_NAME).read_text())["choice"]["options"]["precision"] == "fp32", \
        "the earlier lock stays"


def test_choose_never_takes_a_failed_candidate_however_fast() -> None:
    def outcome(precision: str, status: str, p50: float) -> Outcome:
        return Outcome(provider="cpu", precision=precision, options={"precision": precision}, status=status,
                       row={"stats": {"p50": p50, "throughput": 1 / p50}})

    failed = outcome("int8", "failed verification", 0.001)
    slow, fast = outcome("fp32", "ok", 0.004), outcome("fp16", "ok", 0.002)
    assert pick_best([failed, slow, fast], "latency") is fast
    assert pick_best([failed, slow, fast], "throughput") is fast
    assert "2.00× slower" in slow.why
    assert pick_best([failed], "latency") is None


def test_why_cell_keeps_short_reasons_whole_and_cuts_long_ones_at_a_word() -> None:
    metric = "probs: cosine 0.973100 < min_cosine 0.98"
    assert why_cell(metric) == metric
    long = "; ".join(f"out{i}: 3 of 8 values outside atol 0.0001 + rtol 0.001·|ref| (within 62.50%)" for i in range(4))
    cell = why_cell(long)
    assert len(cell) <= 120 and cell.endswith(" …") and long.startswith(cell[:-2])
    assert long[len(cell) - 2] == " ", "cut between words"


def outcome(precision: str, p50: float, verification: str = "verified") -> Outcome:
    return Outcome(provider="cpu", precision=precision, options={"precision": precision}, status="ok",
                   row={"stats": {"p50": p50, "throughput": 1 / p50}, "verification_status": verification})


def test_an_unverified_candidate_is_listed_not_chosen_unless_allowed() -> None:
    fast_int8, fp32 = outcome("int8", 0.001, "unverified"), outcome("fp32", 0.004)
    assert pick_best([fast_int8, fp32], "latency") is fp32
    assert (fast_int8.status, fast_int8.why) == ("unverified", UNVERIFIED)
    allowed = outcome("int8", 0.001, "unverified")
    assert pick_best([allowed, outcome("fp32", 0.004)], "latency", allow_unverified=True) is allowed
    assert allowed.status == "ok"
    assert pick_best([outcome("int8", 0.001, "unverified")], "throughput") is None


def test_a_candidate_whose_rows_do_not_show_its_floor_is_not_ranked() -> None:
    """bf16 passes its floors as measured, but 45 confident rows cannot show 99 %: tune ranks the fp32 one."""
    from gpux.quality.evidence import weigh

    fast, slow = outcome("bf16", 0.001), outcome("fp32", 0.004)
    record, floors = {"logits": {"top1_confident": 1.0, "confident_rows": 45}}, {"logits": {"min_top1_confident": 0.99}}
    fast.row["accuracy"] = {"evidence": weigh(record, floors)}  # as a benchmark row keeps it
    assert pick_best([fast, slow], "latency") is slow
    assert fast.status == "unverified" and fast.why.startswith("unverified: 45 judged rows (logits: confident top-1) "
                                                               "show at most 94.3 %; about 223 more"), fast.why
    shown = outcome("bf16", 0.001)
    record = {"logits": {"top1_confident": 1.0, "confident_rows": 300}}
    shown.row["accuracy"] = {"evidence": weigh(record, floors)}
    assert pick_best([shown, outcome("fp32", 0.004)], "latency") is shown


def test_verification_status_of_old_and_new_manifests() -> None:
    assert verification_status({"passed": True, "outputs": {}}) == "verified"  # before the status key
    assert verification_status({"passed": True, "status": "unverified"}) == "unverified"
    assert verification_status({"skipped": "--no-verify"}) == "skipped"
    assert verification_status(None) == "skipped"


def test_tune_locks_an_unverified_artifact_only_when_asked(mlp_project: Path) -> None:
    auto(mlp_project)
    assert cli("tune", str(mlp_project), *QUICK, "--precisions", "int8", "--allow-unverified").returncode == 0
    manifests = list((mlp_project / ".gpux" / "tiny-mlp").glob("onnx-int8-*/manifest.json"))
    assert len(manifests) == 2
    for m in manifests:  # as a build verified on generated data only records it
        doc = json.loads(m.read_text())
        doc["verification"]["status"] = "unverified"
        m.write_text(json.dumps(doc))
    (mlp_project / LOCK_NAME).unlink()
    r = cli("tune", str(mlp_project), *QUICK, "--precisions", "int8", "--json")
    assert r.returncode == 1 and not (mlp_project / LOCK_NAME).exists()
    rows = json.loads(r.stdout)["candidates"]
    plain = [(c["status"], c["why"], c["verification"]) for c in rows if not c["refines"]]
    assert plain == [("unverified", "unverified: an int8 artifact checked on generated data only", "unverified")] * 2
    assert {(c["status"], c["why"]) for c in rows if c["refines"]} == {
        ("not needed", "plain int8 is unverified (its data cannot judge it): a refinement would be too")}
    table = cli("tune", str(mlp_project), *QUICK, "--precisions", "int8")
    assert "--allow-unverified" in table.stderr and "generated data only" in table.stdout
    allowed = cli("tune", str(mlp_project), *QUICK, "--precisions", "int8", "--allow-unverified", "--json")
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads((mlp_project / LOCK_NAME).read_text())["choice"]["precision"] == "int8"


def test_a_lock_from_another_machine_is_not_trusted_silently(mlp_project: Path) -> None:
    auto(mlp_project)
    assert cli("tune", str(mlp_project), *QUICK, "--precisions", "fp32").returncode == 0
    path = mlp_project / LOCK_NAME
    doc = json.loads(path.read_text())
    doc["fingerprint"]["cpu"] = "Some Other CPU @ 5GHz"
    doc["choice"] = {"provider": "openvino", "precision": "fp32", "options": {}}
    path.write_text(json.dumps(doc))
    r = cli("run", str(mlp_project), "--input", X, "--json")
    run = json.loads(r.stdout)
    assert run["request_source"] == "auto"
    assert any("measured with another cpu" in w for w in run["warnings"])
    text = cli("run", str(mlp_project), "--input", X)
    assert "warning: gpux.lock.json was measured with another cpu" in text.stderr
    doc["fingerprint"]["cpu"] = json.loads(cli("tune", str(mlp_project), *QUICK, "--precisions", "fp32",
                                               "--json").stdout)["fingerprint"]["cpu"]
    (mlp_project / "gpux.yml").write_text((mlp_project / "gpux.yml").read_text() + "\n# edited\n")
    run = json.loads(cli("run", str(mlp_project), "--input", X, "--json").stdout)
    assert run["request_source"] == "auto", "a changed config is re-tuned, not trusted"
    assert any("config_sha256" in w for w in run["warnings"])
