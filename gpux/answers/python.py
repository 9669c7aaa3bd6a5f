"""Steps written in Python (`python: module:function` under an input's preprocess or an output's postprocess):
the function imported from gpux.yml's folder, called where a declared step would be, and what it raises reported as
the user's (its file and line), never as gpux's. docs/answers.md, "Python steps"."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpux.errors import StepError


def resolve(root: Path, target: str) -> Callable[..., object]:
    """The function `module:function` names, importable from `root` (first on the import path while it is
    imported, then last, for the imports its functions make when called); a ValueError says why it is not there (for
    the caller to place at its gpux.yml line)."""
    import pkgutil

    folder = str(root)
    sys.path.insert(0, folder)
    try:
        found = pkgutil.resolve_name(target)
    except Exception as exc:  # an import error, or whatever the module raises as it is imported
        raise ValueError(f"cannot import {target} from {root}: {_where(exc, root)}") from exc
    finally:
        sys.path.remove(folder)
        if folder not in sys.path:
            sys.path.append(folder)
    if not callable(found):
        raise ValueError(f"{target} is a {type(found).__name__}, not a function")
    return found


def call(function: Callable[..., object], target: str, root: Path, *args: object) -> Any:
    """`function(*args)`, as the user's function returns it (unchecked: an answer, a tensor, tensors by input name);
    what it raises is a StepError naming the user's file and line."""
    try:
        return function(*args)
    except Exception as exc:  # the user's function may raise anything: theirs, named at their line, never gpux's
        raise StepError(f"the python step {target} raised: {_where(exc, root)}",
                        hint="the error is in that function; fix it there") from exc


def _where(exc: BaseException, root: Path) -> str:
    """`file:line: Type: message` at the innermost frame in the user's folder (else the innermost frame; a
    SyntaxError where it is)."""
    base = str(root.resolve())
    frames = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append((exc.filename, exc.lineno))
    mine = [f for f in frames if os.path.abspath(f[0]).startswith(base + os.sep)] or frames
    if not mine:
        return f"{type(exc).__name__}: {exc}"
    path, line = os.path.abspath(mine[-1][0]), mine[-1][1]
    shown = os.path.relpath(path, base) if path.startswith(base + os.sep) else mine[-1][0]
    return f"{shown}:{line}: {type(exc).__name__}: {exc}"


def file_data(item: object) -> object:
    """What a preprocess function is given: a path's bytes, bytes as they are, anything else (a PIL image, an
    array) as it is."""
    if isinstance(item, str | os.PathLike):
        from gpux.errors import reading_file

        with reading_file(os.fspath(item)):
            return Path(item).read_bytes()
    return bytes(item) if isinstance(item, bytearray | memoryview) else item


def canonical(answer: object) -> str:
    """An answer as text to compare (verification): JSON, floats to 4 significant digits."""
    import json

    def plain(value: object) -> object:
        if hasattr(value, "tolist"):
            value = value.tolist()
        if isinstance(value, float):
            return float(f"{value:.4g}")
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return json.dumps(plain(answer), sort_keys=True, default=str)
