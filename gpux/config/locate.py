"""Finds the project a user means: a folder, a gpux.yml, a bare .onnx file, or a model name."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gpux.config import CONFIG_NAMES
from gpux.config import known as index
from gpux.config.load import Project, find_config, load_config
from gpux.config.schema import GpuxConfig, ModelSource
from gpux.errors import ConfigError, NotFound, Problem


def remember(project: Project) -> None:
    if project.path.name in CONFIG_NAMES and project.path.is_file():
        index.remember(project.name, project.path)


def bare_model(path: Path) -> Project:
    """A project for a plain .onnx file: I/O read from the model, defaults everywhere."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in path.stem) or "model"
    config = GpuxConfig(name=name, model=ModelSource(source=path.name))
    # not a real gpux.yml: nothing (name index, no-op record) may mistake it for one; problems name the model
    return Project(path=path.resolve().with_name(path.name + ".gpux.yml"), config=config, shown=str(path),
                   implied=True)


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
    known = index.known_projects()
    if target in known:
        return load_config(known[target])
    import difflib

    from gpux.config.problems import did_you_mean

    nearest = difflib.get_close_matches(target, sorted(known), n=5, cutoff=0.5)
    listing = f"nearest of the {len(known)} models built on this machine: {', '.join(nearest)}" if nearest else \
        f"none of the {len(known)} models built on this machine is close" if known else \
        "no model has been built on this machine yet"
    raise NotFound(f"no model named {target!r}{did_you_mean(target, sorted(known))}; {listing}",
                     hint="pass a project folder or gpux.yml, or run `gpux build PATH` first")
