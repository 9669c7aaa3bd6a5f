"""The registry is the only place that knows a provider: outside gpux/providers/ and gpux/runtimes/ no code
compares with a provider's name (==, !=, in, a tuple or set of names) or keys a table by provider names; rooms
ask the row instead. Read from the source with `ast`: nothing is imported but the registry."""

from __future__ import annotations

import ast
from pathlib import Path

from gpux.providers import BUILTIN_ROWS

ROOT = Path(__file__).resolve().parents[1] / "gpux"
OWNERS = ("gpux/providers/", "gpux/runtimes/")  # where provider names belong
NAMES = set(BUILTIN_ROWS)

# (file, the line as written) -> why it may stay. Exact: an entry that no longer matches fails too.
ALLOWED = {
    # Not provider names: the same words as resource or host-fact keys.
    ("gpux/deploy/kserve.py", 'limits: dict[str, str] = {"cpu": cpu, "memory": memory}'): "Kubernetes resource",
    ("gpux/deploy/kserve.py", 'return {"requests": {"cpu": cpu, "memory": memory}, "limits": limits}'):
        "Kubernetes resource",
    ("gpux/machine.py", 'return {"cpu": cpu_model(), "machine": platform.machine()}'): "host fact",
    ("gpux/plan/lock.py", 'return {"cpu": host["cpu_model"], "cpu_flags": list(cpu_flags()), '
                          '"machine": platform.machine(),'): "host fact",
    ("gpux/plan/lock.py",
     'named = {"cpu": f"cpu (measured on {theirs.get(\'cpu\')!r}; this is {ours.get(\'cpu\')!r})",'):
        "host fact (a lock's fingerprint key)",
    ("gpux/optional.py", "EXTRAS = {"): "distribution names (openvino, tensorrt) -> pip extras",
}


def _names(node: ast.AST) -> list[str]:
    """Provider names `node` spells: a string, or a tuple, list or set of them."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [n.value for n in items if isinstance(n, ast.Constant) and n.value in NAMES]


def branches(text: str) -> list[int]:
    """Lines of `text` that compare with a provider's name, key a table by one or look one up by name."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            hit = any(_names(side) for side in (node.left, *node.comparators))
        elif isinstance(node, ast.Dict):
            hit = any(k is not None and _names(k) for k in node.keys)
        elif isinstance(node, ast.Subscript | ast.Call):  # registry()["cpu"], getattr(x, "cpu"), .get("cpu")
            args = [node.slice] if isinstance(node, ast.Subscript) else node.args
            hit = any(isinstance(a, ast.Constant) and a.value in NAMES for a in args)
        else:
            continue
        if hit:
            lines.append(node.lineno)
    return sorted(lines)


def provider_branches() -> set[tuple[str, str]]:
    """(file, line) of each branch on a provider's name outside the owners."""
    found = set()
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).as_posix()
        if rel.startswith(OWNERS) or "proto" in path.parts:
            continue
        text = path.read_text()
        lines = text.splitlines()
        found |= {(rel, lines[n - 1].strip()) for n in branches(text)}
    return found


def test_no_room_outside_the_registry_branches_on_a_provider_name() -> None:
    found = provider_branches()
    unexpected = sorted(found - ALLOWED.keys())
    assert not unexpected, "ask the provider's registry row instead of naming it:\n" + "\n".join(
        f"{f}: {line}" for f, line in unexpected)


def test_the_allow_list_is_exact() -> None:
    stale = sorted(ALLOWED.keys() - provider_branches())
    assert not stale, f"remove these entries from ALLOWED in {__file__}: {stale}"


def test_the_check_sees_each_kind_of_branch() -> None:
    snippet = ('if provider == "cuda": pass\nif p in ("cpu", "openvino"): pass\nT = {"tensorrt": 1}\n'
               'x = registry()["rocm"]\nif p != "mps": pass\ny = getattr(blocks, "directml")\n'
               'if provider == row.name: pass\nz = {"memory": 1}\n')
    assert branches(snippet) == [1, 2, 3, 4, 5, 6]
