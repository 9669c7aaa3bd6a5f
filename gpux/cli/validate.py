"""`gpux validate` and `gpux schema`: check many gpux.yml files fast, report as text, JSON or annotations."""

from __future__ import annotations

import glob
import json
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpux.config import CONFIG_NAMES
from gpux.config.load import load_config
from gpux.config.locate import open_project
from gpux.config.schema import GpuxConfig
from gpux.errors import ConfigError, ExitCode, GpuxError, Problem, UsageError

SCHEMA_ID = "https://gpux.dev/schemas/gpux.schema.json"
SCHEMA_FILE = "schemas/gpux.schema.json"  # the checked-in schema, relative to the repository root
SKIP_DIRS = {"node_modules", "__pycache__", "site-packages"}  # and every hidden folder (.git, .venv, .gpux)


def schema_text() -> str:
    schema: dict[str, Any] = GpuxConfig.model_json_schema()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
              "title": "gpux.yml", **schema}
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def schema_command(output: str | None, check: bool) -> None:
    """`gpux schema`: print the JSON Schema, write it to `output`, or (--check) fail if `output` (default: the
    checked-in schemas/gpux.schema.json under the current folder) differs."""
    import click

    text = schema_text()
    if check:
        check_schema(output, text)
        click.echo(f"{output or SCHEMA_FILE} is up to date")
        return
    if output is None:
        click.echo(text, nl=False)
        return
    p = Path(output)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    click.echo(f"wrote {output}")


def check_schema(output: str | None, text: str) -> None:
    """Raise unless the schema file (`output`, else SCHEMA_FILE in the current folder) holds `text`."""
    if output is None and not Path(SCHEMA_FILE).is_file():
        raise UsageError(f"--check compares with {SCHEMA_FILE}, which is not in this folder",
                         hint="run it in the repository root, or pass -o FILE")
    name = output or SCHEMA_FILE
    p = Path(name)
    if not p.is_file():
        raise GpuxError(f"{name}: does not exist", hint="write it with `make schema` (gpux schema -o FILE)")
    if p.read_text(encoding="utf-8") != text:
        raise GpuxError(f"{name}: out of date with the config models", hint="run `make schema`")


@dataclass
class Result:
    """What validating one path found."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"file": str(self.path), "valid": self.valid,
                "problems": [_problem_dict(p) for p in self.problems],
                "warnings": [_problem_dict(p) for p in self.warnings]}


def _problem_dict(p: Problem) -> dict[str, Any]:
    return {"line": p.line, "column": p.col, "field": p.field, "message": p.message}


def _configs_below(folder: Path) -> list[Path]:
    """The folder's own gpux.yml; without one, every gpux.yml below it (hidden folders skipped)."""
    from gpux.config import WORKSPACE_NAME

    for name in CONFIG_NAMES:
        if (folder / name).is_file():
            return [folder / name]
    found = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS)
        found += [Path(here) / WORKSPACE_NAME] if WORKSPACE_NAME in files else []
        config = next((n for n in CONFIG_NAMES if n in files), None)
        if config:
            found.append(Path(here) / config)
    return found


def expand(paths: list[str]) -> list[Path | Result]:
    """Files to check, in the order given; a pattern or folder that names none is a Result saying so."""
    out: list[Path | Result] = []
    for raw in paths:
        pattern = any(c in raw for c in "*?[")
        matches = sorted(glob.glob(raw, recursive=True)) if pattern else [raw]
        if not matches:
            out.append(Result(Path(raw), [Problem(raw, 0, 0, "", "no file matches this pattern")]))
        for m in matches:
            p = Path(m)
            if p.is_dir():
                found = _configs_below(p)
                out.extend(found or [Result(p, [Problem(m, 0, 0, "", "no gpux.yml in this folder or below")])])
            else:
                out.append(p)
    seen: set[Path] = set()
    unique: list[Path | Result] = []
    for item in out:
        key = (item.path if isinstance(item, Result) else item).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def check_one(path: Path, check_model: bool, model: bool = True) -> Result:
    """Validate one file; with `check_model`, also check the model itself (onnx checker, versions against
    the installed runtimes); else, unless `model` is off, compare the declared I/O with the model file
    when it is present (read without importing onnx)."""
    if path.name.endswith(".workspace.yml"):  # a workspace: its own fields, its models, its pipeline's names
        from gpux.config.workspace import load_workspace

        try:
            load_workspace(path, require_model=check_model)
        except ConfigError as exc:
            return Result(path, sorted(exc.problems, key=lambda p: (p.line, p.col)))
        return Result(path)
    more: list[Problem] = []
    try:
        project = open_project(str(path)) if path.suffix.lower() == ".onnx" else \
            load_config(path, require_model=check_model)
        if check_model:
            from gpux.answers.steps import Steps
            from gpux.model import io as model_io

            try:
                checked = model_io.check_model(project)
            except ConfigError:
                raise
            except GpuxError as exc:  # a hub id or a checkpoint that cannot be resolved: already at its line
                return Result(path, [_at_source(project, path, exc)])
            Steps.of(project, checked.inputs, checked.outputs)  # the steps as `gpux run` binds them, or their lines
            more += checked.notes
            note = checked.compat.note
            if note:
                more.append(project.problem(("model", "source"), note))
        elif model:
            more += declared_io_problems(project)
    except ConfigError as exc:
        return Result(path, sorted(exc.problems, key=lambda p: (p.line, p.col)))
    except GpuxError as exc:  # e.g. onnx not installed for --check-model
        return Result(path, [Problem(str(path), 0, 0, "", "; ".join(exc.lines()))])
    notes = [*project.notes, *more]
    if not model:  # --no-model: the config alone, for models fetched later; their absence is expected
        generated = ("model.source", "verify.data")
        notes = [n for n in notes if n.field not in generated or "file not found" not in n.message]
    return Result(path, warnings=notes)


def _at_source(project: Any, path: Path, exc: GpuxError) -> Problem:
    """An error resolving model.source, whose line already names the file, line and field, as that problem (the
    file named once); another as the file's."""
    said, at = "; ".join(exc.lines()), project.problem(("model", "source"), "")
    prefix = str(at)
    return replace(at, message=said[len(prefix):]) if said.startswith(prefix) else Problem(str(path), 0, 0, "", said)


def declared_io_problems(project: Any) -> list[Problem]:
    """Declared inputs/outputs against an ONNX model file that is present: raises ConfigError; the warnings."""
    from gpux.formats import source_format
    from gpux.model.io import check_declared
    from gpux.sources.ref import is_hub

    if project.config.model.task is not None or is_hub(project.config.model.source):
        return []  # a hub id or a checkpoint: resolved (and exported) by --check-model, build and run only
    if not project.source.is_file() or source_format(project) != "onnx":
        return []
    from gpux.model.wire import WireError, read_io

    try:
        io = read_io(project.source)
    except (WireError, OSError) as exc:
        named = "" if project.implied else f"{project.source.name}: "
        raise ConfigError([project.problem(("model", "source"), f"{named}not a readable ONNX model ({exc})")]) \
            from exc
    problems = check_declared(project, io)
    # an output's metadata may misstate it: only running the model tells (--check-model), so a warning here
    shapes = [p for p in problems if p.field.startswith("outputs.") and ".shape" in p.field]
    problems = [p for p in problems if p not in shapes]
    if problems:
        raise ConfigError(problems)
    return [replace(p, message=f"{p.message} in its metadata; validate --check-model runs it to tell") for p in shapes]


def validate_paths(paths: list[str], fmt: str, check_model: bool, model: bool = True) -> int:
    """Check every file, print in `fmt` (text, json, github), return the exit code (3 if any is invalid)."""
    results = [item if isinstance(item, Result) else check_one(item, check_model, model) for item in expand(paths)]
    bad = sum(1 for r in results if not r.valid)
    if fmt == "json":
        doc = {"valid": bad == 0, "checked": len(results), "invalid": bad, "files": [r.to_dict() for r in results]}
        from gpux.report import emit_json

        emit_json(doc)
    else:
        for r in results:
            for w in r.warnings:
                _emit(fmt, "warning", w)
            for x in r.problems:
                _emit(fmt, "error", x)
            if r.valid and fmt == "text":
                sys.stdout.write(f"ok: {r.path}\n")
        sys.stdout.write(f"{len(results) - bad} valid, {bad} invalid\n")
    return int(ExitCode.CONFIG) if bad else 0


def _escape_data(text: str) -> str:
    """A GitHub workflow command's message: %, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A GitHub workflow command's property value: also ':' and ','."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _emit(fmt: str, level: str, problem: Problem) -> None:
    if fmt == "github":
        where = f"file={_escape_property(problem.file)}"
        if problem.line:
            where += f",line={problem.line},col={problem.col}"
        body = f"{problem.field}: {problem.message}" if problem.field else problem.message
        sys.stdout.write(f"::{level} {where}::{_escape_data(body)}\n")
    else:
        sys.stderr.write(f"{level}: {problem}\n")
