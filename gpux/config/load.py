"""Loads a gpux.yml into a frozen Project: find the file, parse it, migrate an earlier format, validate it.

Every problem is reported at once (ConfigError), located at file:line:col as the file writes it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from gpux.config import CONFIG_NAMES, WORKSPACE_NAME
from gpux.config.files import Named, lines, named
from gpux.config.migrate import migrate
from gpux.config.parse import Loc, Marks, Written, parse_yaml
from gpux.config.problems import describe_errors, show_value
from gpux.config.schema import GpuxConfig
from gpux.errors import ConfigError, Problem
from gpux.sources.ref import Resolved, is_hub, needs_resolving

T = TypeVar("T")


@dataclass
class Derived:
    """What the rooms above derive from a project's files once per process (`gpux.model.io.check_model`: the
    model's checked I/O and its versions against ONNX Runtime), kept with the project so no room reads the
    model again. Copies made with `dataclasses.replace` share it; each value is kept with the key it was
    derived under (the model file's stamp, `gpux.files.stamp`, and the declared I/O) and derived again when that
    changes, or when `still_true` says the kept value no longer holds (the model's external data files changed)."""

    values: dict[str, tuple[object, object]] = field(default_factory=dict)  # name -> (key, value)
    labels: dict[str, list[str]] = field(default_factory=dict)  # output -> the class names the checked model carries

    def get(self, name: str, key: object, derive: Callable[[], T], still_true: Callable[[T], bool] | None = None
            ) -> T:
        kept = self.values.get(name)
        if kept is not None and kept[0] == key:
            held = cast(T, kept[1])  # what `derive` gave under this name
            if still_true is None or still_true(held):
                return held
        value = derive()
        self.values[name] = (key, value)
        return value


@dataclass(frozen=True, kw_only=True)
class Project:
    """A loaded gpux.yml: the validated config plus where it lives.

    `path` is made absolute here, so `root`, `source` and every path the config names (read as `root / value`)
    mean the same file whatever the working directory is later (builds run in a scratch folder). `shown` is
    the file as the user named it, for messages; `implied`: no gpux.yml exists (a plain model file, `shown`),
    so problems name that file, without a line or a field."""

    path: Path
    config: GpuxConfig
    marks: Marks = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()
    # where v1 fields that an earlier-format file was mapped to are written in that file (see migrate.py)
    aliases: dict[Loc, Loc] = field(default_factory=dict, repr=False)
    notes: tuple[Problem, ...] = field(default=(), repr=False)  # the warnings, located
    shown: str = ""
    implied: bool = False
    derived: Derived = field(default_factory=Derived, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shown", self.shown or str(self.path))
        object.__setattr__(self, "path", Path(os.path.abspath(self.path)))

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def source(self) -> Path:
        """The model file gpux reads: model.source, or what a hub id or a checkpoint resolves to (`resolved`)."""
        resolved = self.resolved
        return resolved.path if resolved is not None else (self.root / self.config.model.source).resolve()

    @property
    def resolved(self) -> Resolved | None:
        """A hub id or a transformers checkpoint resolved (once per process: `gpux.sources.resolve`); None for a
        local model file."""
        model = self.config.model
        if not needs_resolving(model.source, model.task):
            return None
        from gpux.sources import resolve

        say = lambda message: str(self.problem(("model", "source"), message))  # noqa: E731  # located at the field
        return self.derived.get("source", model, lambda: resolve(model.source, model.task, self.root, say))

    @property
    def origin(self) -> dict[str, str] | None:
        """Where the model file came from (a hub repo at a commit, a checkpoint and its task), else None."""
        resolved = self.resolved
        return resolved.origin if resolved is not None else self.config.model.origin

    def named_files(self) -> list[Named]:
        """Every file this gpux.yml names (`config.files.FIELDS`), the model first."""
        return named(self.config)

    def read_lines(self, at: Loc, path: str, *, exact: bool = False) -> list[str]:
        """The entries of the list file `path` that field `at` names (UTF-8, a BOM dropped; `exact`: each line as it
        is, as a charset needs). A file that cannot be read is a ConfigError at `at`."""
        try:
            text = (self.root / path).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([self.problem(at, f"cannot read {path}: {exc}")]) from exc
        return lines(text, exact=exact)

    def labels_of(self, output: str) -> list[str] | None:
        """Output `output`'s labels as gpux.yml declares them (a list, or a file of one per line), else the class
        names the model carries (an ONNX-ML classifier's, once the model is checked: `Derived.labels`); None: none."""
        spec = (self.config.outputs or {}).get(output)
        if spec is None or spec.labels is None:
            return self.derived.labels.get(output)
        if isinstance(spec.labels, list):
            return [str(x) for x in spec.labels]
        return self.read_lines(("outputs", output, "labels"), spec.labels)

    def problem(self, loc: tuple[str, ...], message: str, key: bool = False, as_written: bool = False) -> Problem:
        """A Problem at the v1 field `loc` (or at `loc` as the file writes it), named and located as written."""
        if self.implied:
            return Problem(self.shown, 0, 0, "", message)
        return Written(Path(self.shown), self.marks, self.aliases).problem(loc, message, key, as_written)


def find_config(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        for name in CONFIG_NAMES:
            if (p / name).is_file():
                return p / name
        if (p / WORKSPACE_NAME).is_file():
            raise ConfigError([Problem(str(p), 0, 0, "", "this folder holds a workspace (gpux.workspace.yml), not a "
                                       "gpux.yml: build, run, inspect, serve, use and export triton take it; "
                                       "name one of its models' folders for this command")])
        raise ConfigError([Problem(str(p), 0, 0, "", "no gpux.yml here; create one (see docs/config.md)")])
    if not p.is_file():
        raise ConfigError([Problem(str(p), 0, 0, "", "file not found")])
    return p


def load_config(path: str | Path, *, require_model: bool = True) -> Project:
    """Read, migrate and validate a gpux.yml; raise ConfigError listing every problem at once.

    With `require_model=False` (plain `gpux validate`) a missing model file is a warning, not an error:
    models are often generated or fetched after checkout, and the config can be checked without them.
    """
    file = find_config(path)
    try:
        text = file.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([Problem(str(file), 0, 0, "", f"cannot read: {exc}")]) from exc
    data, marks, problems = parse_yaml(text, str(file))
    if problems and data is None:
        raise ConfigError(problems)
    if not isinstance(data, dict):
        line, col = marks.get((), (1, 1))
        msg = "no settings in this file; a gpux.yml needs at least name: and model: {source: ...}" \
            if data is None else f"expected a mapping of keys (name:, model:, ...), got {show_value(data)}"
        raise ConfigError([Problem(str(file), line, col, "", msg)])
    moved = migrate(data)
    written = Written(file, marks, moved.aliases)
    notes = [written.problem(loc, msg, key=True, as_written=True) for loc, msg in moved.notes]
    problems += [written.problem(loc, msg, key=True, as_written=True) for loc, msg in moved.errors]
    config = None
    try:
        config = GpuxConfig.model_validate(moved.data)
    except ValidationError as exc:
        problems += describe_errors(written, GpuxConfig, exc.errors(), moved.data)
    missing, missing_notes = check_files(written, moved.data, require_model)
    problems += missing + check_torch_runtime(written, moved.data)
    if problems or config is None:
        raise ConfigError(sorted(dict.fromkeys(problems), key=lambda p: (p.line, p.col)))
    notes = sorted(notes + missing_notes, key=lambda p: (p.line, p.col))
    return Project(path=file, config=config, marks=marks, warnings=tuple(str(n) for n in notes),
                   aliases=moved.aliases, notes=tuple(notes))


def check_files(written: Written, data: dict[str, Any], require_model: bool = True) -> tuple[list[Problem],
                                                                                            list[Problem]]:
    """Files named by the config exist (cheap: nothing is parsed): (problems, notes). Reads the raw mapping, so
    these are reported together with validation problems. Without `require_model`, a missing file (often made
    later, as models are) is a note; an empty path or a folder for the model is always a problem."""
    root = written.path.parent
    out: list[Problem] = []
    notes: list[Problem] = []
    for entry in named(data):
        if entry.field.module or entry.found(root) is not None or (entry.at != ("model", "source") and not entry.path):
            continue
        if entry.at == ("model", "source") and (is_hub(entry.path) or _exports(data, root / entry.path)):
            continue  # resolved when the model is read (gpux.sources)
        msg = entry.field.missing.format(path=entry.path)
        if entry.at == ("model", "source"):
            where = (root / entry.path).resolve()
            msg += f" (looked for {where}; paths are relative to gpux.yml)"
            if not entry.path or where.is_dir():
                out.append(written.problem(entry.at, "expected a model file, got "
                                           f"{'an empty path' if not entry.path else 'a folder'}: {where}"))
                continue
            if not require_model:
                msg += "; build, run and validate --check-model need it"
        (out if require_model else notes).append(written.problem(entry.at, msg))
    return out, notes


def _exports(data: dict[str, Any], where: Path) -> bool:
    """model.task names a checkpoint folder to export (a folder is no model file otherwise)."""
    model = data.get("model")
    return isinstance(model, dict) and model.get("task") is not None and where.is_dir()


def check_torch_runtime(written: Written, data: dict[str, Any]) -> list[Problem]:
    """`providers.<name>.runtime: torch` needs a PyTorch source: an ONNX model.source (by model.format, else its
    suffix) cannot run in PyTorch. Reads the raw mapping, so it is reported beside validation problems."""
    model, blocks = data.get("model"), data.get("providers")
    if not isinstance(model, dict) or not isinstance(blocks, dict):
        return []
    fmt = model.get("format") or ("onnx" if str(model.get("source", "")).lower().endswith(".onnx") else None)
    if fmt != "onnx":
        return []
    return [written.problem(("providers", str(name), "runtime"),
                            "runtime: torch runs PyTorch sources (TorchScript or .pt2), but model.source is an "
                            "ONNX file; use runtime: onnxruntime here, or point model.source at the PyTorch "
                            "model")
            for name, block in blocks.items() if isinstance(block, dict) and block.get("runtime") == "torch"]
