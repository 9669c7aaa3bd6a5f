"""Read-only views of values a room above owns, for the rooms below that read them: what a provider's probe and a
model's format read of a project (`ProjectView`, satisfied by `gpux.config.load.Project`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path


class ModelView(Protocol):
    """gpux.yml's `model:` block, as far as the ground floor reads it."""

    @property
    def format(self) -> str | None: ...


class ConfigView(Protocol):
    """A validated gpux.yml (`gpux.config.schema.GpuxConfig`): its model block, and its provider blocks read by name
    (`getattr(config.providers, name)`: each provider's option model, plugins' too)."""

    @property
    def model(self) -> ModelView: ...

    @property
    def providers(self) -> object: ...


class ProjectView(Protocol):
    """A loaded project (`gpux.config.load.Project`): its config and the model file gpux reads."""

    @property
    def config(self) -> ConfigView: ...

    @property
    def source(self) -> Path: ...
