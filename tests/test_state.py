"""No module holds state between calls but the caches and registries declared below (docs/design.md, *Adding a
provider*): no `global` statement; a module-level dict, list or set (a literal or a call) is never changed in place
(a method that mutates it, an item set or deleted, `|=`, or a function of the module that does so to it); a
`functools` cache, a bounded cache (`Kept`) or a context variable at module level is named here with what bounds
it. Read from the source with `ast`: nothing is imported."""

from __future__ import annotations

import ast

from tests.test_layers import GENERATED, ROOT, module_name

MUTATING = {"append", "appendleft", "add", "update", "clear", "pop", "popitem", "popleft", "setdefault", "extend",
            "extendleft", "insert", "remove", "discard", "sort", "reverse", "move_to_end"}
CONTAINERS = {"dict", "list", "set", "defaultdict", "deque", "OrderedDict", "Counter", "WeakValueDictionary",
              "WeakKeyDictionary", "WeakSet"}
DECLARING = {"Kept", "ContextVar"}  # module-level values that hold state by design, each named below
CACHES = {"cache", "lru_cache"}

PROCESS_FACT = "a fact of this process or machine, the same on every call (cached once)"
DECLARED = {
    # registries: what plug-ins add, once, as they register
    "gpux.config.kinds.ADDED": "answer kinds a plug-in registers (`register`), keyed by their postprocess key",
    "gpux.config.kinds.ANSWER_KINDS": "the answer kinds' table; `register` adds a plug-in's row",
    # bounded caches of pure functions
    "gpux.serve.body.PLANS": "an infer header's reading, by its bytes and limits: at most KEPT, then emptied",
    "gpux.serve.body.HEADS": "a reply's JSON header, by what it is written from: at most KEPT, then emptied",
    "gpux.answers.text._load": "tokenizers by file, stamp and length: at most 8 (lru_cache)",
    "gpux.quality.agreement._class_texts": "CTC's class characters by class count and blank: at most 8 (lru_cache)",
    "gpux.config.kinds.step": "the function a kind names for a role (resolved once per kind and role)",
    "gpux.answers.kinds.decoder": "the decode step a kind names (resolved once per kind)",
    # context variables, set for a block and reset after it
    "gpux.report._INVOKED": "the running command's Invocation (report.invoked); reset when the command ends",
    "gpux.files._READING": "memos read but not written within files.reading_only; reset after it",
    "gpux.quality.speed._SCREEN": "tune's speed screen for the builds within quality.speed.screened; reset after it",
    # facts of the process and the machine
    "gpux.model.compat._probe_limits": PROCESS_FACT,
    "gpux.providers.ort_available_eps": PROCESS_FACT,
    "gpux.providers.probe": PROCESS_FACT,
    "gpux.providers.probe_torch": PROCESS_FACT,
    "gpux.providers._plugins": PROCESS_FACT,
    "gpux.serve.memory._libc": PROCESS_FACT,
    "gpux.runtimes.torch_export._exportable_type": PROCESS_FACT,
    "gpux.runtimes.coreml.ct": PROCESS_FACT,
    "gpux.runtimes.openvino.core": "one OpenVINO Core per process: plugins load once, compiled models share it",
    "gpux.machine.cpuinfo": PROCESS_FACT,
    "gpux.machine.cuda_driver": PROCESS_FACT,
    "gpux.machine.gpu_identity": PROCESS_FACT,
    "gpux.optional.is_installed": PROCESS_FACT,
}


def _called(node: ast.expr) -> str:
    f = node.func if isinstance(node, ast.Call) else node
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    return isinstance(value, ast.Call) and _called(value) in CONTAINERS


def _changed(tree: ast.AST, name: str) -> bool:
    """Whether `name` is changed in place anywhere under `tree`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name and node.func.attr in MUTATING:
            return True
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        if any((isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name)
               or (isinstance(node, ast.AugAssign) and isinstance(t, ast.Name) and t.id == name) for t in targets):
            return True
    return False


def _handed_and_changed(tree: ast.Module, name: str) -> bool:
    """Whether `name` is handed to a function of the module that changes that parameter in place."""
    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in functions:
            params = [a.arg for a in functions[call.func.id].args.args]
            for i, arg in enumerate(call.args):
                if isinstance(arg, ast.Name) and arg.id == name and i < len(params) \
                        and _changed(functions[call.func.id], params[i]):
                    return True
    return False


def module_state() -> dict[str, str]:
    """Each module-level value that holds state between calls → what it is."""
    found: dict[str, str] = {}
    for path in ROOT.rglob("*.py"):
        if GENERATED in path.parts:
            continue
        module, tree = module_name(path), ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found.update({f"{module}.{n}": f"global statement, line {node.lineno}" for n in node.names})
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_called(d) in CACHES for d in node.decorator_list):
                found[f"{module}.{node.name}"] = "a functools cache"
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            for name in names:
                if isinstance(value, ast.Call) and _called(value) in DECLARING:
                    found[f"{module}.{name}"] = _called(value)
                elif _container(value) and (_changed(tree, name) or _handed_and_changed(tree, name)):
                    found[f"{module}.{name}"] = f"a module-level container changed in place (line {node.lineno})"
    return found


def test_no_module_state_but_the_declared_caches() -> None:
    found = module_state()
    hidden = {name: what for name, what in found.items() if name not in DECLARED}
    assert not hidden, "module-level state (hand it over as a value, or declare the cache and its bound in " \
        f"{__file__}):\n" + "\n".join(f"{name}: {what}" for name, what in sorted(hidden.items()))
    stale = sorted(set(DECLARED) - set(found))
    assert not stale, f"no longer module state: take them off DECLARED in {__file__}: {stale}"
