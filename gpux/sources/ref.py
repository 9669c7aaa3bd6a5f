"""The words of a model source: a hub reference read apart, and the source resolved to the ONNX file gpux
reads (light: no hub client, no torch)."""


from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HUB = "hf://"
# what a checkpoint is exported for (docs/hub.md)
TASKS = ("feature-extraction", "text-classification", "token-classification", "image-classification")
COMMIT = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"hf://(?P<org>[\w.-]+)/(?P<name>[\w.-]+?)(?:@(?P<rev>[^/\s]+))?(?:/(?P<path>\S+))?")


@dataclass(frozen=True)
class HubRef:
    """`hf://ORG/NAME[@REVISION][/PATH]` read apart: the repo id, the revision asked (None: main) and a path in
    the repo ('' for the repo's root)."""

    repo: str
    revision: str | None
    path: str

    @property
    def pinned(self) -> bool:
        """A commit hash never moves; a branch or tag may."""
        return self.revision is not None and COMMIT.fullmatch(self.revision) is not None

    @property
    def is_onnx(self) -> bool:
        return self.path.lower().endswith(".onnx")

    def __str__(self) -> str:
        return HUB + self.repo + (f"@{self.revision}" if self.revision else "") + (f"/{self.path}" if self.path else "")


def is_hub(source: str) -> bool:
    return source.startswith(HUB)


def parse_hub(source: str) -> HubRef | None:
    """The hub reference `source` writes, None where it is not a well-formed `hf://ORG/NAME...`."""
    m = _REF.fullmatch(source.strip())
    if m is None:
        return None
    return HubRef(f"{m['org']}/{m['name']}", m["rev"], (m["path"] or "").strip("/"))


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """A source resolved to the ONNX file gpux reads. `origin`: where it came from (repo, commit, path in the
    repo, task), a part of every artifact's key and manifest; `watch`: the files whose change means the source may
    have moved (the hub cache's `refs/<branch>`), read by the record of an unchanged build; `moves`: a branch or
    tag resolved online, asked again by every build."""

    path: Path
    origin: dict[str, str]
    watch: tuple[Path, ...] = ()
    moves: bool = False
    checkpoint: Path | None = None  # the checkpoint's folder it was exported from (its tokenizer, labels, pooling)


Say = Callable[[str], str]  # a message, located at gpux.yml's model.source


def needs_resolving(source: str, task: str | None) -> bool:
    return is_hub(source) or task is not None
