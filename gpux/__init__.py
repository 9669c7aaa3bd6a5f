"""gpux: declarative build-and-run tool for ML inference."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gpux.version import __version__

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.run.session import Session


def load(target: str | os.PathLike[str] | Project = ".", provider: str | None = None, **kwargs: Any) -> Session:
    """Open a model (project dir, gpux.yml, model name or .onnx file) with ordered fallback."""
    from gpux.run.session import load as _load

    return _load(target, provider=provider, **kwargs)


__all__ = ["__version__", "load"]
