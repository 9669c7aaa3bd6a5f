"""Turns YAML and validation failures of a gpux.yml into one-line problems located at file:line:col."""

from __future__ import annotations

import datetime
import re
import types
import typing
from typing import Annotated, Any

import yaml
from pydantic import BaseModel

from gpux.config.schema import (
    DTYPE_ALIASES,
    NAME_RE,
    PROVIDERS,
    SCHEMA_VERSIONS,
    GpuxConfig,
    Loc,
    Project,
    Providers,
    _got,
    did_you_mean,
)
from gpux.errors import Problem
from gpux.providers import options as opts


def parse_yaml(text: str, file: str) -> tuple[Any, dict[Loc, tuple[int, int]], list[Problem]]:
    """Safe-load YAML and map each key path to (line, col) of its key, and `(*path, '=')` to its value.

    Duplicate keys are problems (the data keeps the last one, so validation still runs). A `version:`
    that YAML reads as a number or date keeps its source text (1.10 stays "1.10").
    """
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        return None, {}, [_yaml_problem(exc, file)]
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        return None, {}, [Problem(file, line, col, "", f"YAML: character U+{exc.character:04X} is not allowed "
                                                       "in a YAML file; remove it")]
    except yaml.YAMLError as exc:
        return None, {}, [Problem(file, 0, 0, "", f"YAML syntax: {' '.join(str(exc).split())}")]
    except RecursionError:
        return None, {}, [Problem(file, 0, 0, "", "YAML syntax: nested too deeply")]
    finally:
        if loader is not None:
            loader.dispose()
    marks: dict[Loc, tuple[int, int]] = {}
    raw: dict[Loc, str] = {}
    problems: list[Problem] = []
    seen: set[int] = set()

    def at(n: yaml.Node) -> tuple[int, int]:
        return n.start_mark.line + 1, n.start_mark.column + 1

    def walk(n: yaml.Node, loc: Loc) -> None:
        if id(n) in seen:  # an alias: located at its key; walked once, where its anchor is (no blow-up)
            return
        seen.add(id(n))
        marks.setdefault((*loc, "="), at(n))
        if isinstance(n, yaml.ScalarNode):
            raw[loc] = n.value
        elif isinstance(n, yaml.MappingNode):
            first: dict[str, tuple[int, int]] = {}
            for k, v in n.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                key = str(k.value) if isinstance(k, yaml.ScalarNode) else f"<{k.id}>"
                if key in first:
                    problems.append(Problem(file, *at(k), ".".join((*loc, key)),
                                            f"duplicate key (first at line {first[key][0]}); remove one"))
                first.setdefault(key, at(k))
                marks[(*loc, key)] = at(k)
                walk(v, (*loc, key))
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                marks.setdefault((*loc, str(i)), at(v))
                walk(v, (*loc, str(i)))

    if node is not None:
        walk(node, ())
        marks[()] = at(node)
    if isinstance(data, dict):
        for mapping, loc in ((data, ("version",)), (data.get("model"), ("model", "version"))):
            value = mapping.get("version") if isinstance(mapping, dict) else None
            if isinstance(value, int | float | datetime.date) and not isinstance(value, bool):
                mapping["version"] = raw.get(loc, value)  # type: ignore[index]  # as written: 1.10 stays "1.10"
    return data, marks, problems


def _yaml_problem(exc: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
    problem = str(exc.problem or "")
    tag = re.search(r"tag '([^']*)'", problem)
    if tag and "constructor" in problem:
        name = tag.group(1).replace("tag:yaml.org,2002:", "!!")
        return Problem(file, line, col, "", f"YAML: tag {name} is not allowed (gpux.yml is loaded safely: "
                                            "plain mappings, lists, strings and numbers only)")
    if "'\\t'" in problem:
        return Problem(file, line, col, "", "YAML syntax: tab character; indent with spaces")
    char = re.search(r"found character (.*) that cannot start any token", problem)
    if char:
        return Problem(file, line, col, "", f"YAML syntax: {char.group(1)} cannot start a plain value; quote the "
                                            "value")
    msg = _YAML_WORDS.get(problem, problem)
    for token, words in _YAML_TOKENS.items():
        msg = msg.replace(token, words)
    context = str(exc.context or "")
    if "single document" in context:
        return Problem(file, line, col, "", "YAML syntax: a second document ('---'); a gpux.yml holds one")
    if context.startswith("while ") and exc.context_mark:
        msg += f" ({context.removeprefix('while ')} started at line {exc.context_mark.line + 1})"
    elif context:
        msg = f"{context}: {msg}"
    if "mapping values are not allowed" in problem:
        msg += "; check the indentation, or quote a value that contains ': '"
    return Problem(file, line, col, "", f"YAML syntax: {msg}")


_YAML_WORDS = {
    "expected <block end>, but found '<block mapping start>'": "this key is indented unlike the keys above it",
    "expected <block end>, but found '-'": "a list item where a key was expected; check the indentation",
    "expected <block end>, but found '<scalar>'": "a value where a key was expected; check the indentation",
}
_YAML_TOKENS = {"'<stream end>'": "the end of the file", "<block end>": "the end of the block",
                "'<scalar>'": "a value", "'<block mapping start>'": "a key", "'<document start>'": "'---'"}


def relocate(loc: Loc, aliases: dict[Loc, Loc]) -> Loc:
    """The path a v1 field `loc` has in the file as written (earlier-format files move some fields)."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in aliases:
            return aliases[loc[:n]] + loc[n:]
    return loc


def locate(marks: dict[Loc, tuple[int, int]], loc: Loc, key: bool = False) -> tuple[int, int]:
    """Line and column of the value (or the key) at `loc`, else of its nearest written ancestor's key."""
    if not key and (*loc, "=") in marks:
        return marks[(*loc, "=")]
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return marks.get((), (1, 1))


def _unwrap(tp: Any) -> list[Any]:
    """The member types of an annotation, without Annotated, Optional and unions."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) if a is not type(None) for m in _unwrap(a)]
    return [tp]


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc` (for did-you-mean and descriptions)."""
    current: list[Any] = [GpuxConfig]
    for part in loc:
        nxt: list[Any] = []
        for tp in current:
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                info = tp.model_fields.get(part)
                nxt += _unwrap(info.annotation) if info else []
            elif typing.get_origin(tp) is dict:
                nxt += _unwrap(typing.get_args(tp)[1])
            elif typing.get_origin(tp) in (list, tuple):
                nxt += _unwrap(typing.get_args(tp)[0])
        current = nxt
    models = [tp for tp in current if isinstance(tp, type) and issubclass(tp, BaseModel)]
    return models[0] if models else None


def _field_info(loc: Loc) -> Any:
    model = _model_at(loc[:-1]) if loc else None
    return model.model_fields.get(loc[-1]) if model else None



def _split_loc(raw: tuple[Any, ...], data: Any, kind: str) -> tuple[Loc, int | None, bool]:
    """Pydantic's loc → (path in the data, index where a union member's tag was dropped, is a dict-key error).

    A part is a real key when the data has it; other parts are pydantic's names for union members
    ('list[str]', 'constrained-int', "literal['auto']", '[key]'), except the field a 'missing' error names.
    """
    out: list[str] = []
    tag_at: int | None = None
    key_error = False
    cur = data
    for i, part in enumerate(raw):
        if isinstance(cur, dict) and (part in cur or str(part) in map(str, cur)):
            cur = cur[part] if part in cur else next(v for k, v in cur.items() if str(k) == str(part))
            out.append(str(part))
        elif isinstance(cur, list | tuple) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
            out.append(str(part))
        elif kind in ("missing", "extra_forbidden") and i == len(raw) - 1:
            out.append(str(part))
        else:
            key_error = key_error or part == "[key]"
            tag_at = len(out) if tag_at is None else tag_at
            cur = None if part == "[key]" else cur
    return tuple(out), (None if key_error else tag_at), key_error


_PATTERNS = {
    NAME_RE: "use letters, digits, '.', '_' or '-', starting with a letter or digit",
    opts.DIM_NAME: "expected a dimension name: letters, digits and '_', not starting with a digit",
    opts.LAYOUT: "expected layout letters N, C, D, H, W, T or ? (e.g. NCHW)",
    opts.OPENVINO_DEVICE: "expected an OpenVINO device: CPU, GPU, GPU.0, NPU, AUTO, or a priority list such as "
                          "AUTO:GPU,CPU (also HETERO:... and MULTI:...)",
}


def _sentence(text: str) -> str:
    """A description as the tail of a message: no final period, lower-case first letter unless an acronym."""
    text = text.rstrip(".")
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


_ALTERNATIVES = {
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "string_type": "a string",
    "bool_parsing": "true or false", "bool_type": "true or false", "list_type": "a list", "tuple_type": "a list",
    "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
}
_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def _message(loc: Loc, err: dict[str, Any]) -> tuple[str, bool]:
    """One error as (message, point at the key rather than the value)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    got = _got(value)
    if kind == "gpux":
        return ctx["message"], False
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        names = list(model.model_fields) if model else []
        hint = did_you_mean(loc[-1], names)
        if model is Providers:
            return f"unknown provider{hint}; expected one of {', '.join(PROVIDERS)}", True
        listing = f"; expected one of {', '.join(names)}" if names and not hint and len(names) <= 16 else ""
        return f"unknown field{hint}{listing}", True
    if kind == "missing":
        info = _field_info(loc)
        about = f": {_sentence(info.description)}" if info and info.description else ""
        return f"required field is missing{about}", True
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        choices = re.findall(r"'([^']*)'", expected) or [expected]
        if loc == ("schema_version",):
            known = ", ".join(map(str, SCHEMA_VERSIONS))
            if str(value) in map(str, SCHEMA_VERSIONS):
                return f"write schema_version: {value} (a number, not a string)", False
            return f"this gpux reads schema_version {known}, got {got}; a newer gpux may read this file", False
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        if not hint and isinstance(value, str) and value.lower() in DTYPE_ALIASES and "float32" in choices:
            hint = f" (did you mean '{DTYPE_ALIASES[value.lower()]}'?)"
        return f"unknown {loc[-1] if loc else 'value'} {got}{hint}; expected one of {', '.join(choices)}", False
    if kind in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, "), False
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        info = _field_info(loc)
        if pattern in _PATTERNS:
            return f"{_PATTERNS[pattern]}, got {got}", False
        what = _sentence(info.description) if info and info.description else f"a match of {pattern}"
        return f"{got} is not valid ({what})", False
    if kind in _BOUNDS:
        op, name = _BOUNDS[kind]
        return f"must be {op} {ctx.get(name)}, got {got}", False
    if kind in ("byte_size", "byte_size_unit"):
        return f"expected a size such as 4GB, 512MiB or a number of bytes, got {got}", False
    if kind == "invalid_key":
        return f"expected a field name, got {got}", True
    if kind == "string_too_short":
        return "must not be empty", False
    if kind == "int_from_float":
        return f"expected a whole number, got {got}", False
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        examples: dict[Loc, str] = {("model",): " such as {source: model.onnx}",
                                    ("inputs",): " of name -> {dtype, shape}",
                                    ("outputs",): " of name -> {dtype, shape}"}
        example = examples.get(loc, "")
        if len(loc) == 2 and loc[0] in ("inputs", "outputs"):
            example = " such as {dtype: float32, shape: [batch, 3]}"
        return f"expected a mapping{example}, got {got}", False
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"expected a string, got {got}; quote it: '{value}'", False
    if kind in _ALTERNATIVES:
        return f"expected {_ALTERNATIVES[kind]}, got {got}", False
    msg = err["msg"]
    return f"{msg[0].lower()}{msg[1:]}, got {got}", False


def _refine(loc: Loc, err: dict[str, Any], data: Any) -> Loc:
    """Point a model-level error at what it is about: the bad list item, or the first option it names."""
    if err["type"] == "gpux":
        return (*loc, *err["ctx"].get("at", ()))
    model = _model_at(loc)
    if err["type"] == "value_error" and model:
        for word in re.findall(r"[a-z][a-z_0-9]*", err["msg"].removeprefix("Value error, ")):
            if word in model.model_fields and len(_written((*loc, word), data)) > len(loc):
                return (*loc, word)
    return loc


def _written(loc: Loc, data: Any) -> Loc:
    """The longest prefix of `loc` that the data has (a refined location may name a field left out)."""
    cur, out = data, []
    for part in loc:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            break
        out.append(part)
    return tuple(out)


def describe_errors(project: Project, errors: list[Any], data: Any) -> list[Problem]:
    """Pydantic errors → one Problem per mistake, located at the key or value written in the file."""
    found: list[tuple[Loc, str, bool, dict[str, Any]]] = []
    unions: dict[Loc, list[tuple[Loc, dict[str, Any]]]] = {}
    for err in errors:
        loc, tag_at, key_error = _split_loc(err["loc"], data, err["type"])
        if tag_at is not None:
            unions.setdefault(loc[:tag_at], []).append((loc, err))
            continue
        msg, key = _message(loc, err)
        found.append((loc, msg, key or key_error, err))  # a bad mapping key: point at the key
    for prefix, members in unions.items():
        deeper = [(loc, err) for loc, err in members if len(loc) > len(prefix)]
        if deeper:  # the value had one member's type; report that member's own errors
            found += [(loc, *_message(loc, err), err) for loc, err in deeper]
            continue
        wanted: list[str] = []
        for _, err in members:
            kind, ctx = err["type"], err.get("ctx") or {}
            if kind == "literal_error":
                wanted.append(ctx.get("expected", "").replace(" or ", ", "))
            elif kind in _BOUNDS:
                wanted.append(f"a value {_BOUNDS[kind][0]} {ctx.get(_BOUNDS[kind][1])}")
            else:
                wanted.append(_ALTERNATIVES.get(kind, err["msg"].lower()))
        found.append((prefix, f"expected {' or '.join(dict.fromkeys(wanted))}, got {_got(members[0][1].get('input'))}",
                      False, members[0][1]))
    # 'naem: unknown field (did you mean name?)' already says that name is missing
    suggested = {(*loc[:-1], m.group(1)) for loc, msg, _, err in found if err["type"] == "extra_forbidden"
                 for m in [re.search(r"did you mean '([^']*)'", msg)] if m}
    out = []
    for loc, msg, key, err in found:
        if err["type"] == "missing" and loc in suggested:
            continue
        shown = where = loc
        if err["type"] in ("gpux", "value_error"):
            refined = _written(_refine(loc, err, data), data)
            where = refined if len(refined) > len(loc) else loc
            shown = where if err["type"] == "gpux" else loc
        problem = project.problem(shown, msg, key)
        if where != shown:  # a block's rule, at the option it names
            line, col = locate(project.marks, relocate(where, project.aliases), key=True)
            problem = Problem(problem.file, line, col, problem.field, problem.message)
        out.append(problem)
    return out
