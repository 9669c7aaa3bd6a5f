"""`gpux validate` and `gpux schema`: check many gpux.yml files fast, report as text, JSON or annotations."""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path
from typing import Any

from gpux.config import CONFIG_NAMES, GpuxConfig, load_config
from gpux.errors import ConfigError, ExitCode, GpuxError, Problem

SCHEMA_ID = "https://gpux.dev/schemas/gpux.schema.json"


def schema_text() -> str:
    schema: dict[str, Any] = GpuxConfig.model_json_schema()
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
              "title": "gpux.yml", **schema}
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def expand(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        matches = sorted(glob.glob(raw, recursive=True)) if any(c in raw for c in "*?[") else [raw]
        if not matches:
            out.append(Path(raw))  # reported as not found
        for m in matches:
            p = Path(m)
            if p.is_dir():
                found = [p / n for n in CONFIG_NAMES if (p / n).is_file()]
                out.extend(found or [p])
            else:
                out.append(p)
    return list(dict.fromkeys(out))


def check_one(path: Path, check_model: bool) -> tuple[list[Problem], list[str]]:
    try:
        project = load_config(path)
        if check_model:
            from gpux.modelio import load_checked

            load_checked(project)
    except ConfigError as exc:
        return exc.problems, []
    except GpuxError as exc:
        return [Problem(str(path), 0, 0, "", exc.message)], []
    return [], project.warnings


def validate_paths(paths: list[str], fmt: str, check_model: bool) -> int:
    results = [(p, *check_one(p, check_model)) for p in expand(paths)]
    bad = sum(1 for _, problems, _ in results if problems)
    if fmt == "json":
        doc = {"valid": bad == 0, "files": [
            {"file": str(p), "valid": not problems, "warnings": warnings,
             "problems": [{"line": x.line, "column": x.col, "field": x.field, "message": x.message}
                          for x in problems]}
            for p, problems, warnings in results]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        for p, problems, warnings in results:
            for w in warnings:
                _emit(fmt, "warning", w, p)
            for x in problems:
                _emit(fmt, "error", str(x), p, x)
            if not problems and fmt == "text":
                sys.stdout.write(f"ok: {p}\n")
        if fmt == "text":
            sys.stdout.write(f"{len(results) - bad} valid, {bad} invalid\n")
    return int(ExitCode.CONFIG) if bad else 0


def _emit(fmt: str, level: str, text: str, path: Path, problem: Problem | None = None) -> None:
    if fmt == "github":
        loc = f"file={path}"
        if problem is not None and problem.line:
            loc += f",line={problem.line},col={problem.col}"
        body = f"{problem.field}: {problem.message}" if problem is not None and problem.field else text
        sys.stdout.write(f"::{level} {loc}::{body}\n")
    else:
        sys.stderr.write(f"{level}: {text}\n")
