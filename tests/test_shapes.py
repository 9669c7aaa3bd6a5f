"""Shapes a reader can trust: a dataclass with more than five fields is built by keyword (`kw_only=True`, a
`KW_ONLY` marker or `field(kw_only=True)`), so no call site is a row of values matched by position. Read from the
source with `ast`: nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "gpux"
MANY = 5  # more fields than this: keyword-only
POSITIONAL = 2  # ... but for at most this many leading ones (a name, say)


def _is_dataclass(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return (isinstance(target, ast.Name) and target.id == "dataclass") or (
        isinstance(target, ast.Attribute) and target.attr == "dataclass")


def _true(call: ast.Call, keyword: str) -> bool:
    return any(k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def _false(call: ast.Call, keyword: str) -> bool:
    return any(k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is False for k in call.keywords)


def fields(cls: ast.ClassDef) -> tuple[int, int]:
    """(fields taken by __init__, of them positional) of a dataclass."""
    decorator = next(d for d in cls.decorator_list if _is_dataclass(d))
    keyword = isinstance(decorator, ast.Call) and _true(decorator, "kw_only")
    total = positional = 0
    for stmt in cls.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        annotation = ast.unparse(stmt.annotation)
        if "KW_ONLY" in annotation:
            keyword = True
            continue
        value = stmt.value
        call = value if isinstance(value, ast.Call) and ast.unparse(value.func).endswith("field") else None
        if "ClassVar" in annotation or (call and _false(call, "init")):
            continue
        total += 1
        positional += not (keyword or (call and _true(call, "kw_only")))
    return total, positional


def dataclasses() -> dict[str, tuple[int, int]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        if "proto" in path.parts:
            continue
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(_is_dataclass(d) for d in node.decorator_list):
                found[f"{module}.{node.name}"] = fields(node)
    return found


def test_wide_dataclasses_are_keyword_only() -> None:
    wide = sorted(f"{name}: {total} fields, {positional} positional" for name, (total, positional)
                  in dataclasses().items() if total > MANY and positional > POSITIONAL)
    assert not wide, "make these @dataclass(kw_only=True) and build them by keyword:\n" + "\n".join(wide)


def test_the_shape_check_sees_fields() -> None:
    source = """
@dataclass(frozen=True)
class Row:
    name: str
    _: KW_ONLY
    size: int
    kind: ClassVar[str] = "row"
    cache: dict = field(init=False)
    note: str = field(default="", kw_only=True)

@dataclass
class Plain:
    a: int
    b: int = field(default=0)
"""
    row, plain = (n for n in ast.parse(source).body if isinstance(n, ast.ClassDef))
    assert fields(row) == (3, 1) and fields(plain) == (2, 2)
    assert dataclasses()["gpux.providers.row.Provider"][1] == 0
