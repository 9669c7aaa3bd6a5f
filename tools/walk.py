"""The walk of a command's request through the code, counted: `python tools/walk.py` prints, for `gpux run` and
`gpux build`, the stays in a file, the rooms, the climbs back up and the returns (docs/design.md, "The walk of a
build"). Read from the source with `ast`; nothing of gpux is imported or run.

How it counts: the request (the entry function's parameter) is followed through every call that hands it, a part
of it or the request put in another form on to a function of gpux, in the order the code is written, every branch
one after the other; each function is walked once (where it is first reached). The walk is the list of the
functions it enters, in that order (a call's callee, then the calls that callee makes, then the caller's next
call). A stay is a run of that list inside one file; a room is a folder of gpux (a top-level module its own); a
file's floor is the longest chain of imports below it; a climb is a move into a file on a higher floor than the
one just left; a return is a move into a file already left. Calls on objects (`session.run_feeds(...)`) are not
followed.

    python tools/walk.py                        # both commands
    python tools/walk.py gpux/cli/run.py:run_command:req --path   # one entry, its stays listed
    python tools/walk.py --root OTHER/gpux      # another checkout's code (a figure before a change)
"""

from __future__ import annotations

import argparse
import ast
import functools
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

ENTRIES = {"gpux run": "gpux/cli/run.py:run_command:req", "gpux build": "gpux/cli/build.py:build_command:req"}
Func = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(eq=False)
class Code:
    """Every module of the package under `root`: its tree, its functions, the names its imports bind."""

    root: Path
    trees: dict[str, ast.Module] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path in sorted(self.root.rglob("*.py")):
            if "proto" not in path.relative_to(self.root).parts:
                self.trees[self.name(path)] = ast.parse(path.read_text(), str(path))

    def name(self, path: Path) -> str:
        parts = [self.root.name, *path.relative_to(self.root).with_suffix("").parts]
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def path(self, module: str) -> str:
        rel = module.replace(".", "/")
        return f"{rel}/__init__.py" if (self.root.parent / rel / "__init__.py").is_file() else f"{rel}.py"

    def functions(self, module: str) -> dict[str, Func]:
        return {n.name: n for n in self.trees[module].body if isinstance(n, Func)}

    @functools.cache  # noqa: B019  # one Code a run
    def imports(self, module: str) -> frozenset[str]:
        """The modules of the package that `module` imports (function-level imports too)."""
        found: set[str] = set()
        for node in ast.walk(self.trees[module]):
            if isinstance(node, ast.ImportFrom) and node.module and node.module in self.trees:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in self.trees else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in self.trees}
        return frozenset(found - {module})

    @functools.cache  # noqa: B019
    def floor(self, module: str) -> int:
        below = self.imports(module)
        return 1 + max(map(self.floor, below)) if below else 0

    def bound(self, module: str, func: Func | None) -> dict[str, tuple[str, str | None]]:
        """Names → (module, attribute), attribute None for a module: the module's imports, then the function's."""
        names: dict[str, tuple[str, str | None]] = {}
        tops = (ast.ImportFrom, ast.Import, ast.If)  # `if TYPE_CHECKING:` imports too
        nodes: list[ast.stmt] = [n for n in self.trees[module].body if isinstance(n, tops)]
        scope = [*ast.walk(ast.Module(body=nodes, type_ignores=[]))] + ([*ast.walk(func)] if func else [])
        for node in scope:
            if isinstance(node, ast.ImportFrom) and node.module in self.trees:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    names[a.asname or a.name] = (sub, None) if sub in self.trees else (node.module, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in self.trees and a.asname:
                        names[a.asname] = (a.name, None)
        return names

    def resolve(self, module: str, name: str, depth: int = 0) -> tuple[str, str] | None:
        """Where `module.name` is defined as a function, following re-exports."""
        if name in self.functions(module):
            return module, name
        where = self.bound(module, None).get(name)
        if where is None or where[1] is None or depth > 5:
            return None
        return self.resolve(where[0], where[1], depth + 1)


def _mentions(node: ast.AST, names: set[str]) -> bool:
    """Whether `node` is one of `names` or a part of one (`req`, `req.path`, `req.files[0]`, `*req.files`, `a or
    req.x`, `(req.x, y)`) or one put in another form (`BatchRequest(sources=req.files)`); not a value a function
    made of it (`open_models(req.path)` is handed the request; what it returns is not the request)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        return _mentions(node.value, names)
    if isinstance(node, ast.BoolOp | ast.Tuple | ast.List):
        return any(_mentions(v, names) for v in (node.values if isinstance(node, ast.BoolOp) else node.elts))
    if isinstance(node, ast.IfExp):
        return _mentions(node.body, names) or _mentions(node.orelse, names)
    if isinstance(node, ast.Dict | ast.DictComp):  # `{**req.x}`, `{f: getattr(req, f) for f in fields}`
        return any(_mentions(v, names) for v in (node.values if isinstance(node, ast.Dict) else [node.value]))
    if isinstance(node, ast.Call) and _repackages(node.func):  # `BatchRequest(sources=req.files, ...)`, `replace(walk)`
        return any(_mentions(v, names) for v in [*node.args, *(k.value for k in node.keywords)])
    return False


def _repackages(f: ast.expr) -> bool:
    """A call that puts its arguments in another form rather than working on them: a class, `replace`, a builtin
    container."""
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    return name[:1].isupper() or name in {"replace", "getattr", "tuple", "list", "dict", "set", "frozenset"}


def _targets(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """What an assignment, a loop, a `with ... as` or a walrus binds, with the value it binds it from."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
        return [(node.target, node.iter)]
    if isinstance(node, ast.withitem) and node.optional_vars is not None:
        return [(node.optional_vars, node.context_expr)]
    return []


def tainted(func: Func, start: set[str]) -> set[str]:
    """The names made from the request in `func` (flow-insensitive: until nothing more is made)."""
    names, pairs = set(start), [p for n in ast.walk(func) for p in _targets(n)]
    while True:
        more = {n.id for target, value in pairs if _mentions(value, names)
                for n in ast.walk(target) if isinstance(n, ast.Name)} - names
        if not more:
            return names
        names |= more


def _params(func: Func, call: ast.Call, names: set[str]) -> set[str]:
    """The callee's parameters that the call hands a name made from the request."""
    a = func.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    handed: set[str] = set()
    for i, arg in enumerate(call.args):
        if _mentions(arg, names):
            if isinstance(arg, ast.Starred) or i >= len(positional):
                handed |= {*positional[i:], *(a.vararg.arg for _ in [0] if a.vararg)}
            else:
                handed.add(positional[i])
    for kw in call.keywords:
        if _mentions(kw.value, names):
            handed |= {p.arg for p in [*a.args, *a.kwonlyargs]} if kw.arg is None else {kw.arg}
    return handed


@dataclass
class Walk:
    code: Code
    files: list[tuple[str, str]] = field(default_factory=list)  # (module, function) the request is in, in order
    seen: set[tuple[str, str]] = field(default_factory=set)

    def follow(self, module: str, name: str, params: set[str]) -> None:
        self.seen.add((module, name))
        func = self.code.functions(module)[name]
        self.files.append((module, name))
        names, bound = tainted(func, params), self.code.bound(module, func)
        calls = sorted((n for n in ast.walk(func) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset))
        for call in calls:
            if not any(_mentions(x, names) for x in [*call.args, *(k.value for k in call.keywords)]):
                continue
            callee = self.callee(module, call.func, bound)
            if callee is None or callee in self.seen:
                continue
            self.follow(*callee, _params(self.code.functions(callee[0])[callee[1]], call, names))

    def callee(self, module: str, f: ast.expr, bound: dict[str, tuple[str, str | None]]) -> tuple[str, str] | None:
        if isinstance(f, ast.Name):
            if f.id in self.code.functions(module):
                return module, f.id
            where = bound.get(f.id)
            return self.code.resolve(where[0], where[1]) if where and where[1] is not None else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            where = bound.get(f.value.id)
            return self.code.resolve(where[0], f.attr) if where and where[1] is None else None
        return None


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def figures(code: Code, entry: str) -> tuple[dict[str, int], list[tuple[str, list[str]]]]:
    """stays, rooms, climbs, returns of one entry `path/to/file.py:function:parameter`, and its stays."""
    path, name, param = entry.split(":")
    walk = Walk(code)
    walk.follow(code.name(code.root.parent / path), name, {param})
    stays: list[tuple[str, list[str]]] = []
    for module, func in walk.files:
        if stays and stays[-1][0] == module:
            stays[-1][1].append(func) if func not in stays[-1][1] else None
        else:
            stays.append((module, [func]))
    climbs = sum(code.floor(b) > code.floor(a) for (a, _), (b, _) in itertools.pairwise(stays))
    returns = sum(m in {s for s, _ in stays[:i]} for i, (m, _) in enumerate(stays))
    counts = {"stays": len(stays), "rooms": len({room(m) for m, _ in stays}), "climbs": climbs, "returns": returns}
    return counts, stays


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("entries", nargs="*", help="FILE:FUNCTION:PARAMETER (default: gpux run and gpux build)")
    ap.add_argument("--root", default=str(Path(__file__).resolve().parents[1] / "gpux"), help="the package folder")
    ap.add_argument("--path", action="store_true", help="list each stay: file (floor) and the functions in it")
    args = ap.parse_args(argv)
    code = Code(Path(args.root).resolve())
    entries = {e: e for e in args.entries} or ENTRIES
    print(f"{'':12} stays rooms climbs returns")
    for label, entry in entries.items():
        counts, stays = figures(code, entry)
        print(f"{label:12} {counts['stays']:5} {counts['rooms']:5} {counts['climbs']:6} {counts['returns']:7}")
        for module, funcs in stays if args.path else []:
            print(f"    {code.path(module)} ({code.floor(module)}): {', '.join(funcs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
