"""Intersection gating: per model and provider, can it run here and if not why; the providers every enabled
model can run (the offer), best first; and the refusal of a request outside it, naming what blocks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpux.config.load import Project
from gpux.errors import ProviderUnavailable, UsageError
from gpux.providers import registry


@dataclass(frozen=True)
class Cell:
    """One model on one provider: yes, or the first reason why not and whose reason it is."""

    ok: bool
    why: str = ""
    by: str = ""  # "model" (declared or source) | "machine" (not available here)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "why": self.why or None}


@dataclass(frozen=True)
class Offer:
    """The model × provider matrix of the enabled models and the providers all of them can run."""

    matrix: dict[str, dict[str, Cell]]
    offer: tuple[str, ...]

    @property
    def best(self) -> str | None:
        return self.offer[0] if self.offer else None

    def blockers(self, provider: str) -> list[str]:
        """'model NAME: why' for each model that cannot run `provider`."""
        return [f"model {m!r}: {row[provider].why}" for m, row in self.matrix.items() if not row[provider].ok]

    def refuse(self, provider: str, source: str) -> None:
        """Raise when `provider` is outside the offer: a usage error when models block it, else unavailable."""
        if provider in self.offer:
            return
        cells = [row[provider] for row in self.matrix.values() if not row[provider].ok]
        message = f"{source}: {provider} is not offered: {'; '.join(self.blockers(provider))}"
        hint = f"use one of {', '.join(self.offer)}" if self.offer else "no provider runs every enabled model here"
        if any(c.by == "model" for c in cells):
            raise UsageError(message, hint=hint)
        raise ProviderUnavailable(message, hint=hint)

    def to_dict(self) -> dict[str, Any]:
        return {"matrix": {m: {p: c.to_dict() for p, c in row.items()} for m, row in self.matrix.items()},
                "offer": list(self.offer), "best": self.best}


def cell(project: Project, provider: str) -> Cell:
    """Declared support, then what the source can reach, then what this machine has."""
    from gpux.formats import TORCH_FORMATS, source_format
    from gpux.providers import probe_for, runtime_of

    supported = project.config.runtime.supported
    if supported and provider not in supported:
        return Cell(False, f"not in runtime.supported ({', '.join(supported)})", "model")
    if runtime_of(project, provider) == "torch" and source_format(project) not in TORCH_FORMATS:
        return Cell(False, f"runtime torch runs PyTorch sources; {project.source.name} is ONNX", "model")
    avail = probe_for(project, provider)
    if not avail.ok:
        return Cell(False, f"unavailable here: {avail.reason}", "machine")
    return Cell(True)


def compute(models: dict[str, Project]) -> Offer:
    """The matrix over `models` (the enabled ones) and their offer, in the order auto prefers."""
    names = registry()
    matrix = {name: {p: cell(project, p) for p in names} for name, project in models.items()}
    offer = tuple(p for p in names if models and all(row[p].ok for row in matrix.values()))
    return Offer(matrix, offer)


__all__ = ["Cell", "Offer", "compute"]
