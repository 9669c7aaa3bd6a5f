"""Every kind of artifact's build / verify / open functions take the parameters of their role's Protocol
(gpux.runtimes.BuildStep, VerifyStep, OpenStep): a runtime whose function drifts (renamed, added or dropped
parameters) fails here, not at its first build."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from gpux.providers import registry
from gpux.runtimes import ARTIFACT_KINDS, ArtifactKind, BuildStep, OpenStep, VerifyStep


def all_kinds() -> dict[str, ArtifactKind]:
    return {**ARTIFACT_KINDS, **{n: kind for row in registry().values() for n, kind in row.kinds}}


def parameters(fn: Callable[..., Any]) -> list[tuple[str, Any]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def role(protocol: type) -> list[tuple[str, Any]]:
    """The parameters of a Protocol's `__call__`, without `self`."""
    return parameters(protocol.__call__)[1:]


@pytest.mark.parametrize("name", sorted(all_kinds()))
def test_each_kind_matches_its_roles(name: str) -> None:
    kind = all_kinds()[name]
    assert parameters(kind.build_step()) == role(BuildStep), f"{name}: build {kind.build}"
    verify = kind.verify_step()
    if verify is not None:
        assert parameters(verify) == role(VerifyStep), f"{name}: verify {kind.verify}"
    assert parameters(kind.open_step()) == role(OpenStep), f"{name}: open {kind.open}"


def test_the_roles_are_what_the_callers_pass() -> None:
    assert [n for n, _ in role(BuildStep)] == ["ctx"]
    assert [n for n, _ in role(VerifyStep)] == ["artifact", "target"]
    assert [n for n, _ in role(OpenStep)] == ["provider", "project", "artifact"]


def test_a_drifting_runtime_fails() -> None:
    def opens(provider: str, project: Any) -> Any:  # the artifact dropped
        return None

    assert parameters(opens) != role(OpenStep)


def test_an_int8_build_that_did_nothing_fails_under_strict_without_being_remembered() -> None:
    from types import SimpleNamespace

    from gpux.errors import BuildFailed
    from gpux.runtimes import NOTHING_QUANTIZED, NothingConverted, int8_did_nothing

    said: list[str] = []
    ctx: Any = SimpleNamespace(target=SimpleNamespace(id="onnx-int8"), strict=True, log=said.append)
    assert int8_did_nothing(ctx, "") is False
    with pytest.raises(BuildFailed) as failed:
        int8_did_nothing(ctx, NOTHING_QUANTIZED)
    assert failed.value.conversion is False, "--strict's refusal is not the runtime's failure on the model"
    assert not isinstance(failed.value, NothingConverted), "--strict refuses; it does not build fp32 instead"
    ctx.strict = False
    with pytest.raises(NothingConverted) as nothing:  # the build makes the fp32 artifact instead, and says so
        int8_did_nothing(ctx, NOTHING_QUANTIZED)
    assert nothing.value.conversion is False and said == []
    assert int8_did_nothing(ctx, "the int8 model is larger than its source (9 vs 8 bytes)") is True
    assert said == ["warning: onnx-int8: int8 did nothing useful for this model: the int8 model is larger than its "
                    "source (9 vs 8 bytes)"]
    assert BuildFailed("x").conversion is None, "not said: a build step's own failure counts as its conversion's"
