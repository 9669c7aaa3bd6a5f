"""Adding a provider is one registry row plus one runtime module (tests/toy_runtime.py): a toy provider that
runs ONNX models with onnx's reference evaluator is selected, planned, built, verified, opened and reported
like any other, with nothing else in gpux touched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpux import providers
from gpux.artifacts.build import build
from gpux.config.load import load_config
from gpux.errors import UsageError
from gpux.plan.select import select
from gpux.providers import Provider
from gpux.run.session import load
from tests.toy_runtime import ROW as TOY


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Provider:
    monkeypatch.setitem(providers.BUILTIN_ROWS, "toy", TOY)  # the one row
    providers.probe.cache_clear()
    yield TOY
    providers.probe.cache_clear()


def test_without_its_row_the_provider_is_unknown(mlp_project: Path) -> None:
    with pytest.raises(UsageError, match="unknown provider 'toy'"):
        select(load_config(mlp_project / "gpux.yml"), "toy")


def test_a_toy_provider_is_one_row_and_one_runtime_module(toy: Provider, mlp_project: Path) -> None:
    project = load_config(mlp_project / "gpux.yml")
    assert select(project, "toy", strict=True).chain == ("toy",)
    assert providers.probe("toy").ok

    built = build(project, "toy")  # verified against ONNX Runtime's FP32 reference
    assert [r.target.id for r in built.results] == ["toy-reference"]
    verification = built.final.artifact.manifest["verification"]
    assert verification["passed"] is True, verification

    feeds = {"x": np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)}
    session = load(mlp_project, provider="toy", strict=True)
    got = session.run(feeds)
    want = load(mlp_project, provider="cpu", strict=True).run(feeds)
    np.testing.assert_allclose(got["probs"], want["probs"], rtol=1e-5, atol=1e-6)
    report = session.report()
    assert report["provider"] == "toy" and report["runs_on"] == "onnx.reference" and not report["fell_back"]


def test_every_list_of_providers_has_the_toy(toy: Provider, mlp_project: Path) -> None:
    """auto's order, the offer and `cache prune`'s list of current artifacts walk the registry."""
    from gpux.cli.cache import current_folders
    from gpux.files import store_root
    from gpux.plan.offer import compute

    project = load_config(mlp_project / "gpux.yml")
    assert select(project, "auto").chain[-2:] == ("cpu", "toy")  # auto: the registry order
    assert "toy" in compute({"mlp": project}).offer
    built = build(project, "toy", verify=False)
    current = current_folders(project, store_root(project.root))
    assert built.final.artifact.dir.name in current  # a prune keeps it


def test_a_provider_on_an_onnx_runtime_ep_is_its_row_alone(monkeypatch: pytest.MonkeyPatch, mlp_project: Path) -> None:
    """A new ONNX Runtime execution provider needs no runtime module: the row names its EP (here the CPU EP
    under another name, the one EP every build has)."""
    row = Provider(name="my-ep", runtime="onnxruntime", ep="CPUExecutionProvider", extra="",
                   platforms=("linux", "win32", "darwin"), in_every_build=True)
    monkeypatch.setitem(providers.BUILTIN_ROWS, "my-ep", row)
    providers.probe.cache_clear()
    try:
        session = load(mlp_project, provider="my-ep", strict=True)
    finally:
        providers.probe.cache_clear()
    feeds = {"x": np.ones((2, 8), np.float32)}
    want = load(mlp_project, provider="cpu", strict=True).run(feeds)
    np.testing.assert_allclose(session.run(feeds)["probs"], want["probs"], rtol=1e-6)
    assert session.provider == "my-ep" and session.used == "CPUExecutionProvider" and not session.fell_back
