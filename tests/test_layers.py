"""The layer rule: every import inside gpux (function-level ones too) points down the room order, and no
module takes part in an import cycle. Read from the source with `ast`: nothing is imported."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "gpux"

# Bottom to top; rooms on one line may import each other (never in a cycle), never a room above them.
ROOMS = [
    # the ground floor: no gpux imports but these
    ("version", "errors", "optional", "files", "machine", "formats", "arrays", "documents", "views"),
    ("providers",),  # the registry: one row per provider, option models, probes
    ("sources",),  # where a model comes from: hub ids, transformers checkpoints exported to ONNX
    ("config",),  # gpux.yml → Project
    ("report",),  # rendering shared by every command
    ("model",),  # a model file's facts, feeds cast to it
    ("answers",),  # declared pre- and post-processing: images in, answers out
    ("plan",),  # providers to try, targets, the offer, the saved choice and the tune lock
    ("runtimes",),  # per backend: build an artifact, open a runner
    ("quality",),  # calibration, verification
    ("artifacts",),  # the store, locked builds, an unchanged build answered
    ("run",),  # the Session: ordered fallback over built artifacts
    ("bench",),  # protocol, run --benchmark, tune
    ("workspace",),  # several projects as one: a gpux.workspace.yml
    ("serve",),  # the Open Inference Protocol server
    ("deploy",),  # images, Triton, KServe, Ray Serve
    ("cli", "__main__"),  # nothing imports it
]
LEVEL = {room: i for i, rooms in enumerate(ROOMS) for room in rooms}
GENERATED = "proto"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    p = ROOT.parent / name.replace(".", "/")
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        if GENERATED in path.parts:
            continue
        name = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                graph[name].update(a.name for a in node.names if a.name.split(".")[0] == "gpux")
            elif isinstance(node, ast.ImportFrom):
                assert not node.level, f"{name}: relative import (gpux imports by absolute name)"
                base = node.module or ""
                if base.split(".")[0] != "gpux":
                    continue
                for alias in node.names:  # `from gpux.x import y`: y may be a module itself
                    graph[name].add(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}") else base)
        graph[name].discard(name)
    return graph


def room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_every_room_is_in_the_order() -> None:
    rooms = {room(m) for m in imports()} | {p.stem for p in ROOT.iterdir() if p.suffix == ".py" or p.is_dir()}
    missing = sorted(r for r in rooms - {"", "__pycache__", "__init__"} if r not in LEVEL)
    assert not missing, f"rooms missing from ROOMS in {__file__}: {missing}"


def test_imports_point_down_the_room_order() -> None:
    wrong = []
    for module, targets in sorted(imports().items()):
        for target in sorted(targets):
            if target == "gpux":  # the package itself (the API `gpux.load` sits on top)
                wrong.append(f"{module} imports the gpux package (the API sits on top: use gpux.run.session)")
            elif module != "gpux" and LEVEL[room(target)] > LEVEL[room(module)]:
                wrong.append(f"{module} ({room(module)}) imports {target} ({room(target)}), a room above it")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles() -> None:
    graph = imports()  # the package's __init__ included: nothing imports it back (its version is gpux.version)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


@pytest.mark.parametrize("limit", [400])
def test_modules_stay_small(limit: int) -> None:
    big = {module_name(p): n for p in ROOT.rglob("*.py") if GENERATED not in p.parts
           and (n := len(p.read_text().splitlines())) > limit}
    assert not big, f"modules over {limit} lines: {big}"


def test_functions_stay_short(limit: int = 60) -> None:
    """docs/design.md: functions under 60 lines (ruff's C901 and PLR0913 hold complexity and parameters)."""
    long = [f"{module_name(p)}.{node.name}: {n}" for p in ROOT.rglob("*.py") if GENERATED not in p.parts
            for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit]
    assert not long, f"functions over {limit} lines: {long}"


BROAD = re.compile(r"except\s*(\(.*)?\b(Exception|BaseException)\b|except\s*:")


def test_every_broad_catch_says_why() -> None:
    """docs/design.md, errors: an `except Exception` (or BaseException, or a bare except) stays only with a comment
    saying why, on its line or the line above."""
    bare = []
    for p in ROOT.rglob("*.py"):
        if GENERATED in p.parts:
            continue
        lines = p.read_text().splitlines()
        bare += [f"{module_name(p)}:{i + 1}" for i, line in enumerate(lines) if BROAD.search(line.split("#")[0])
                 and "#" not in line and not (i and lines[i - 1].strip().startswith("#"))]
    assert not bare, f"broad catches without their reason: {bare}"


# 'module:attribute' strings are imports made later (registry rows, steps, lazy hooks): they must resolve and,
# like an import, point down the room order. Rows and steps (providers/, runtimes/) name the code of a runtime,
# run by the rooms above it: they may name providers/ and runtimes/ only.
NAMED_CODE = re.compile(r"^gpux(?:\.\w+)+:\w+$")
ROW_ROOMS = ("providers", "runtimes")
# The answer-kind rows (gpux.config.kinds) name each kind's steps, run by the rooms that use them (a session's
# answers, verification, the report): they may name the rooms up to quality/.
KIND_ROWS, KIND_ROOMS = "gpux.config.kinds", ("config", "report", "model", "answers", "quality")
NAMED_UP: dict[tuple[str, str], str] = {}  # (module, the string) -> why it may point up; none may


def defined(module: str, name: str) -> bool:
    """Is `name` defined (or imported) at the top level of gpux module `module`? Read with `ast`."""
    p = ROOT.parent / module.replace(".", "/")
    path = p.with_suffix(".py") if p.with_suffix(".py").is_file() else p / "__init__.py"
    if not path.is_file():
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            return True
    return False


def named_code() -> list[tuple[str, str]]:
    """(module, 'module:attribute' string) for every such string constant in gpux."""
    found = []
    for path in ROOT.rglob("*.py"):
        if GENERATED in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAMED_CODE.match(node.value):
                found.append((module_name(path), node.value))
    return sorted(found)


def test_code_named_by_string_resolves_and_points_down() -> None:
    wrong = []
    for module, named in named_code():
        target, _, attr = named.partition(":")
        if not defined(target, attr):
            wrong.append(f"{module}: {named!r} names nothing")
        here, there = room(module), room(target)
        allowed = ROW_ROOMS if here in ROW_ROOMS else KIND_ROOMS if module == KIND_ROWS else \
            [r for r, level in LEVEL.items() if level <= LEVEL[here]]
        if there not in allowed and (module, named) not in NAMED_UP:
            wrong.append(f"{module} ({here}) names {named!r} ({there}): " + (
                "a row or step names a runtime's code only" if here in ROW_ROOMS else
                f"a kind's step names {', '.join(KIND_ROOMS)} only" if module == KIND_ROWS else "a room above it"))
    assert not wrong, "\n".join(wrong)
    assert set(NAMED_UP) <= set(named_code()), "remove the stale NAMED_UP entries"


def test_the_named_code_check_sees_strings() -> None:
    assert ("gpux.providers.builtin", "gpux.runtimes.tensorrt:tensorrt_targets") in named_code()
    assert ("gpux.config.kinds", "gpux.quality.agreement:compare_boxes") in named_code()
    assert defined("gpux.runtimes", "targets") and not defined("gpux.runtimes.tensorrt", "no_such_planner")
