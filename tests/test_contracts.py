"""The contracts between rooms are typed: no public signature used from another room takes or returns `Any`, except
the documents at the process's edges named below, each with its reason (docs/design.md, *Adding a provider*: records
inside are typed; `dict[str, Any]` is for what `--json` prints, manifests and locks on disk, wire bodies, YAML).
Read from the source with `ast`: nothing is imported.

A signature is between rooms when another room uses it: a public function or class imported by name from another
room (through its package too), named by a `module:attribute` string (the rows' plug-in points), or a class named in
the annotations of such a signature (what it hands over). Its public methods, properties and annotated fields count.
"""

from __future__ import annotations

import ast
import contextlib
import re
from collections import defaultdict

from tests.test_layers import GENERATED, ROOT, is_module, module_name, room

# Documents at the process's edges: what the signature carries is a document of JSON values whose shape is the
# format's, not a record gpux reads field by field.
EDGES = {
    # what --json prints, rendered or dumped as it is
    "gpux.report.emit_json": "any document --json prints",
    "gpux.report.json_text": "any document --json prints",
    "gpux.plan.offer.Offer.to_dict": "the offer as --json prints it",
    "gpux.report.tables.providers_table": "the probe rows of --json, rendered as a table",
    "gpux.report.tables.results_table": "the benchmark rows of --json, rendered as a table",
    "gpux.bench.report_html.write_report": "a benchmark document or tune lock read back from disk",
    "gpux.bench.table.render_table": "the tune lock as written on disk (gpux.lock.json)",
    "gpux.bench.tune.render": "the tune lock as written on disk (gpux.lock.json)",
    "gpux.bench.tune.tune": "the tune lock written to disk and printed by --json",
    "gpux.documents.SessionReport.runtime": "the runner's details as its runtime reports them (--json)",
    "gpux.documents.Judged.answers": "each output's postprocess block as pydantic dumps it to JSON",
    # manifests, records and memos on disk
    "gpux.artifacts.store.Artifact.info": "the build step's own document, kept in the manifest",
    "gpux.errors.VerificationFailed.info": "the build step's own document, kept with the failure",
    "gpux.files.read_memo": "a memo file's JSON document",
    "gpux.files.write_memo": "a memo file's JSON document",
    "gpux.files.memoised": "what a memo keeps per file is the caller's JSON value",
    "gpux.plan.targets.Target.options": "a provider block's options as plain JSON values (the cache key's part)",
    "gpux.plan.targets.with_options": "a provider block's options as plain JSON values",
    "gpux.providers.row.Runner.details": "the runtime's report of what runs (--json, the serve record)",
    "gpux.artifacts.plan.Planned.parts": "what a cache key covers, digested as JSON and kept in the manifest",
    "gpux.artifacts.store.Manifest.info": "the build step's own document in manifest.json",
    "gpux.artifacts.store.Manifest.key_parts": "what the key covers, as manifest.json keeps it",
    "gpux.model.probe.Real.to_dict": "the probe's memo on disk",
    "gpux.model.tensor.ModelIO.from_dict": "the model I/O memo on disk",
    "gpux.model.tensor.ModelIO.to_dict": "the model I/O memo on disk",
    "gpux.plan.lock.Locked.figures": "the tune lock's figures as gpux.lock.json keeps them",
    "gpux.plan.offer.Cell.to_dict": "one cell of the offer as --json prints it",
    "gpux.providers.row.Recipe.arguments": "an opening function's keyword arguments as serve's record keeps them",
    "gpux.providers.row.Recipe.of": "a recipe as serve's record on disk holds it",
    "gpux.serve.record.Recorded.doc": "serve's record on disk",
    "gpux.serve.record.Recorded.read": "serve's record on disk",
    # YAML
    "gpux.serve.settings.Settings.of": "the `serve:` block's plain values, from gpux.yml or the command line",
    "gpux.config.schema.RayDeploy.ray_actor_options": "gpux.yml's block handed to Ray as it is written",
    "gpux.sources.vision.image_size": "the image preprocess block gpux init writes into gpux.yml",
    "gpux.sources.vision.image_steps": "the image preprocess block gpux init writes into gpux.yml",
    # wire bodies
    "gpux.serve.models.Model.metadata": "the model metadata body's tensors",
    "gpux.serve.models.Model.tensor_metadata": "the model metadata body's tensors",
    "gpux.serve.body.json_reply": "a REST reply body",
    "gpux.serve.model_config.tensor_entries": "the model configuration extension's body",
    "gpux.serve.models.Repository.config": "the model configuration extension's body",
    "gpux.serve.models.Repository.metadata": "the model metadata body",
    "gpux.serve.models.Repository.statistics": "the statistics extension's body",
    "gpux.serve.stats.ModelStats.doc": "the statistics extension's body",
    # the public Python API's user data: any array-like, any answer kind's record
    "gpux.run.session.Session.run": "user data: any array-like numpy accepts",
    "gpux.run.session.Session.predict": "user data in, an answer kind's record out (any kind, plugins' too)",
}

REF = re.compile(r"^(gpux(?:\.\w+)+):(\w+)$")
Bound = dict[str, dict[str, tuple[str, str]]]  # per module: a name it binds -> (module, name) where it is defined


def _trees() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text()) for p in ROOT.rglob("*.py") if GENERATED not in p.parts}


def _names(trees: dict[str, ast.Module]) -> Bound:
    """Per module: each name bound by a `from gpux... import` (at any depth, TYPE_CHECKING ones too) → where it is
    defined (module, name), following a package's re-exports."""
    bound: Bound = defaultdict(dict)
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gpux":
                for alias in node.names:
                    if not is_module(f"{node.module}.{alias.name}"):
                        bound[module][alias.asname or alias.name] = (node.module or "", alias.name)
    for _ in range(3):  # `from gpux.providers import Runner` is gpux.providers.row's Runner
        for table in bound.values():
            for name, (module, attr) in table.items():
                table[name] = bound.get(module, {}).get(attr, (module, attr))
    return bound


def _used(trees: dict[str, ast.Module], bound: Bound) -> dict[tuple[str, str], set[str]]:
    """(module, name) → the rooms that import it by name, reach it as a module's attribute, or name it in a string."""
    used: dict[tuple[str, str], set[str]] = defaultdict(set)
    for module, tree in trees.items():
        for where in bound[module].values():
            used[where].add(room(module))
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gpux":
                modules.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if is_module(f"{node.module}.{a.name}")})
            elif isinstance(node, ast.Import):
                modules.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("gpux.")})
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
                used[modules[node.value.id], node.attr].add(room(module))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (ref := REF.match(node.value)):
                used[ref[1], ref[2]].add("a row")
    return used


def _annotations(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.expr]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
    return [x.annotation for x in params if x.annotation is not None] + ([fn.returns] if fn.returns else [])


def _members(node: ast.stmt) -> list[tuple[str, list[ast.expr]]]:
    """A public function's annotations, or each public member of a public class and its annotations."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return [(node.name, _annotations(node))]
    if not isinstance(node, ast.ClassDef):
        return []
    out = []
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (item.name == "__init__"
                                                                          or not item.name.startswith("_")):
            out.append((f"{node.name}.{item.name}", _annotations(item)))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                and not item.target.id.startswith("_"):
            out.append((f"{node.name}.{item.target.id}", [item.annotation]))
    return out


def _mentions(expr: ast.expr) -> set[str]:
    """The names an annotation mentions (string annotations read too)."""
    names = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            with contextlib.suppress(SyntaxError):  # a string that is not an annotation
                names |= _mentions(ast.parse(node.value, mode="eval").body)
    return names


def untyped_contracts() -> dict[str, str]:
    """Each public signature between rooms that mentions `Any` → the annotations that do."""
    trees = _trees()
    bound = _names(trees)
    used = _used(trees, bound)
    tops = {(m, n.name): n for m, t in trees.items() for n in t.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and not n.name.startswith("_")}
    crossing = {key for key in tops if used.get(key, set()) - {room(key[0])}}
    found: dict[str, str] = {}
    todo = list(crossing)
    while todo:
        module, name = todo.pop()
        for member, annotated in _members(tops[module, name]):
            mentioned = set().union(*map(_mentions, annotated)) if annotated else set()
            for word in mentioned:  # the classes a contract hands over are contracts themselves
                where = bound[module].get(word, (module, word))
                if where in tops and where not in crossing and isinstance(tops[where], ast.ClassDef):
                    crossing.add(where)
                    todo.append(where)
            if "Any" in mentioned:
                found[f"{module}.{member}"] = "; ".join(ast.unparse(a) for a in annotated if "Any" in _mentions(a))
    return found


def test_no_any_between_rooms_but_the_edge_documents() -> None:
    found = untyped_contracts()
    new = {name: why for name, why in found.items() if name not in EDGES}
    assert not new, "public signatures between rooms typed Any (type them, or name the edge document in EDGES):\n" \
        + "\n".join(f"{name}: {why}" for name, why in sorted(new.items()))
    stale = sorted(set(EDGES) - set(found))
    assert not stale, f"typed now, or gone: take them off EDGES in {__file__}: {stale}"
