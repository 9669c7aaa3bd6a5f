"""ONNX's backend node tests (a deterministic sample, regenerated from the installed onnx) through gpux:
no traceback; every case passes, or ends in a one-line error or a fallback whose reason is a runtime limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conformance import EVERY, counts, reason_class, run_all


def check(provider: str, root: Path, every: int) -> dict[str, int]:
    outcomes = run_all(provider, root, every)
    got = counts(outcomes)
    assert got["crash"] == 0, [o for o in outcomes if o.kind == "crash"]
    assert got["wrong"] == 0, [o for o in outcomes if o.kind == "wrong"]
    for o in outcomes:
        if o.kind in ("error", "fallback"):
            assert o.detail and reason_class(o.detail) != "other", o
    assert got["pass"] >= len(outcomes) // 2, got
    return got


def test_onnx_node_tests_on_cpu(tmp_path: Path) -> None:
    got = check("cpu", tmp_path, EVERY)
    assert got["fallback"] == 0  # cpu is the last resort: nothing to fall back to


def test_onnx_node_tests_on_openvino_quick(tmp_path: Path) -> None:
    check("openvino", tmp_path, EVERY * 10)


@pytest.mark.slow
def test_onnx_node_tests_on_openvino(tmp_path: Path) -> None:
    check("openvino", tmp_path, EVERY)
