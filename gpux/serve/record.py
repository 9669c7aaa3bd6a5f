"""A served model's record: what `gpux serve` needs to serve a project again without reading its gpux.yml, so without
the config models and pydantic (about 12 MB less memory, and a faster start).

A start that read the config keeps one for a command whose every model was opened the usual way, by a runtime that
says how to open its session again (the runner's `recipe`), and declares no pre- or post-processing. The next start
of the same command uses it when nothing it depended on changed, as taken when that start read the config: the
gpux.yml bytes; the stamp (`gpux.files.stamp`) of every file its build reads (the model as named, its external data,
labels, calibration and verify data), the saved choice (`gpux use`) and the tune lock; the artifact's files (re-hashed);
the installed distributions, the CPU and the devices (`environment`); the command itself (targets, provider,
--strict, --store, overrides) and the environment variables that steer a choice. Anything else, or any doubt,
reads the config as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpux.artifacts.unchanged import config_of, record_path, snapshot
from gpux.config import CONFIG_NAMES
from gpux.documents import SessionReport
from gpux.files import atomic_write_text, sha256_file
from gpux.machine import installed_state
from gpux.model.tensor import Tensor
from gpux.providers.row import Recipe
from gpux.serve.settings import Settings

if TYPE_CHECKING:
    from gpux.config.load import Project
    from gpux.providers.row import Runner

FORMAT = 3  # of a record: another one is not read (nor one whose fields differ: see `environment`)
log = logging.getLogger("gpux.serve")


@dataclass(frozen=True, kw_only=True)
class Command:
    """What a start was asked: the record of one command is not another's."""

    targets: list[str]
    provider: str | None
    strict: bool
    store: str | None
    overrides: dict[str, float]  # serve: settings given on the command line


@dataclass(frozen=True, kw_only=True)
class Recorded:
    """One model as a start that read its config opened it."""

    name: str
    version: str
    path: str  # its gpux.yml
    root: str
    settings: Settings  # its serve: block, overrides applied
    inputs: dict[str, Tensor]
    outputs: dict[str, Tensor]
    labels: dict[str, list[str]]
    provider: str
    runs_on: str
    report: SessionReport  # the session's report, as `gpux run --json` shows it
    recipe: Recipe

    @classmethod
    def read(cls, doc: dict[str, Any]) -> Recorded:
        """One model of a record file (a missing or mistyped field raises KeyError, TypeError or ValueError)."""
        return cls(name=str(doc["name"]), version=str(doc["version"]), path=str(doc["path"]), root=str(doc["root"]),
                   settings=Settings.of(doc["settings"]), inputs=tensors(doc["inputs"]),
                   outputs=tensors(doc["outputs"]), labels={str(k): list(v) for k, v in doc["labels"].items()},
                   provider=str(doc["provider"]), runs_on=str(doc["runs_on"]), report=doc["report"],
                   recipe=Recipe.of(doc["recipe"]))

    def doc(self) -> dict[str, Any]:
        """As the record file keeps it."""
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "settings": asdict(self.settings),
                "inputs": [t.to_dict() for t in self.inputs.values()],
                "outputs": [t.to_dict() for t in self.outputs.values()], "recipe": asdict(self.recipe)}


def tensors(items: list[dict[str, Any]]) -> dict[str, Tensor]:
    return {t["name"]: Tensor(t["name"], t["dtype"], None if t["shape"] is None else tuple(t["shape"]))
            for t in items}


def environment() -> dict[str, Any]:
    """The record's layout and the machine as gpux.machine.installed_state reads it."""
    shape = [[f.name for f in fields(c)] for c in (Recorded, Settings, Recipe)]  # another layout is not read
    return {"format": [FORMAT, shape], **installed_state()}


def opener(recipe: Recipe) -> Callable[..., Runner]:
    """The function that opens the recipe's artifact again: an opening function (`open_...`) of the runtime module
    the artifact's own kind opens it with (`gpux.runtimes.kind_of(kind).open`, the kind read from the artifact's
    manifest), never another function a file names. ValueError when it is not one."""
    from gpux.artifacts import store
    from gpux.runtimes import kind_of, resolve

    artifact = store.read_manifest(recipe.artifact)
    if artifact is None:
        raise ValueError(f"{recipe.artifact} holds no artifact manifest")
    try:
        module = kind_of(artifact.kind).open.partition(":")[0]
    except KeyError as exc:
        raise ValueError(f"{recipe.artifact} is an artifact of unknown kind {artifact.kind!r}") from exc
    where, _, function = recipe.runtime.partition(":")
    if where != module or not function.startswith("open_"):
        raise ValueError(f"{recipe.runtime} is not how a {artifact.kind} artifact opens (a {module} function)")
    opens: Callable[..., Runner] = resolve(recipe.runtime)
    return opens


def open_runner(recipe: Recipe) -> Runner:
    return opener(recipe)(**recipe.arguments)


def record_file(targets: list[str], command: Command) -> Path | None:
    """Where the record of serving `targets` with `command` lives (None: a target that is no gpux.yml project, a
    workspace among them)."""
    configs = [c for c in map(config_of, targets) if c is not None and c.name in CONFIG_NAMES]
    if not configs or len(configs) != len(targets):
        return None
    return record_path(configs[0].parent, command.store, ".serve",
                       {"configs": [str(c.resolve()) for c in configs], **asdict(command)})


def replay(targets: list[str], command: Command) -> list[Recorded] | None:
    """The models of the last start of this command if nothing they depended on changed, else None (a record that
    does not read is logged: its file, why, and that the configs are read instead)."""
    where = record_file(targets, command)
    if where is None or not where.exists():
        return None
    try:
        rec = json.loads(where.read_text())
        unchanged = (rec["environment"] == environment() and rec["configs"]
                     and all(sha256_file(Path(p)) == sha for p, sha in rec["configs"].items())
                     and snapshot([Path(p) for p in rec["files"]]) == rec["files"])
        models = [Recorded.read(m) for m in rec["models"]] if unchanged else []
        for m in models:
            opener(m.recipe)
    # what a damaged or hand-edited record raises as it is read: a field missing, of another type, not JSON
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("%s: serve record not read (%s: %s); reading the configs instead", where, type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "")
        return None
    return models if models and all(_intact(m) for m in models) else None


def _intact(model: Recorded) -> bool:
    """Every file of the artifact it opens matches its manifest, bytes re-hashed (as `gpux run` checks one)."""
    from gpux.artifacts import store

    artifact = store.read_manifest(model.recipe.artifact)
    return artifact is not None and store.check(artifact, full=True) is None


@dataclass(frozen=True)
class Taken:
    """What a start read, taken as it read the config, before it built or opened anything (a file changed
    meanwhile is not vouched for by the record)."""

    configs: dict[str, str]  # gpux.yml -> sha256 of its bytes
    files: dict[str, Any]  # snapshot of every file its models depend on


def taken(projects: list[Project], store: str | None) -> Taken | None:
    """What `projects` (just read) depend on; None when one of them could not be recorded anyway."""
    try:
        return Taken({str(p.path): sha256_file(p.path) for p in projects},
                     snapshot([f for p in projects for f in _depends_on(p, store)]))
    except Exception:  # a model that does not read: the start reports it, nothing is recorded
        return None


class Reopened(Protocol):
    """A served model, as `forget` asks it."""

    @property
    def record_failed(self) -> bool: ...  # given a record, opened from its config instead


def keep(targets: list[str], command: Command, opened: list[Recorded | None], read: Taken | None) -> None:
    """Record the models a start opened from their configs, `opened` (best effort: a record not written only
    costs the next start its speed). Nothing is kept when one of them cannot be opened again without its config
    (None), or when a gpux.yml changed since the start read it."""
    where = record_file(targets, command)
    recorded = [m for m in opened if m is not None]
    if where is None or read is None or not opened or len(recorded) != len(opened):
        return
    try:
        current = {m.path: sha256_file(Path(m.path)) for m in recorded}
        if any(read.configs.get(path) != sha for path, sha in current.items()):
            return
        files = {**read.files, **snapshot([f for m in recorded for f in _artifact(m)])}
        rec = {"configs": current, "files": files, "environment": environment(), "models": [m.doc() for m in recorded]}
        atomic_write_text(where, json.dumps(rec, default=str))
    except OSError as exc:  # never fails a server that is ready: a full disk, a store that went read-only
        log.debug("no serve record kept: %s", exc)


def forget(targets: list[str], command: Command, models: list[Reopened]) -> None:
    """Drop the record a start served from when one of its models did not open as recorded (its config was read
    instead): the next start reads the configs and keeps a new record, rather than trying this one again."""
    where = record_file(targets, command)
    if where is not None and any(m.record_failed for m in models):
        where.unlink(missing_ok=True)


def recordable(project: Project, runner: Runner, declares_steps: bool) -> Recipe | None:
    """How a model opened from `project` opens again without it (None: it cannot: no recipe, declared steps, or
    no gpux.yml of its own)."""
    if runner.recipe is None or declares_steps or project.path.name not in CONFIG_NAMES:
        return None
    return runner.recipe


def _depends_on(project: Project, store: str | None) -> list[Path]:
    """The files whose change may change what a start opens for `project`: what its build reads (gpux.yml, the
    model and its external data, labels, calibration and verify data, folders too), the saved choice and the tune
    lock."""
    from gpux.artifacts.plan import reads
    from gpux.model.io import check_model
    from gpux.plan.choice import Place
    from gpux.plan.lock import LOCK_NAME

    return [*reads(project, check_model(project, store)), Place(project.name, project.root, store).file,
            project.root / LOCK_NAME]


def _artifact(model: Recorded) -> list[Path]:
    """The folder and files of the artifact the model's session opened."""
    folder = model.recipe.artifact
    return [folder, *sorted(folder.iterdir())]
