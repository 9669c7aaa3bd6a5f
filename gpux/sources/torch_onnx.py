"""A checkpoint exported for its task with `torch.onnx.export` (the TorchScript-based exporter, as
`runtimes.torch_export` uses it), batch and token dims dynamic, and checked against the checkpoint run in PyTorch on
real sentences tokenized by its own tokenizer.json before it is kept.

feature-extraction: the graph ends in the sentence embedding (sentence-transformers' pooling over the attention
mask, then L2 normalisation where its modules say so); text-classification: the logits; token-classification: the
logits of every token; image-classification: the logits of `pixel_values` at the preprocessor's size, checked on
seeded images (`vision`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpux.errors import BuildFailed, GpuxError, first_line
from gpux.optional import require
from gpux.sources.checkpoint import Facts
from gpux.sources.ref import Say

TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
IMAGE_INPUT = "pixel_values"


@dataclass(frozen=True)
class Task:
    """How a task is exported: transformers' Auto class, the graph's output and its dynamic axes."""

    auto: str
    output: str
    axes: tuple[tuple[int, str], ...] = ((0, "batch"),)


EXPORTS = {"feature-extraction": Task("AutoModel", "embedding"),
           "text-classification": Task("AutoModelForSequenceClassification", "logits"),
           "token-classification": Task("AutoModelForTokenClassification", "logits", ((0, "batch"), (1, "tokens"))),
           "image-classification": Task("AutoModelForImageClassification", "logits")}
OUTPUTS = {task: row.output for task, row in EXPORTS.items()}
OPSET = 17
COSINE = 0.9999  # each row of the export against PyTorch's, at fp32
SENTENCES = ("A man is playing a guitar on the stage.", "The weather is lovely today.",
             "Stocks fell sharply after the central bank raised interest rates again this morning, surprising "
             "analysts who had expected a pause.", "Where is the nearest train station?", "ok",
             "She read the letter twice before she understood what it meant.")


def _pooled(torch: Any, mode: str, normalize: bool) -> Any:
    """The pooling head of sentence-transformers (models.Pooling, models.Normalize) as torch code."""

    def pool(hidden: Any, mask: Any) -> Any:
        m = mask.unsqueeze(-1).to(hidden.dtype)
        if mode == "cls":
            out = hidden[:, 0]
        elif mode == "max":
            out = torch.where(m > 0, hidden, torch.finfo(hidden.dtype).min).max(dim=1).values
        elif mode == "lasttoken":
            last = mask.sum(dim=1) - 1
            out = hidden[torch.arange(hidden.shape[0]), last]
        else:
            total = (hidden * m).sum(dim=1)
            count = m.sum(dim=1).clamp(min=1e-9)
            out = total / (count.sqrt() if mode == "mean_sqrt_len" else count)
        return torch.nn.functional.normalize(out, p=2, dim=1) if normalize else out

    return pool


def _wrapper(torch: Any, model: Any, names: list[str], head: Any) -> Any:
    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            feeds = dict(zip(names, args, strict=True))
            return head(self.model(**feeds), feeds)

    return Exported().eval()


def _model(facts: Facts, task: str, say: Say) -> tuple[Any, Any, list[str]]:
    """(torch, the wrapped checkpoint, its input names)."""
    import inspect

    torch = require("torch", "hf")
    transformers = require("transformers", "hf")
    auto = getattr(transformers, EXPORTS[task].auto)
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # its bars would write over gpux's own lines
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = auto.from_pretrained(str(facts.folder), attn_implementation="eager").eval()
    except (OSError, ValueError, KeyError) as exc:
        raise GpuxError(say(f"transformers cannot load the checkpoint for {task}: {first_line(exc)}")) from exc
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    takes = inspect.signature(model.forward).parameters
    names = [IMAGE_INPUT] if facts.images else [n for n in TEXT_INPUTS if n in takes]
    if task == "feature-extraction":
        pool = _pooled(torch, facts.pooling, facts.normalize)
        head = lambda out, feeds: pool(out.last_hidden_state, feeds["attention_mask"])  # noqa: E731  # one line
    else:
        head = lambda out, feeds: out.logits  # noqa: E731
    return torch, _wrapper(torch, model, names, head), names


def tokenized(facts: Facts, texts: tuple[str, ...] | list[str], names: list[str]) -> dict[str, np.ndarray]:
    """`texts` as the text preprocess feeds them: the checkpoint's tokenizer.json, padded to the longest."""
    tokenizers = require("tokenizers", "hf")
    tok = tokenizers.Tokenizer.from_file(str(facts.tokenizer))
    tok.enable_truncation(facts.max_length)
    tok.enable_padding(pad_id=tok.padding["pad_id"] if tok.padding else 0)
    enc = tok.encode_batch(list(texts))
    arrays = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
              "token_type_ids": [e.type_ids for e in enc]}
    return {n: np.asarray(arrays[n], dtype=np.int64) for n in names}


def samples(facts: Facts, names: list[str], count: int, say: Say) -> tuple[dict[str, np.ndarray], list[str]]:
    """`count` real inputs (sentences, or seeded images for an image checkpoint) as the feeds, and their names."""
    if not facts.images:
        return tokenized(facts, SENTENCES[:count], names), [repr(s) for s in SENTENCES[:count]]
    from gpux.sources.vision import image_steps, sample_images

    images = sample_images(image_steps(facts.folder, say), count, say)
    return {IMAGE_INPUT: images}, [f"seeded image {i}" for i in range(count)]


def export_checkpoint(facts: Facts, task: str, path: Path, say: Say) -> dict[str, Any]:
    """Export, then check: every sample's row from ONNX Runtime against PyTorch's (cosine ≥ COSINE); raises
    BuildFailed naming the worst row where it is not."""
    torch, module, names = _model(facts, task, say)
    sample, _ = samples(facts, names, 2, say)
    dims = {0: "batch"} if facts.images else {0: "batch", 1: "tokens"}
    axes = {n: dims for n in names} | {OUTPUTS[task]: dict(EXPORTS[task].axes)}
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(torch.from_numpy(sample[n]) for n in names), str(path), dynamo=False,
                              opset_version=OPSET, input_names=names, output_names=[OUTPUTS[task]],
                              dynamic_axes=axes)
    except Exception as exc:  # the exporter raises anything (RuntimeError, its own classes) for code it cannot trace
        raise BuildFailed(say(f"torch.onnx.export cannot export the checkpoint for {task}: {first_line(exc)}")) \
            from exc
    return _check(torch, module, names, facts, path, say, task)


def _check(torch: Any, module: Any, names: list[str], facts: Facts, path: Path, say: Say, task: str
           ) -> dict[str, Any]:
    ort = require("onnxruntime")
    feeds, named = samples(facts, names, len(SENTENCES), say)
    with torch.no_grad():
        want = module(*(torch.from_numpy(feeds[n]) for n in names)).numpy()
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    a, b = got.reshape(len(named), -1).astype(np.float64), want.reshape(len(named), -1).astype(np.float64)
    cosine = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    worst = int(np.argmin(cosine))
    if cosine[worst] < COSINE:
        raise BuildFailed(say(f"the ONNX export disagrees with the checkpoint in PyTorch: cosine {cosine[worst]:.6f} "
                              f"< {COSINE} on {named[worst]}"))
    free = {axis for axis, _ in EXPORTS[task].axes}
    _static_width(path, {i: n for i, n in enumerate(got.shape) if i not in free})
    return {"inputs": names, "output": list(got.shape[1:]), "checked": {
        "images" if facts.images else "sentences": len(named), "min_cosine": round(float(cosine.min()), 8),
        "max_abs": float(np.abs(a - b).max())}}


def _static_width(path: Path, sizes: dict[int, int]) -> None:
    """The exporter names the output's fixed dims symbolically (the hidden size, the labels): written as sizes."""
    onnx = require("onnx", "hf")
    model = onnx.load(str(path), load_external_data=False)
    for i, dim in enumerate(model.graph.output[0].type.tensor_type.shape.dim):
        if i in sizes:
            dim.dim_value = int(sizes[i])
    onnx.save(model, str(path))
