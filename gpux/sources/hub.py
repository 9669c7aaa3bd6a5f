"""Hub ids resolved through huggingface_hub, with its cache and its own settings: `HF_HUB_CACHE` / `HF_HOME`
(where the cache lies), `HF_HUB_OFFLINE` (the cache only) and `HF_TOKEN` (read by huggingface_hub itself: gpux
never reads, prints or records it). The snapshot folder's name is the commit a revision resolved to."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpux.errors import GpuxError, first_line
from gpux.sources.ref import TASKS, HubRef, Resolved, Say, parse_hub

ONNX_COMPANIONS = ("{path}", "{path}_data", "{path}.data", "{path}_data_*")  # external data beside the .onnx file
CHECKPOINT_FILES = ("*.json", "*.safetensors", "*.txt", "*.model")  # config, weights, tokenizer, pooling
TRUE = ("1", "ON", "YES", "TRUE")


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """A repo's files at one commit, as the local cache holds them."""

    folder: Path  # snapshots/<commit>
    ref: HubRef
    watch: tuple[Path, ...]  # refs/<revision>: where the cache says which commit a branch or tag is
    moves: bool  # a branch or tag, resolved online: asked again by each build

    @property
    def commit(self) -> str:
        return self.folder.name

    @property
    def origin(self) -> dict[str, str]:
        return {"repo": self.ref.repo, "revision": self.commit, **({"path": self.ref.path} if self.ref.path else {})}


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in TRUE


def cache_dir() -> str | None:
    """The cache huggingface_hub reads, by its settings at this call (None: its default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    return os.path.join(os.environ["HF_HOME"], "hub") if os.environ.get("HF_HOME") else None


def checked_ref(source: str, task: str | None, say: Say) -> HubRef:
    ref = parse_hub(source)
    if ref is None:
        raise GpuxError(say(f"{source!r} is not a hub id; write hf://ORG/NAME[@REVISION][/PATH/IN/REPO]"))
    if not ref.is_onnx and task is None:
        raise GpuxError(say(f"{ref} names a checkpoint, not an .onnx file"),
                        hint=f"add model.task ({' | '.join(TASKS)}) to export it, or name the file: "
                        f"hf://{ref.repo}/onnx/model.onnx")
    return ref


def snapshot(ref: HubRef, say: Say, allow: list[str]) -> Snapshot:
    """The files of `ref` that `allow` matches, downloaded into the cache unless HF_HUB_OFFLINE is set."""
    from gpux.optional import require

    hub = require("huggingface_hub", "hf")
    try:
        folder = hub.snapshot_download(ref.repo, revision=ref.revision, cache_dir=cache_dir(),
                                       local_files_only=offline(), allow_patterns=allow)
    except Exception as exc:  # huggingface_hub's own errors (and its HTTP client's): each said in one line
        raise GpuxError(say(_why(ref, exc)), hint=_fix(ref, exc)) from exc
    folder_path = Path(folder)
    refs = folder_path.parent.parent / "refs" / (ref.revision or "main")
    return Snapshot(folder=folder_path, ref=ref, watch=() if ref.pinned else (refs,),
                    moves=not ref.pinned and not offline())


def _why(ref: HubRef, exc: Exception) -> str:
    kind = type(exc).__name__
    where = cache_dir() or "the default cache"
    if offline() and kind in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "EntryNotFoundError"):
        return f"{ref} is not in the local hub cache ({where}) and HF_HUB_OFFLINE=1 forbids downloading it"
    if kind == "GatedRepoError":
        return f"{ref}: the repo is gated; the token in HF_TOKEN (or `hf auth login`) has no access to it"
    if kind == "RepositoryNotFoundError":
        return f"{ref}: no such repo on the hub (or it is private and HF_TOKEN holds no token that sees it)"
    if kind == "RevisionNotFoundError":
        return f"{ref}: the repo has no revision {ref.revision!r}"
    if kind == "LocalEntryNotFoundError":
        return f"{ref}: the hub cannot be reached and the local cache ({where}) does not hold it"
    return f"{ref}: {first_line(exc)}"


def _fix(ref: HubRef, exc: Exception) -> str | None:
    if offline() and type(exc).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "EntryNotFoundError"):
        return f"unset HF_HUB_OFFLINE once to fetch it (or `hf download {ref.repo}`), or point HF_HUB_CACHE at a " \
            "cache that holds it"
    return None


def onnx_file(ref: HubRef, say: Say) -> Resolved:
    """An .onnx in the repo and its external data, as the cache holds them at the resolved commit."""
    snap = snapshot(ref, say, [p.format(path=ref.path) for p in ONNX_COMPANIONS])
    path = snap.folder / ref.path
    if not path.is_file():
        held = "the local hub cache does not hold it (HF_HUB_OFFLINE=1)" if offline() else "no such file"
        raise GpuxError(say(f"{ref}: {held} at commit {snap.commit}"))
    return Resolved(path=path, origin=snap.origin, watch=snap.watch, moves=snap.moves)


def checkpoint(ref: HubRef, say: Say) -> Snapshot:
    """A transformers checkpoint's files (config, weights, tokenizer, sentence-transformers modules)."""
    prefix = f"{ref.path}/" if ref.path else ""
    return snapshot(ref, say, [prefix + p for p in CHECKPOINT_FILES])

