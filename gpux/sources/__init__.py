"""Where a model comes from, before anything reads it: `model.source` as a local file, a Hugging Face Hub id
(`hf://ORG/NAME[@REVISION][/PATH/IN/REPO]`, resolved through huggingface_hub and its cache: `hub`) or a
transformers checkpoint (a hub id or a `save_pretrained` folder with `model.task`, exported to ONNX once and
kept in the store: `export`). Every room above reads the ONNX file that `resolve` hands back; `origin` (the repo,
the commit it resolved to, the task) goes into the artifact key and the manifest.

Light at the top: nothing here imports huggingface_hub, transformers or torch until a source asks for them."""

from __future__ import annotations

from pathlib import Path

from gpux.sources.ref import HUB, TASKS, HubRef, Resolved, Say, is_hub, needs_resolving, parse_hub


def resolve(source: str, task: str | None, root: Path, say: Say) -> Resolved:
    """The ONNX file `source` means: an .onnx in a hub repo as the cache holds it, or a checkpoint (hub or local
    folder) exported for `task`; raises GpuxError with one line (`say` locates it)."""
    from gpux.sources import export, hub

    if not is_hub(source):
        return export.exported(export.local_checkpoint(root / source, say), task, root, say)
    ref = hub.checked_ref(source, task, say)
    if ref.is_onnx:
        return hub.onnx_file(ref, say)
    return export.exported(hub.checkpoint(ref, say), task, root, say)


__all__ = ["HUB", "TASKS", "HubRef", "Resolved", "is_hub", "needs_resolving", "parse_hub", "resolve"]
