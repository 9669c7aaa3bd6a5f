"""Turns validation failures of a gpux.yml into one-line problems, in words a YAML user recognises.

It walks the pydantic model it is handed (for did-you-mean and field descriptions) and never imports the schema;
`got` and `did_you_mean` are the words every message of gpux uses for a bad value.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from gpux.config.parse import Loc, Written, locate, relocate
from gpux.errors import Problem
from gpux.providers import options as opts

NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # a model's (or a workspace's) name
# names other tools use for a dtype -> the gpux name (for did-you-mean only; they are not accepted)
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16",
                 "fp64": "float64", "int": "int64", "long": "int64", "str": "string"}


def did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    """' (did you mean 'x'?)' for the closest choice (case-insensitive), or ''."""
    if not isinstance(word, str) or not choices:
        return ""
    lowered = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean '{lowered[close[0]]}'?)" if close else ""


def show_value(value: Any) -> str:
    """A value as a YAML user would recognise it, for 'got ...'."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        if len(value) > 8 or any(isinstance(v, dict | list | tuple) for v in value):
            return "a list"
        text = "[" + ", ".join(show_value(v) for v in value) + "]"
        return text if len(text) <= 40 else "a list"
    return repr(value)


def _unwrap(tp: Any) -> list[Any]:
    """The member types of an annotation, without Annotated, Optional and unions."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) if a is not type(None) for m in _unwrap(a)]
    return [tp]


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The pydantic model class that validates the mapping at `loc` under `root` (for did-you-mean and
    descriptions)."""
    current: list[Any] = [root]
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


def _field_info(root: type[BaseModel], loc: Loc) -> Any:
    model = _model_at(root, loc[:-1]) if loc else None
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


# blocks whose keys name things of one kind ('unknown provider')
_KEYED_BY: dict[Loc, str] = {("providers",): "provider"}
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


_FIXED = {  # error kinds whose message is one template: (message, point at the key rather than the value)
    "byte_size": ("expected a size such as 4GB, 512MiB or a number of bytes, got {got}", False),
    "byte_size_unit": ("expected a size such as 4GB, 512MiB or a number of bytes, got {got}", False),
    "invalid_key": ("expected a field name, got {got}", True),
    "string_too_short": ("must not be empty", False),
    "int_from_float": ("expected a whole number, got {got}", False),
}
_MAPPING_EXAMPLES: dict[Loc, str] = {("model",): " such as {source: model.onnx}",
                                     ("inputs",): " of name -> {dtype, shape}",
                                     ("outputs",): " of name -> {dtype, shape}"}


def _missing(root: type[BaseModel], loc: Loc, err: ErrorDetails) -> str:
    info = _field_info(root, loc)
    return "required field is missing" + (f": {_sentence(info.description)}" if info and info.description else "")


def _pattern(root: type[BaseModel], loc: Loc, err: ErrorDetails) -> str:
    pattern, got = (err.get("ctx") or {}).get("pattern", ""), show_value(err.get("input"))
    if pattern in _PATTERNS:
        return f"{_PATTERNS[pattern]}, got {got}"
    info = _field_info(root, loc)
    what = _sentence(info.description) if info and info.description else f"a match of {pattern}"
    return f"{got} is not valid ({what})"


def _mapping(root: type[BaseModel], loc: Loc, err: ErrorDetails) -> str:
    example = _MAPPING_EXAMPLES.get(loc, "")
    if len(loc) == 2 and loc[0] in ("inputs", "outputs"):
        example = " such as {dtype: float32, shape: [batch, 3]}"
    return f"expected a mapping{example}, got {show_value(err.get('input'))}"


_SAID: dict[str, tuple[Callable[[type[BaseModel], Loc, ErrorDetails], str], bool]] = {  # kind -> (say, at key)
    "gpux": (lambda _r, _l, err: str(err["ctx"]["message"]), False),
    "extra_forbidden": (lambda root, loc, _e: _unknown_field(root, loc), True),
    "missing": (_missing, True),
    "literal_error": (lambda root, loc, err: _not_a_choice(root, loc, err.get("input"),
                                                           (err.get("ctx") or {}).get("expected", "")), False),
    "value_error": (lambda _r, _l, err: err["msg"].removeprefix("Value error, "), False),
    "assertion_error": (lambda _r, _l, err: err["msg"].removeprefix("Assertion failed, "), False),
    "string_pattern_mismatch": (_pattern, False),
    "dict_type": (_mapping, False),
    "model_type": (_mapping, False),
    "model_attributes_type": (_mapping, False),
}


def _message(root: type[BaseModel], loc: Loc, err: ErrorDetails) -> tuple[str, bool]:
    """One error as (message, point at the key rather than the value)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    got = show_value(value)
    if kind in _SAID:
        say, at_key = _SAID[kind]
        return say(root, loc, err), at_key
    if kind in _FIXED:
        text, at_key = _FIXED[kind]
        return text.format(got=got), at_key
    if kind in _BOUNDS:
        op, name = _BOUNDS[kind]
        return f"must be {op} {ctx.get(name)}, got {got}", False
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        return f"expected a string, got {got}; quote it: '{value}'", False
    if kind in _ALTERNATIVES:
        return f"expected {_ALTERNATIVES[kind]}, got {got}", False
    msg = err["msg"]
    return f"{msg[0].lower()}{msg[1:]}, got {got}", False


def _unknown_field(root: type[BaseModel], loc: Loc) -> str:
    model = _model_at(root, loc[:-1])
    names = list(model.model_fields) if model else []
    hint = did_you_mean(loc[-1], names)
    if loc[:-1] in _KEYED_BY:
        return f"unknown {_KEYED_BY[loc[:-1]]}{hint}; expected one of {', '.join(names)}"
    listing = f"; expected one of {', '.join(names)}" if names and not hint and len(names) <= 16 else ""
    return f"unknown field{hint}{listing}"


def _not_a_choice(root: type[BaseModel], loc: Loc, value: Any, expected: str) -> str:
    got = show_value(value)
    choices = re.findall(r"'([^']*)'", expected) or [expected]
    if loc == ("schema_version",):
        versions = typing.get_args(_field_info(root, loc).annotation)  # Literal[1]: the formats read
        known = ", ".join(map(str, versions))
        if str(value) in map(str, versions):
            return f"write schema_version: {value} (a number, not a string)"
        return f"this gpux reads schema_version {known}, got {got}; a newer gpux may read this file"
    hint = did_you_mean(value, choices) if isinstance(value, str) else ""
    if not hint and isinstance(value, str) and value.lower() in DTYPE_ALIASES and "float32" in choices:
        hint = f" (did you mean '{DTYPE_ALIASES[value.lower()]}'?)"
    return f"unknown {loc[-1] if loc else 'value'} {got}{hint}; expected one of {', '.join(choices)}"


def _refine(root: type[BaseModel], loc: Loc, err: ErrorDetails, data: Any) -> Loc:
    """Point a model-level error at what it is about: the bad list item, or the first option it names."""
    if err["type"] == "gpux":
        return (*loc, *err["ctx"].get("at", ()))
    model = _model_at(root, loc)
    if err["type"] == "value_error" and model:
        for word in re.findall(r"[a-z][a-z_0-9]*", err["msg"].removeprefix("Value error, ")):
            if word in model.model_fields and len(_given((*loc, word), data)) > len(loc):
                return (*loc, word)
    return loc


def _given(loc: Loc, data: Any) -> Loc:
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


def describe_errors(written: Written, root: type[BaseModel], errors: list[ErrorDetails], data: Any) -> list[Problem]:
    """Pydantic errors of validating `data` with the model `root` → one Problem per mistake, located at the key
    or value written in the file."""
    found: list[tuple[Loc, str, bool, ErrorDetails]] = []
    unions: dict[Loc, list[tuple[Loc, ErrorDetails]]] = {}
    for err in errors:
        loc, tag_at, key_error = _split_loc(err["loc"], data, err["type"])
        if tag_at is not None:
            unions.setdefault(loc[:tag_at], []).append((loc, err))
            continue
        msg, key = _message(root, loc, err)
        found.append((loc, msg, key or key_error, err))  # a bad mapping key: point at the key
    for prefix, members in unions.items():
        found += _union_problems(root, prefix, members)
    # 'naem: unknown field (did you mean name?)' already says that name is missing
    suggested = {(*loc[:-1], m.group(1)) for loc, msg, _, err in found if err["type"] == "extra_forbidden"
                 for m in [re.search(r"did you mean '([^']*)'", msg)] if m}
    out = []
    for loc, msg, key, err in found:
        if err["type"] == "missing" and loc in suggested:
            continue
        shown = where = loc
        if err["type"] in ("gpux", "value_error"):
            refined = _given(_refine(root, loc, err, data), data)
            where = refined if len(refined) > len(loc) else loc
            shown = where if err["type"] == "gpux" else loc
        problem = written.problem(shown, msg, key)
        if where != shown:  # a block's rule, at the option it names
            line, col = locate(written.marks, relocate(where, written.aliases), key=True)
            problem = Problem(problem.file, line, col, problem.field, problem.message)
        out.append(problem)
    return out


def _union_problems(root: type[BaseModel], prefix: Loc, members: list[tuple[Loc, ErrorDetails]]) \
        -> list[tuple[Loc, str, bool, ErrorDetails]]:
    """One value no member of a union took: the errors of the member whose type it had (deeper in it, or that
    member's own rule it broke), else one line of what the members want."""
    deeper = [(loc, err) for loc, err in members if len(loc) > len(prefix)]
    ruled = [(loc, err) for loc, err in members if err["type"] in ("value_error", "gpux")]
    if deeper or ruled:  # the value had one member's type: that member's own errors (min <= opt <= max)
        return [(loc, *_message(root, loc, err), err) for loc, err in deeper or ruled]
    wanted: list[str] = []
    for _, err in members:
        kind, ctx = err["type"], err.get("ctx") or {}
        if kind == "literal_error":
            wanted.append(ctx.get("expected", "").replace(" or ", ", "))
        elif kind in _BOUNDS:
            wanted.append(f"a value {_BOUNDS[kind][0]} {ctx.get(_BOUNDS[kind][1])}")
        else:
            wanted.append(_ALTERNATIVES.get(kind, err["msg"].lower()))
    first = members[0][1]
    return [(prefix, f"expected {' or '.join(dict.fromkeys(wanted))}, got {show_value(first.get('input'))}", False,
             first)]
