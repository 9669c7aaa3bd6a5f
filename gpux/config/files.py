"""The files a gpux.yml names, one table: where each is named, whether it exists, and how a list file (labels, a
ctc charset) is split into entries. `Project.named_files`, `Project.read_lines` and `Project.labels_of` are their
one reader (a file that cannot be read is a ConfigError at the field that names it).

`named` walks a gpux.yml's raw mapping (to report missing files beside validation problems) or a loaded
Project's config alike, so `gpux validate`, the build's cache key (`artifacts.plan.reads`) and `gpux package`'s
build context (`deploy.package.project_files`) agree on what a project names."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpux.config.parse import Loc


@dataclass(frozen=True)
class Field:
    """Where a gpux.yml names a file (`*`: any key at that level) and what may stand there."""

    at: tuple[str, ...]
    missing: str = "file not found: {path}"  # the problem where it does not exist
    folder: bool = False  # a folder of samples is allowed
    module: bool = False  # a python step's `module:function`: the module's file under gpux.yml's folder, if there


FIELDS = (  # every field of gpux.yml that names a file, relative to gpux.yml
    Field(("model", "source")),
    Field(("inputs", "*", "labels"), "labels file not found: {path}"),
    Field(("outputs", "*", "labels"), "labels file not found: {path}"),
    Field(("outputs", "*", "postprocess", "ctc", "charset")),
    Field(("outputs", "*", "postprocess", "segmentation", "labels"), "labels file not found: {path}"),
    Field(("inputs", "*", "preprocess", "text", "tokenizer")),
    Field(("inputs", "*", "preprocess", "python"), module=True),  # may be an installed module: never missing
    Field(("outputs", "*", "postprocess", "python"), module=True),
    Field(("verify", "data"), folder=True),
    Field(("providers", "*", "calibration"), folder=True),
)


@dataclass(frozen=True)
class Named:
    """One file a gpux.yml names: the field's location, the path as written and, for a python step, the module's
    file (or package folder) that path means."""

    at: Loc
    path: str
    field: Field

    def candidates(self, root: Path) -> list[Path]:
        """The paths this name may mean under `root` (a python step's module: `a/b.py` or the package `a/b/`)."""
        if not self.field.module:
            return [root / self.path]
        module = self.path.split(":", 1)[0].replace(".", "/")
        return [root / f"{module}.py", root / module]

    def found(self, root: Path) -> Path | None:
        """The file (or, where allowed, folder) this name means under `root`, None where it is missing."""
        for p in self.candidates(root):
            if p.is_file() or (p.is_dir() and (self.field.folder or self.field.module)):
                return p
        return None


def _child(node: Any, key: str) -> Any:
    if isinstance(node, Mapping):
        return node.get(key)
    return getattr(node, key, None) if hasattr(type(node), "model_fields") else None


def _items(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        yield from ((str(k), v) for k, v in node.items())
    elif hasattr(type(node), "model_fields"):
        yield from ((k, getattr(node, k)) for k in type(node).model_fields)


def _walk(node: Any, at: tuple[str, ...], path: Loc) -> Iterator[tuple[Loc, Any]]:
    if not at:
        yield path, node
        return
    head, rest = at[0], at[1:]
    pairs = _items(node) if head == "*" else [(head, _child(node, head))]
    for key, child in pairs:
        if child is not None:
            yield from _walk(child, rest, (*path, key))


def named(config: Any) -> list[Named]:
    """Every file a gpux.yml names (`config`: its raw mapping or the loaded GpuxConfig), in the table's order."""
    return [Named(loc, value, f) for f in FIELDS for loc, value in _walk(config, f.at, ()) if isinstance(value, str)]


def lines(text: str, *, exact: bool = False) -> list[str]:
    """A list file's entries (a BOM already dropped). Labels: stripped, blank lines dropped; `exact` (a charset: a
    space is a class): each line as it is."""
    if exact:
        return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []
    return [line.strip() for line in text.splitlines() if line.strip()]


__all__ = ["FIELDS", "Field", "Named", "lines", "named"]
