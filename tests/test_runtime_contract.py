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
