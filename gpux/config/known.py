"""The machine-wide index of built projects (model name → gpux.yml), so `gpux run NAME` works anywhere."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

HOME_ENV = "GPUX_HOME"


def index_path() -> Path:
    """$GPUX_HOME/projects.json, else in the platform's user cache folder (~/.cache/gpux on Linux)."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]) / "projects.json"
    from platformdirs import user_cache_path

    return user_cache_path("gpux", appauthor=False) / "projects.json"


def known_projects() -> dict[str, str]:
    """Model name → gpux.yml of every project built on this machine (most recent wins)."""
    try:
        data = json.loads(index_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str) and Path(v).is_file()} \
        if isinstance(data, dict) else {}


def remember(name: str, config: Path) -> None:
    """Record where model `name` is declared (an absolute path, so any folder can find it)."""
    from gpux.files import atomic_write_text

    known = known_projects()
    path = str(config.resolve())
    if known.get(name) == path:
        return
    known[name] = path
    with contextlib.suppress(OSError):
        atomic_write_text(index_path(), json.dumps(known, indent=1, sort_keys=True))
