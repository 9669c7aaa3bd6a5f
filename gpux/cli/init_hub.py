"""`gpux init hf://ORG/NAME --task TASK` (or a save_pretrained folder with --task): the checkpoint resolved and
exported once (gpux.sources), and a gpux.yml written from its own files: the text inputs with the tokenizer.json
(copied beside gpux.yml) and its max length, or the image input with the preprocessor_config.json's steps, the
labels (`id2label`) and the answer. `gpux init hf://ORG/NAME/x.onnx`
writes the plain ONNX gpux.yml with the hub id as its source."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gpux.errors import UsageError
from gpux.sources.ref import TASKS, Resolved, is_hub, parse_hub

if TYPE_CHECKING:
    from gpux.sources.checkpoint import Facts

TOKENS = 64  # the token count benchmarks and verification samples use (capped at the checkpoint's max length)


def wants_hub(model: str | None, task: str | None) -> bool:
    """`gpux init` takes this MODEL here: a hub id, or a checkpoint folder with --task."""
    return model is not None and (is_hub(model) or task is not None)


def _source(model: str, folder: Path) -> str:
    if is_hub(model):
        if parse_hub(model) is None:
            raise UsageError(f"{model!r} is not a hub id; write hf://ORG/NAME[@REVISION][/PATH/IN/REPO]")
        return model
    if not Path(model).is_dir():
        raise UsageError(f"{model}: --task exports a transformers checkpoint: a save_pretrained folder or hf://ORG/NAME")
    return Path(os.path.relpath(Path(model).resolve(), folder.resolve())).as_posix()


def _name(model: str) -> str:
    ref = parse_hub(model) if is_hub(model) else None
    base = ref.repo.split("/")[1] if ref is not None else Path(model).resolve().name
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-") or "model"
    return name if name[0].isalpha() else f"model-{name}"


def init_hub(model: str, task: str | None, folder: str, force: bool, as_json: bool) -> int:
    from gpux import report
    from gpux.files import atomic_write_text
    from gpux.sources import resolve

    out = Path(folder)
    target = out / "gpux.yml"
    if target.exists() and not force:
        raise UsageError(f"{target}: exists; gpux init does not overwrite it", hint="pass --force to replace it")
    source = _source(model, out)
    ref = parse_hub(source) if is_hub(source) else None
    if ref is not None and not ref.is_onnx and task is None:
        raise UsageError(f"{model} names a checkpoint: pass --task ({' | '.join(TASKS)}), or name an .onnx file in "
                         "the repo (hf://ORG/NAME/onnx/model.onnx)")
    out.mkdir(parents=True, exist_ok=True)
    resolved = resolve(source, task, out.resolve(), lambda message: f"{model}: {message}")
    text, doc = _checkpoint_yaml(model, source, task, resolved, out) if task else _onnx_yaml(model, source, resolved)
    atomic_write_text(target, text)
    from gpux.cli.init import SCHEMA_AT, _check
    from gpux.cli.validate import schema_text

    (out / SCHEMA_AT).parent.mkdir(exist_ok=True)
    atomic_write_text(out / SCHEMA_AT, schema_text())
    _check(target)
    if as_json:
        report.emit_json({"path": str(target), "model": model, "origin": resolved.origin, **doc})
    else:
        report.info(f"wrote {target} ({model} at {resolved.origin.get('revision', 'this folder')[:12]}"
                    f"{', ' + task if task else ''})")
    return 0


def _onnx_yaml(model: str, source: str, resolved: Resolved) -> tuple[str, dict[str, object]]:
    from gpux.cli.init import available_providers, read_model, render

    inputs, outputs, fmt = read_model(resolved.path)
    symbolic = sorted({d for t in inputs + outputs for d in (t.shape or ()) if isinstance(d, str)} - {"batch"})
    text = render(resolved.path, inputs, outputs, fmt, symbolic, available_providers())
    text = re.sub(r"(?m)^name: \S+", f"name: {_name(model)}", text, count=1)
    text = re.sub(r"(?m)^  source: .*$", f"  source: {source}", text, count=1)
    return text, {"inputs": [t.to_dict() for t in inputs], "outputs": [t.to_dict() for t in outputs]}


def _checkpoint_yaml(model: str, source: str, task: str, resolved: Resolved, out: Path
                     ) -> tuple[str, dict[str, object]]:
    from gpux.model.io import read_io
    from gpux.sources.checkpoint import read_facts

    assert resolved.checkpoint is not None  # an exported checkpoint names its folder
    say = lambda message: f"{model}: {message}"  # noqa: E731
    facts = read_facts(resolved.checkpoint, say, task)
    io = read_io(resolved.path)
    names = [t.name for t in io.inputs]
    inputs, doc = _image_inputs(facts, say) if facts.images else _text_inputs(facts, names, out)
    width = io.outputs[0].shape[-1] if io.outputs[0].shape else None
    lines = [
        "# yaml-language-server: $schema=.gpux/gpux.schema.json",
        "# Written by `gpux init` from the checkpoint's own files (docs/hub.md). Check it with `gpux validate`.",
        f"name: {_name(model)}",
        "version: 1.0.0",
        "model:",
        f"  source: {json.dumps(source) if ' ' in source else source}",
        f"  task: {task}                  # exported to ONNX once, checked against the checkpoint in PyTorch",
        "inputs:",
        *inputs,
        "outputs:",
        *_answer(task, facts, width),
        *([] if facts.images else ["benchmark:", f"  shapes: {{tokens: {min(TOKENS, facts.max_length)}}}   # the "
                                   "text length benchmarks and checks use"]),
    ]
    return "\n".join(lines) + "\n", {"task": task, "inputs": names, **doc, "labels": list(facts.labels)}


def _text_inputs(facts: Facts, names: list[str], out: Path) -> tuple[list[str], dict[str, object]]:
    """The text inputs, the first with the text preprocess reading the checkpoint's tokenizer.json (copied beside
    gpux.yml)."""
    shutil.copyfile(facts.tokenizer, out / "tokenizer.json")
    routes = "".join(f", {key}: {name}" for key, name in (("mask", "attention_mask"), ("type_ids", "token_type_ids"))
                     if name in names)
    ranges = {"input_ids": f"[0, {facts.vocab_size}]", "attention_mask": "[1, 2]", "token_type_ids": "[0, 1]"}
    lines = [
        "  input_ids:",
        "    dtype: int64",
        "    shape: [batch, tokens]",
        f"    range: {ranges['input_ids']}",
        "    preprocess:",
        f"      text: {{tokenizer: tokenizer.json, max_length: {facts.max_length}, padding: longest, truncation: warn"
        f"{routes}}}",
        *[f"  {n}: {{dtype: int64, shape: [batch, tokens], range: {ranges[n]}}}" for n in names if n != "input_ids"],
    ]
    return lines, {"max_length": facts.max_length, "pooling": facts.pooling, "normalize": facts.normalize}


def _image_inputs(facts: Facts, say: Callable[[str], str]) -> tuple[list[str], dict[str, object]]:
    """`pixel_values` with the image preprocess the checkpoint's preprocessor_config.json describes."""
    from gpux.sources.vision import image_size, image_steps

    steps = image_steps(facts.folder, say)
    h, w = image_size(steps, say)
    return ["  pixel_values:", "    dtype: float32", f"    shape: [batch, 3, {h}, {w}]", "    preprocess:",
            f"      image: {_flow(steps)}   # preprocessor_config.json"], {"image": steps}


def _flow(value: object) -> str:
    """A value as a YAML flow: {key: value, ...}, [a, b], 1/255 for that rescale factor."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, float):
        return "1/255" if value == 1 / 255 else repr(value)
    return str(value)


def _answer(task: str, facts: Facts, width: int | str | None) -> list[str]:
    if task == "feature-extraction":
        said = "modules.json, 1_Pooling/config.json" if facts.sentence_transformers else "no modules.json: the default"
        norm = ", normalized" if facts.normalize else ""
        return [f"  embedding: {{dtype: float32, shape: [batch, {width}]}}   # {facts.pooling} pooling{norm} ({said})"]
    labels = list(facts.labels) or [f"LABEL_{i}" for i in range(int(width or 0))]
    if task == "token-classification":
        return ["  logits:", "    dtype: float32", f"    shape: [batch, tokens, {width}]",
                f"    labels: {json.dumps(labels)}   # config.json id2label",
                "    postprocess: {softmax: true, tokens: {aggregation: simple}}   # entities, as the pipeline's "
                "aggregation_strategy=simple"]
    score = "sigmoid" if facts.multi_label else "softmax"
    return ["  logits:", "    dtype: float32", f"    shape: [batch, {width}]",
            f"    labels: {json.dumps(labels)}   # config.json id2label",
            f"    postprocess: {{{score}: true, topk: {min(5, len(labels))}}}"]
