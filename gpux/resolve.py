"""Finds the project a user means: a folder, a gpux.yml, a bare .onnx file, or a model name."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from gpux.config import CONFIG_NAMES, GpuxConfig, ModelSource, Project, find_config, load_config
from gpux.errors import ConfigError, NotFound, Problem
from gpux.store import atomic_write_text

HOME_ENV = "GPUX_HOME"


def index_path() -> Path:
    home = os.environ.get(HOME_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpux")
    return Path(home) / "projects.json"


def known_projects() -> dict[str, str]:
    """Model name → gpux.yml of every project built on this machine (most recent wins)."""
    try:
        data = json.loads(index_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str) and Path(v).is_file()} \
        if isinstance(data, dict) else {}


def remember(project: Project) -> None:
    if project.path.name not in CONFIG_NAMES or not project.path.is_file():
        return
    known = known_projects()
    if known.get(project.name) == str(project.path):
        return
    known[project.name] = str(project.path)
    with contextlib.suppress(OSError):
        atomic_write_text(index_path(), json.dumps(known, indent=1, sort_keys=True))


def bare_model(path: Path) -> Project:
    """A project for a plain .onnx file: I/O read from the model, defaults everywhere."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.stem) or "model"
    config = GpuxConfig(name=name, model=ModelSource(source=path.name))
    return Project(path=path.resolve().parent / "gpux.yml", config=config)


def open_project(target: str) -> Project:
    p = Path(target)
    if p.suffix.lower() == ".onnx":
        if not p.is_file():
            raise ConfigError([Problem(str(p), 0, 0, "", "file not found")])
        return bare_model(p)
    if p.exists() or target in (".", "") or os.sep in target or target.endswith((".yml", ".yaml")):
        return load_config(find_config(p))
    # a model name: the project here, then projects built on this machine
    for name in CONFIG_NAMES:
        here = Path(name)
        if here.is_file():
            with contextlib.suppress(ConfigError):
                project = load_config(here)
                if project.name == target:
                    return project
    known = known_projects()
    if target in known:
        return load_config(known[target])
    names = sorted(known)
    from gpux.config import did_you_mean

    listing = f"known models: {', '.join(names)}" if names else "no model has been built on this machine yet"
    raise NotFound(f"no model named {target!r}{did_you_mean(target, names)}; {listing}",
                     hint="pass a project folder or gpux.yml, or run `gpux build PATH` first")
