"""A toy provider for tests/test_toy_provider.py and tests/test_plugin_provider.py: runs ONNX models with onnx's
own reference evaluator.

It is everything a new backend brings: its registry row (`ROW`, registered through the `gpux.providers` entry
point group), the option model of its gpux.yml block, the targets it needs, how its artifact is built, how the
build checks it, and how a session opens it. Nothing heavy is imported at the top: gpux reads the row while it
builds gpux.yml's schema."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pydantic import Field

from gpux.providers import Availability, Provider, Runner
from gpux.providers.options import Options
from gpux.runtimes import ArtifactKind

RUNTIME = "tests.toy_runtime"


class ToyOptions(Options):
    """onnx's reference evaluator (a toy provider)."""

    verbose: int = Field(0, ge=0, le=4, description="ReferenceEvaluator's verbosity (0 = quiet).")


ROW = Provider(
    name="toy", runtime="onnx-reference", ep=None, extra="", platforms=("linux", "win32", "darwin"), hardware="any CPU",
    options=f"{RUNTIME}:ToyOptions", targets=f"{RUNTIME}:targets", probe_with=f"{RUNTIME}:probe",
    title="onnx's reference evaluator.",
    kinds=(("toy-copy", ArtifactKind(build=f"{RUNTIME}:build", verify=f"{RUNTIME}:verify_runner", packages=("onnx",),
                                     device="none", open=f"{RUNTIME}:open_runner")),),
)


def probe(name: str) -> Availability:
    return Availability(name, "ok", "onnx's reference evaluator runs anywhere onnx imports")


def targets(project: Any, provider: str, inputs: Any = None) -> list[Any]:
    from gpux.plan.targets import Target

    block = getattr(project.config.providers, provider, None) or ToyOptions()  # a block when gpux.yml knows it
    return [Target(id="toy-reference", kind="toy-copy", provider=provider, precision="fp32",
                   options=block.model_dump(mode="json"))]


def build(ctx: Any) -> dict[str, Any]:
    shutil.copyfile(ctx.src, ctx.workdir / "model.onnx")
    return {"main": "model.onnx", "evaluator": "onnx.reference"}


def _session(path: Path, verbose: int = 0) -> Any:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(str(path), verbose=verbose)


def verify_runner(artifact: Path, target: Any) -> Any:
    sess = _session(artifact)
    return lambda feeds: sess.run(None, feeds)


def open_runner(provider: str, project: Any, artifact: Any) -> Runner:
    sess = _session(artifact.main, artifact.manifest["target"]["options"].get("verbose", 0))
    names = [o.name for o in sess.proto_.graph.output]
    return Runner(run=lambda feeds: sess.run(None, feeds), output_names=names, used="onnx.reference",
                  native=sess)
