"""Reads YAML text into plain data plus the marks of where each key and value is written (file:line:col).

`Written` turns a field's path into a Problem located as the file writes it, earlier-format moves included."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpux.errors import Problem

Loc = tuple[str, ...]
Marks = dict[Loc, tuple[int, int]]


def parse_yaml(text: str, file: str) -> tuple[Any, Marks, list[Problem]]:
    """Safe-load YAML and map each key path to (line, col) of its key, and `(*path, '=')` to its value.

    Duplicate keys are problems (the data keeps the last one, so validation still runs). A `version:`
    that YAML reads as a number or date keeps its source text (1.10 stays "1.10").
    """
    loaded = _load(text, file)
    if isinstance(loaded, Problem):
        return None, {}, [loaded]
    node, data = loaded
    marks, raw, problems = _marks(node, file)
    if isinstance(data, dict):
        for mapping, loc in ((data, ("version",)), (data.get("model"), ("model", "version"))):
            value = mapping.get("version") if isinstance(mapping, dict) else None
            if isinstance(value, int | float | datetime.date) and not isinstance(value, bool):
                mapping["version"] = raw.get(loc, value)  # type: ignore[index]  # as written: 1.10 stays "1.10"
    return data, marks, problems


def _load(text: str, file: str) -> tuple[yaml.Node | None, Any] | Problem:
    """The document's node tree and data, or the one problem that stops YAML from reading it."""
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    except yaml.MarkedYAMLError as exc:
        return _yaml_problem(exc, file)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - text.rfind("\n", 0, exc.position)
        return Problem(file, line, col, "", f"YAML: character U+{exc.character:04X} is not allowed in a YAML "
                                             "file; remove it")
    except yaml.YAMLError as exc:
        return Problem(file, 0, 0, "", f"YAML syntax: {' '.join(str(exc).split())}")
    except RecursionError:
        return Problem(file, 0, 0, "", "YAML syntax: nested too deeply")
    finally:
        if loader is not None:
            loader.dispose()


def _marks(node: yaml.Node | None, file: str) -> tuple[Marks, dict[Loc, str], list[Problem]]:
    """Where each key and value is, each scalar's source text, and duplicate keys."""
    marks: Marks = {}
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
    return marks, raw, problems


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


def locate(marks: Marks, loc: Loc, key: bool = False) -> tuple[int, int]:
    """Line and column of the value (or the key) at `loc`, else of its nearest written ancestor's key."""
    if not key and (*loc, "=") in marks:
        return marks[(*loc, "=")]
    for n in range(len(loc), -1, -1):
        if loc[:n] in marks:
            return marks[loc[:n]]
    return marks.get((), (1, 1))


@dataclass(frozen=True)
class Written:
    """Where one file writes each field: its marks, and the v1 paths an earlier-format file writes elsewhere."""

    path: Path
    marks: Marks = field(default_factory=dict)
    aliases: dict[Loc, Loc] = field(default_factory=dict)

    def problem(self, loc: tuple[str, ...], message: str, key: bool = False, as_written: bool = False) -> Problem:
        """A Problem at the v1 field `loc` (or at `loc` as the file writes it), named and located as written."""
        loc = tuple(str(p) for p in loc)
        loc = loc if as_written else relocate(loc, self.aliases)
        line, col = locate(self.marks, loc, key)
        return Problem(str(self.path), line, col, ".".join(loc), message)
