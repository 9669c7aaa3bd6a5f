"""A transformers checkpoint as the ONNX file gpux reads: exported once per (checkpoint, task) into the store's
`.sources/<key>/` (under a lock, in a temporary folder renamed into place when the export has been verified, so
an interrupted export leaves nothing a later run trusts) and found there afterwards without importing torch."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from gpux.errors import GpuxError
from gpux.files import atomic_write_text, digest_files, locked, store_root
from gpux.sources.hub import Snapshot
from gpux.sources.ref import Resolved, Say

EXPORTER = 1  # bumped when the exported graph changes: every checkpoint is exported again
MAIN = "model.onnx"
RECORD = "source.json"


def local_checkpoint(folder: Path, say: Say) -> Snapshot | Path:
    """A `save_pretrained` folder named by model.source (with model.task)."""
    if not folder.is_dir():
        raise GpuxError(say(f"model.task exports a transformers checkpoint: {folder} is not a folder (a "
                            "save_pretrained folder, or hf://ORG/NAME)"))
    return folder.resolve()


def _origin(checkpoint: Snapshot | Path, task: str, root: Path) -> tuple[Path, dict[str, str]]:
    if isinstance(checkpoint, Snapshot):
        folder = checkpoint.folder / checkpoint.ref.path
        return folder, {**checkpoint.origin, "task": task}
    files = [p for p in sorted(checkpoint.rglob("*")) if p.is_file() and ".gpux" not in p.parts]
    digest = digest_files(files, checkpoint, store_root(root) / ".hashes.json")
    return checkpoint, {"checkpoint": checkpoint.name, "sha256": digest, "task": task}


def exported(checkpoint: Snapshot | Path, task: str | None, root: Path, say: Say) -> Resolved:
    """The checkpoint exported for `task`, from the store if it was exported before."""
    if task is None:
        raise GpuxError(say("a checkpoint needs model.task to be exported"))
    folder, origin = _origin(checkpoint, task, root)
    key = hashlib.sha256(json.dumps({**origin, "exporter": EXPORTER}, sort_keys=True).encode()).hexdigest()[:24]
    out = store_root(root) / ".sources" / key
    watch, moves = (checkpoint.watch, checkpoint.moves) if isinstance(checkpoint, Snapshot) else ((), False)
    found = Resolved(path=out / MAIN, origin=origin, watch=watch, moves=moves, checkpoint=folder)
    if (out / RECORD).is_file():
        return found
    with locked(out.with_name(f"{key}.lock")):
        if not (out / RECORD).is_file():
            _export_into(folder, task, out, origin, say)
    return found


def _export_into(folder: Path, task: str, out: Path, origin: dict[str, str], say: Say) -> None:
    from gpux.sources.checkpoint import read_facts
    from gpux.sources.torch_onnx import export_checkpoint

    facts = read_facts(folder, say, task)
    tmp_root = out.parent.parent / ".tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=tmp_root, prefix=f"source.pid{os.getpid()}."))
    try:
        checked = export_checkpoint(facts, task, work / MAIN, say)
        atomic_write_text(work / RECORD, json.dumps({"origin": origin, "exporter": EXPORTER, **checked}, indent=2))
        if out.exists():
            shutil.rmtree(out)
        os.replace(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def record_of(resolved: Resolved) -> dict[str, object]:
    """What the export recorded beside the file (its check against PyTorch); {} for a file taken as it is."""
    path = resolved.path.parent / RECORD
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
