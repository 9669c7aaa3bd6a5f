"""Answers an unchanged `gpux build` from the record of the last one, before any config model is loaded.

A record holds what the build depended on: the gpux.yml bytes, the stamp (`gpux.files.stamp`) of every file it read or
wrote (model, external data, labels, samples, calibration data, artifacts and their manifests), gpux and every
installed distribution with its version, the CPU model and the accelerator devices present, and the request
(flags and environment). If all of it is unchanged, the build's result is replayed; anything else (or any
doubt) runs the full build, which re-derives every cache key.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from gpux.config import CONFIG_NAMES
from gpux.documents import BuildDoc
from gpux.files import atomic_write_text, sha256_file, stamp, store_root
from gpux.machine import installed_state

if TYPE_CHECKING:
    from gpux.config.load import Project

Stat = list[int | str]  # a file's stamp, a folder's entry count, where a link points (`_stat`)
ENV = ("GPUX_PROVIDER", "GPUX_STORE", "GPUX_PROBE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
       "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME")  # the hub's settings: which cache a hub id is resolved in


def config_of(path: str) -> Path | None:
    """The gpux.yml a build or serve target names (a folder holding one, or the file), else None."""
    p = Path(path)
    if p.is_dir():
        return next((p / n for n in CONFIG_NAMES if (p / n).is_file()), None)
    return p if p.suffix in (".yml", ".yaml") and p.is_file() else None


class Asked(TypedDict):
    """What `gpux build` was asked for that names its record: a build asked for differently is another record."""

    provider: str | None
    strict: bool
    verify: bool
    store: str | None
    shapes: dict[str, int] | None


def record_path(root: Path, store: str | None, folder: str, key: Mapping[str, object]) -> Path:
    """Where a record named by `key` and the environment variables that steer a choice lives, in `folder` of the
    store of the project at `root` (`store`: --store)."""
    text = json.dumps({**key, **{k: os.environ.get(k) for k in ENV}}, sort_keys=True, default=str)
    return store_root(root, store) / folder / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.json"


def _record_file(config: Path, request: Asked) -> Path:
    return record_path(config.parent, request["store"], ".noop", {"config": str(config.resolve()), **request})


def _stat(p: str) -> Stat | None:
    """A file's stamp (size, mtime, inode, ctime); for a folder, its entry count in place of the size (its mtime
    changes when an entry is added or removed); for a symbolic link, also where it points (a link pointed elsewhere
    is a change)."""
    try:
        st = os.stat(p)
        count = [len(os.listdir(p))] if os.path.isdir(p) else []
        link = os.readlink(p) if os.path.islink(p) else None
    except OSError:
        return None
    return [*stamp(st), *count, *([link] if link is not None else [])]


def snapshot(files: list[Path]) -> dict[str, Stat | None]:
    """The stamp of each file, by its absolute path as named (a link is followed, and where it points kept)."""
    return {os.path.abspath(f): _stat(str(f)) for f in files}


@dataclass(frozen=True)
class Before:
    """What a build is about to read and its gpux.yml's digest, taken BEFORE it reads them (so a change during the
    build is not missed)."""

    files: dict[str, Stat | None]  # by absolute path; None: missing
    config_sha: str | None


def before(files: list[Path], config: Path) -> Before:
    try:
        sha: str | None = sha256_file(config)
    except OSError:
        sha = None
    return Before(snapshot(files), sha)


def replay(path: str, request: Asked) -> BuildDoc | None:
    """The last build's result document if nothing it depended on changed, else None."""
    config = config_of(path)
    if config is None:
        return None
    try:
        rec = json.loads(_record_file(config, request).read_text())
        unchanged = (rec["config_sha256"] == sha256_file(config)
                     and all(_stat(f) == s for f, s in rec["files"].items())
                     and rec["environment"] == installed_state())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not unchanged:
        return None
    doc: BuildDoc = rec["doc"]  # written by record() below
    for t in doc.get("targets", []):
        t["cached"], t["reason"], t["seconds"] = True, "", 0.0
    _side_effects(str(doc["name"]), config)
    return doc


def _side_effects(name: str, config: Path) -> None:
    """What a full build also leaves behind: the name index entry."""
    from gpux.config import known as index

    index.remember(name, config)


def record(project: Project, request: Asked, doc: BuildDoc, taken: Before, outputs: list[Path]) -> None:
    """Remember a successful build (best effort: a failure to write only costs the next build's speed). `taken`
    was taken before the build; `outputs` (artifacts) are stat-ed now."""
    if project.path.name not in CONFIG_NAMES or not project.path.is_file() or taken.config_sha is None:
        return
    if project.resolved is not None and project.resolved.moves:
        return  # a hub branch resolved online: the next build asks the hub again
    stats = {**taken.files, **snapshot(outputs)}
    if any(s is None for s in stats.values()):
        return
    with contextlib.suppress(OSError, TypeError, ValueError):
        rec = {"config_sha256": taken.config_sha, "files": stats, "environment": installed_state(), "doc": doc}
        atomic_write_text(_record_file(project.path, request), json.dumps(rec, default=str))
