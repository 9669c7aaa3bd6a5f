"""`gpux tune --objective throughput` searches the batch size: each opened candidate is also measured with 4, 8 and 16
rows per call (up to a declared maximum), on real ONNX Runtime, and the lock says the batch it chose."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import gpux as cli

QUICK = ("--providers", "cpu", "--precisions", "fp32", "--seconds", "0.2")


def test_throughput_tries_batches_up_to_the_declared_maximum(mlp_project: Path) -> None:
    r = cli("tune", str(mlp_project), *QUICK, "--objective", "throughput", "--json")
    assert r.returncode == 0, r.stderr
    lock = json.loads(r.stdout)
    measured = [c for c in lock["candidates"] if c["status"] == "ok"]
    by_options: dict[str, list[int]] = {}
    for c in measured:
        by_options.setdefault(json.dumps(c["options"], sort_keys=True), []).append(c["batch"])
    assert by_options and all(b == [1, 4, 8, 16] for b in by_options.values()), by_options
    assert all(c["throughput"] > 0 for c in measured)
    assert lock["choice"]["batch"] in (1, 4, 8, 16)
    chosen = next(c for c in measured if c["why"].startswith("chosen"))
    assert chosen["batch"] == lock["choice"]["batch"] and chosen["options"] == lock["choice"]["options"]

    yml = mlp_project / "gpux.yml"
    yml.write_text(yml.read_text() + "shapes: {batch: {min: 1, opt: 2, max: 8}}\n")
    lock = json.loads(cli("tune", str(mlp_project), *QUICK, "--objective", "throughput", "--json").stdout)
    assert {c["batch"] for c in lock["candidates"] if c["status"] == "ok"} == {1, 4, 8}  # the declared maximum


def test_latency_measures_one_row_per_call(mlp_project: Path) -> None:
    lock = json.loads(cli("tune", str(mlp_project), *QUICK, "--json").stdout)
    assert {c["batch"] for c in lock["candidates"]} == {1}
