"""What a transformers checkpoint's own files say (read as JSON, without transformers): its labels
(`config.json` id2label), how long a text may be, its tokenizer.json (an image checkpoint: its
preprocessor_config.json instead, read by `vision`), and sentence-transformers' pooling and normalisation
(`modules.json`, `1_Pooling/config.json`). `gpux init` writes gpux.yml from these; the export wraps
the pooling into the graph."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.errors import GpuxError
from gpux.sources.ref import Say

POOLING_MODES = ("cls", "mean", "max", "mean_sqrt_len", "lasttoken")  # what the exported graph computes
_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max",
                 "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len", "pooling_mode_lasttoken": "lasttoken",
                 "pooling_mode_weightedmean_tokens": "weightedmean"}
_MODULES = {"Transformer": "transformer", "Pooling": "pooling", "Normalize": "normalize"}  # those gpux takes
LONGEST = 512  # a tokenizer that states no sane limit: the usual BERT-family position limit


@dataclass(frozen=True, kw_only=True)
class Facts:
    """A checkpoint, as its files describe it."""

    folder: Path
    labels: tuple[str, ...]  # id2label in id order ('' for a feature extractor)
    multi_label: bool  # problem_type multi_label_classification: sigmoid per label, not softmax
    max_length: int
    pooling: str  # one of POOLING_MODES
    normalize: bool
    sentence_transformers: bool  # pooling read from modules.json (else mean, unnormalised: docs/hub.md)
    vocab_size: int
    images: bool = False  # an image checkpoint: preprocessor_config.json, no tokenizer

    @property
    def tokenizer(self) -> Path:
        return self.folder / "tokenizer.json"


def _json(path: Path, say: Say) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GpuxError(say(f"cannot read the checkpoint's {path.name}: {exc}")) from exc
    if not isinstance(data, dict | list):
        raise GpuxError(say(f"the checkpoint's {path.name} is not a JSON object"))
    return data if isinstance(data, dict) else {"modules": data}


IMAGE_TASKS = ("image-classification",)  # tasks whose checkpoint takes images (its preprocessor_config.json)


def read_facts(folder: Path, say: Say, task: str | None = None) -> Facts:
    if not (folder / "config.json").is_file():
        raise GpuxError(say(f"{folder} holds no config.json: not a transformers checkpoint (save_pretrained writes "
                            "one)"))
    images = task in IMAGE_TASKS
    if images and not (folder / "preprocessor_config.json").is_file():
        raise GpuxError(say(f"{folder} holds no preprocessor_config.json (the image preprocess is read from it)"),
                        hint="save the image processor beside the weights: AutoImageProcessor.from_pretrained(...)"
                        ".save_pretrained(folder)")
    if not images and not (folder / "tokenizer.json").is_file():
        raise GpuxError(say(f"{folder} holds no tokenizer.json (the text preprocess reads that file)"),
                        hint="save a fast tokenizer beside the weights: AutoTokenizer.from_pretrained(...)"
                        ".save_pretrained(folder)")
    config = _json(folder / "config.json", say)
    id2label = config.get("id2label") or {}
    labels = tuple(str(id2label[k]) for k in sorted(id2label, key=int))
    pooling, normalize, st = _pooling(folder, say)
    return Facts(folder=folder, labels=labels, multi_label=config.get("problem_type") ==
                 "multi_label_classification", max_length=_max_length(folder, config), pooling=pooling,
                 normalize=normalize, sentence_transformers=st, vocab_size=int(config.get("vocab_size") or 0),
                 images=images)


def _max_length(folder: Path, config: dict[str, Any]) -> int:
    """sentence-transformers' max_seq_length, else the tokenizer's model_max_length, else the model's positions."""
    st = folder / "sentence_bert_config.json"
    tok = folder / "tokenizer_config.json"
    found = [json.loads(st.read_text()).get("max_seq_length") if st.is_file() else None,
             json.loads(tok.read_text()).get("model_max_length") if tok.is_file() else None,
             config.get("max_position_embeddings")]
    sane = [int(n) for n in found if isinstance(n, int | float) and 0 < n <= 1_000_000]
    return min(sane[0], config.get("max_position_embeddings") or sane[0]) if sane else LONGEST


def _pooling(folder: Path, say: Say) -> tuple[str, bool, bool]:
    """(mode, normalize, from sentence-transformers' files)."""
    if not (folder / "modules.json").is_file():
        return "mean", False, False
    modules = _json(folder / "modules.json", say)["modules"]
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    unknown = [k for k in kinds if k not in _MODULES]
    if unknown:
        raise GpuxError(say(f"the checkpoint's modules.json has a {unknown[0]} module; gpux exports Transformer, "
                            "Pooling and Normalize modules only"))
    path = next((m.get("path", "") for m, k in zip(modules, kinds, strict=True) if k == "Pooling"), None)
    if path is None:
        raise GpuxError(say("the checkpoint's modules.json has no Pooling module; gpux exports sentence embeddings"))
    pool = _json(folder / path / "config.json", say)
    modes = [pool["pooling_mode"]] if isinstance(pool.get("pooling_mode"), str) else \
        [mode for key, mode in _POOLING_KEYS.items() if pool.get(key)]
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise GpuxError(say(f"the checkpoint's {path}/config.json pools by {' + '.join(modes) or 'nothing'}; gpux "
                            f"exports one of {', '.join(POOLING_MODES)}"))
    return modes[0], "Normalize" in kinds, True
