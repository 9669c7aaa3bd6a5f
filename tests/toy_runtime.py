"""A toy runtime for tests/test_toy_provider.py: runs ONNX models with onnx's own reference evaluator.

It is everything a new backend brings besides its registry row: the targets it needs, how its artifact is
built, how the build checks it, and how a session opens it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gpux.plan.targets import Target
from gpux.providers import Availability, Runner


def probe(name: str) -> Availability:
    return Availability(name, "ok", "onnx's reference evaluator runs anywhere onnx imports")


def targets(project: Any, provider: str, inputs: Any = None) -> list[Target]:
    return [Target("toy-reference", "toy-copy", provider, "fp32", {})]


def build(ctx: Any) -> dict[str, Any]:
    shutil.copyfile(ctx.src, ctx.workdir / "model.onnx")
    return {"main": "model.onnx", "evaluator": "onnx.reference"}


def _session(path: Path) -> Any:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(str(path))


def verify_runner(artifact: Path, target: Any) -> Any:
    sess = _session(artifact)
    return lambda feeds: sess.run(None, feeds)


def open_runner(provider: str, project: Any, artifact: Any) -> Runner:
    sess = _session(artifact.main)
    names = [o.name for o in sess.proto_.graph.output]
    return Runner(run=lambda feeds: sess.run(None, feeds), output_names=names, used="onnx.reference",
                  native=sess)
