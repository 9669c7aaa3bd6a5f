"""Text pre-processing: a text becomes token ids (one row), with its attention mask and token type ids for the
inputs that take them, by a tokenizer.json read with Hugging Face's `tokenizers` library. A text longer than
max_length is refused or truncated with a warning, as declared."""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpux.arrays import Feeds
from gpux.config.inputs import TextSteps
from gpux.errors import InputError, reading_file
from gpux.files import stamp as file_stamp
from gpux.optional import require

TEXT_SUFFIXES = (".txt",)


@functools.lru_cache(maxsize=8)
def _load(path: str, stamp: tuple[int, ...], max_length: int) -> tuple[Any, Any, int | None]:
    """(plain, truncating) tokenizers of one file, and the pad id its own padding settings name."""
    tokenizers = require("tokenizers", "text")
    plain = tokenizers.Tokenizer.from_file(path)
    pad_id = (plain.padding or {}).get("pad_id")
    plain.no_padding()
    plain.no_truncation()
    truncating = tokenizers.Tokenizer.from_file(path)
    truncating.no_padding()
    truncating.enable_truncation(max_length)
    return plain, truncating, pad_id


def tokenizer(path: Path, steps: TextSteps) -> tuple[Any, Any, int]:
    """The tokenizers for `path` (reloaded when the file changes) and the pad id; a ValueError says why not."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from exc
    require("tokenizers", "text")
    try:
        plain, truncating, own = _load(str(path), tuple(file_stamp(st)), steps.max_length)
    except Exception as exc:  # the tokenizers library raises a bare Exception for a bad file
        raise ValueError(f"not a tokenizer.json the tokenizers library reads: {str(exc).splitlines()[0]}") from exc
    pad_id = plain.token_to_id(steps.pad_token) if steps.pad_token is not None else own
    if steps.pad_token is not None and pad_id is None:
        raise ValueError(f"pad_token {steps.pad_token!r} is not in the tokenizer's vocabulary")
    return plain, truncating, pad_id or 0


def read_text(source: Any, name: str) -> str:
    """A str is the text; a path (pathlib.Path, os.PathLike) a UTF-8 file; bytes UTF-8 text."""
    if isinstance(source, str):
        return source
    try:
        with reading_file(name, "a text file"):
            if isinstance(source, bytes | bytearray | memoryview):
                return bytes(source).decode("utf-8")
            if isinstance(source, os.PathLike):
                return Path(source).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    raise InputError(f"{name}: text inputs take a str, a path or UTF-8 bytes, not {type(source).__name__}")


@dataclass(frozen=True)
class Spans:
    """Where each token of a tokenized text came from (the text's Placement): its characters' (start, end) in the
    text, and whether it is a special token ([CLS], [SEP]: none of the text's); positions past them are padding."""

    text: str
    offsets: tuple[tuple[int, int], ...]
    special: tuple[bool, ...]


def text_feeds(source: Any, steps: TextSteps, path: Path, ids_input: str, name: str) -> Feeds:
    """{ids_input: [1, tokens] ids, and the mask and type ids under the inputs named by the steps} as int64 (cast
    to the inputs' dtypes by the caller). A text over max_length is refused or truncated, as declared."""
    return text_input(source, steps, path, ids_input, name)[0]


def text_input(source: Any, steps: TextSteps, path: Path, ids_input: str, name: str) -> tuple[Feeds, Spans]:
    """The text's feeds (`text_feeds`) and where its tokens lie in it."""
    import numpy as np

    try:
        plain, truncating, pad_id = tokenizer(path, steps)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from exc
    text = read_text(source, name)
    enc = plain.encode(text, add_special_tokens=steps.special_tokens)
    if len(enc.ids) > steps.max_length:
        message = f"{name}: {len(enc.ids)} tokens, longer than max_length {steps.max_length}"
        if steps.truncation == "error":
            raise InputError(message, hint="shorten the text, or declare truncation: warn to truncate it")
        warnings.warn(f"{message}: truncated", UserWarning, stacklevel=2)
        enc = truncating.encode(text, add_special_tokens=steps.special_tokens)
    n = len(enc.ids)
    width = steps.max_length if steps.padding == "max_length" else n
    ids = np.full((1, width), pad_id, np.int64)
    ids[0, :n] = enc.ids
    out = {ids_input: ids}
    for target, values in ((steps.mask, enc.attention_mask), (steps.type_ids, enc.type_ids)):
        if target is not None:
            row = np.zeros((1, width), np.int64)
            row[0, :n] = values
            out[target] = row
    spans = Spans(text, tuple(tuple(o) for o in enc.offsets), tuple(bool(m) for m in enc.special_tokens_mask))
    return out, spans
